//! What a QUIC connection's congestion control is doing, for the server
//! and the client alike: its [`figures`] at one moment (the server's
//! `smbq_quic_*` metrics, the client's `--json`), and a [`qlog`] trace of
//! each connection on request (`SMBQ_QLOG_DIR`).
#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod figures;
pub mod qlog;

pub use figures::Figures;
