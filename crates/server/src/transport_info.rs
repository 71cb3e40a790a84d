//! What the transport tells the engine about itself.

use std::net::SocketAddr;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportKind {
    Tcp,
    Quic,
}

/// What the transport tells the engine about itself; the only place SMB
/// logic learns which transport it runs on.
#[derive(Clone, Debug)]
pub struct TransportInfo {
    pub kind: TransportKind,
    pub peer: Option<SocketAddr>,
    /// Our own address on this connection (for FSCTL_QUERY_NETWORK_INTERFACE_INFO).
    pub local: Option<SocketAddr>,
    /// The transport encrypts and authenticates the server (TLS 1.3 in QUIC).
    pub secure: bool,
    /// The most bidirectional streams the transport carries for this
    /// connection: 1 (TCP; QUIC as MS-SMB2 2.1 has it), or more where smbq's
    /// multi-stream extension may be agreed (`smbq_wire::multistream`).
    pub streams: u16,
}

/// The control stream of smbq's multi-stream extension: the connection's
/// first (and, without the extension, only) stream.
pub const CONTROL_STREAM: u16 = 0;
