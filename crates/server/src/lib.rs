//! The SMB2/3 server engine, sans-IO (MS-SMB2 section 3.3).
//!
//! A transport creates a [`Connection`] per client and feeds it whole SMB2
//! messages; everything here is driven with byte buffers and a `now`.
//!
//! # Layers
//! Each module uses only modules of the layers below its own; modules of
//! one layer may use each other, except the commands: each `cmd/<command>.rs`
//! uses no other command. `scripts/check-layers` reads this list, prints
//! the import graph and fails on an import from a layer above (a module's
//! `#[cfg(test)]` tests, at its end, may use anything).
//!
//! 1. `connection`: a connection as its transport drives it (frames in,
//!    answers out, timers, notices from other connections).
//! 2. `dispatch`: compounds, the command table and its preconditions,
//!    signing and sealing, async completion.
//! 3. `cmd`: one module per SMB2 command.
//! 4. `ctx`: what a command handler sees and answers.
//! 5. `conn_state`, `credits`: one connection's state (what NEGOTIATE
//!    settled, its client's sessions and opens, queued answers) and the
//!    CreditCharge rules.
//! 6. `server`, `client_table`, `durable`, `notify`, `pending`, `teardown`:
//!    what all connections share (shares, users, mailboxes, the ClientGuid
//!    table, parked durable opens, the change-notify watcher), requests
//!    that finish later, and the release of an open.
//! 7. `open`, `session`, `tree`, `share`, `oplock`, `share_mode`,
//!    `byte_range`, `meta`, `dir_cursor`, `access`, `posix_ext`, `rpc`:
//!    the objects and the rules several commands share (share modes,
//!    oplocks and leases, byte-range conflicts, what clients see of a file,
//!    directory listings, security descriptors, the SMB3 POSIX extensions,
//!    named pipes).
//! 8. `files`, `config`, `metrics`, `job`, `transport_info`: the open-file
//!    table (a lock per file), configuration, counters, blocking work
//!    handed to the transport, what the transport says of itself.
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod access;
pub mod byte_range;
pub mod client_table;
pub mod cmd;
pub mod config;
pub mod conn_state;
pub mod connection;
pub mod credits;
pub mod ctx;
pub mod dir_cursor;
pub mod dispatch;
pub mod durable;
pub mod files;
#[cfg(test)]
pub(crate) mod harness;
pub mod job;
pub mod meta;
pub mod metrics;
pub mod notify;
pub mod open;
pub mod oplock;
pub mod pending;
pub mod posix_ext;
pub mod rpc;
pub mod server;
pub mod share;
pub mod share_mode;
pub mod session;
pub mod teardown;
pub mod transport_info;
pub mod tree;

pub use config::{check_range, EncryptPolicy, Limits, NetInterface, ServerConfig, ShareConfig};
pub use conn_state::{Connection, Fatal};
pub use transport_info::{TransportInfo, TransportKind, CONTROL_STREAM};
pub use server::{Server, Sources};
