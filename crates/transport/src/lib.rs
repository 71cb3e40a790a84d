//! Transports for the SMB engine. They only move framed messages: each
//! connection gets a sans-IO [`smbq_server::Connection`] and a
//! [`smbq_server::TransportInfo`]; no SMB logic lives here.
//!
//! Per connection (`connection`) an `engine` runs the connection state
//! machine (its file I/O and crypto are blocking work, done on a blocking
//! thread while the connection is busy: an idle connection holds no
//! thread, and [`max_blocking_threads`] sizes the pool for it) on Direct
//! TCP frames (MS-SMB2 2.1; SMB over QUIC uses the same framing on its
//! stream, see `frame`), and a writer task (`writer`) sends what the
//! engine cannot send at once.
//!
//! Over TCP ([`tcp`]) the engine reads the socket itself (`tcp::input`),
//! copying the bytes out of it into the frame. Over QUIC ([`quic`]) a
//! reader task per stream (`quic::streams`) cuts quinn's chunks into
//! frames: quinn has already copied each packet once, and a large frame's
//! payload goes on in the chunks quinn returns (a frame's tail), so that a
//! WRITE reaches the file without another copy.
//!
//! Besides: [`tls`] (certificates and TLS for QUIC), [`interfaces`]
//! (the addresses multichannel clients are told), [`quic_path`] (migration
//! seen by the server) and [`keep_large_buffers_on_heap`].

#![deny(clippy::undocumented_unsafe_blocks)]

mod connection;
mod engine;
mod frame;
pub mod interfaces;
mod malloc;
pub mod quic;
pub mod quic_path;
pub mod tcp;
pub mod tls;
mod writer;

pub use connection::SEND_TIMEOUT;
pub use engine::max_blocking_threads;
pub use malloc::keep_large_buffers_on_heap;
