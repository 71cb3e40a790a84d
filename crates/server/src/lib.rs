//! The SMB2/3 server engine, sans-IO (MS-SMB2 section 3.3).
//!
//! A transport creates a [`Connection`] per client and feeds it whole SMB2
//! messages; everything here is driven with byte buffers and a `now`.
//! Layout: `connection` (framing-level state, timers), `client` (what
//! connections of one ClientGuid share), `dispatch` (compound
//! splitting, command table, signing/sealing), `session`, `tree`, `open`,
//! `files` (global open table), `oplock` (grants and breaks),
//! `durable` (opens that outlive their connection), `cmd/<command>.rs` (one per SMB2 command),
//! `rpc` (named pipes on IPC$).
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod access;
pub mod client;
pub mod cmd;
pub mod config;
pub mod connection;
pub mod credits;
pub mod dispatch;
pub mod durable;
pub mod files;
pub mod job;
pub mod metrics;
pub mod notify;
pub mod open;
pub mod oplock;
pub mod posix;
pub mod rpc;
pub mod server;
pub mod session;
pub mod tree;

pub use config::{check_range, EncryptPolicy, Limits, NetInterface, ServerConfig, ShareConfig};
pub use connection::{Connection, Fatal, TransportInfo, TransportKind, CONTROL_STREAM};
pub use server::{Server, Sources};
