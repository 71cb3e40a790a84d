//! TLS 1.3 session tickets and 0-RTT for SMB over QUIC, only for clients
//! that ask for them (docs/zero-rtt.md).
//!
//! # Why only on request
//!
//! Samba 4.23+'s QUIC client (ngtcp2 over GnuTLS) frees its TLS state once
//! the handshake is done, so a NewSessionTicket (RFC 8446 4.6.1) that
//! arrives afterwards in a 1-RTT CRYPTO frame (RFC 9001 4.1.3) fails its
//! connection (GnuTLS "Epoch ... out of range", alert internal_error).
//! TLS 1.3 has no standard way to ask for tickets that rustls can send
//! (RFC 9149's ticket_request extension is not implemented there), so a
//! client asks by adding [`ALPN_TICKETS`] to its ALPN list after "smb"
//! (RFC 7301 3.1: the server picks from the client's list; it still picks
//! "smb", MS-SMB2 2.1). Servers that do not know the token ignore it.
//!
//! # How
//!
//! [`TicketsOnRequest`] is quinn's server crypto configuration: it holds
//! two rustls configurations that differ only in `send_tls13_tickets`.
//! A connection's session buffers the Initial CRYPTO bytes until the
//! whole ClientHello (RFC 8446 4.1.2) is there, reads its ALPN list, and
//! then feeds them to a session of the configuration with tickets (the
//! list has [`ALPN_TICKETS`]) or without; every later call goes to that
//! session. Both share one stateful session store, so a ticket is a
//! random key into the server's memory, not an encrypted session.
//!
//! # Replay
//!
//! 0-RTT data can be replayed by whoever recorded it (RFC 8446 8, E.5;
//! RFC 9001 9.2). Two defences:
//!
//! - tickets are single use: rustls accepts early data only with stateful
//!   resumption (`decide_if_early_data_allowed` in rustls 0.23
//!   `server/tls13.rs` requires `!config.ticketer.enabled()`), and looks a
//!   ticket up with `session_storage.take(ticket)`
//!   (`attempt_tls13_ticket_decryption`, same file), which
//!   [`rustls::server::ServerSessionMemoryCache`] implements by removing
//!   the entry. A replayed ClientHello thus finds no session: a full
//!   handshake follows and its early data is rejected (never decrypted);
//!   the server logs it and counts it
//!   ([`smbq_server::metrics::names::QUIC_0RTT_REFUSED`]);
//! - what may run from early data is limited to a NEGOTIATE, which
//!   changes nothing beyond its own connection (see `connection` in
//!   `quic.rs` and [`is_negotiate`]); everything else waits until the
//!   handshake is complete.

use quinn::crypto::rustls::QuicServerConfig;
use quinn_proto::crypto::{self, ExportKeyingMaterialError, ServerConfig as _, HeaderKey, KeyPair, Keys, PacketKey, UnsupportedVersion};
use quinn_proto::transport_parameters::TransportParameters;
use quinn_proto::{ConnectionId, Side, TransportError, TransportErrorCode};
use std::any::Any;
use std::sync::Arc;

/// The ALPN token after "smb" with which a client asks for session
/// tickets (and so for 0-RTT on its next connection). The server never
/// selects it.
pub const ALPN_TICKETS: &[u8] = b"smbq-tickets";

/// Tickets sent to a client that asks (RFC 8446 4.6.1): each is good for
/// one resumption; a second one covers a reconnect that failed after it
/// spent the first.
pub const TICKETS: usize = 2;

/// Sessions the server remembers for resumption (each a few hundred
/// bytes; the oldest go first).
pub const SESSIONS: usize = 4096;

/// The longest ClientHello buffered before one is chosen (quinn's own
/// CRYPTO buffer limit is 16 KiB by default).
const MAX_HELLO: usize = 64 * 1024;

/// What became of a connection's offer of early data, as the server's
/// handshake data ([`quinn::Connecting::handshake_data`] downcasts to
/// [`Handshake`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EarlyData {
    /// The ClientHello had no early_data extension (RFC 8446 4.2.10).
    NotOffered,
    /// Resumed with a ticket and the 0-RTT keys are in use.
    Accepted,
    /// Offered but refused: the ticket was unknown, used already (a
    /// replay) or stale; a full handshake follows and the 0-RTT packets
    /// are dropped undecrypted.
    Refused,
}

/// The handshake data of a server session of [`TicketsOnRequest`].
#[derive(Clone, Debug)]
pub struct Handshake {
    /// The client's ALPN list had [`ALPN_TICKETS`] (tickets are sent).
    pub tickets: bool,
    pub early_data: EarlyData,
    /// What rustls selected ("smb").
    pub protocol: Option<Vec<u8>>,
}

/// quinn's server crypto: sessions with tickets for clients that ask, and
/// without for the others (module documentation).
pub struct TicketsOnRequest {
    with: Arc<QuicServerConfig>,
    without: Arc<QuicServerConfig>,
}

impl TicketsOnRequest {
    /// From the server's rustls configuration: as given for clients that
    /// do not ask for tickets (it must send none), and with [`TICKETS`]
    /// tickets for those that do. Early data needs stateful session
    /// storage and `max_early_data_size` `u32::MAX` (RFC 9001 4.6.1, as
    /// quinn requires); `tls::server_config` sets both.
    pub fn new(tls: rustls::ServerConfig) -> Result<TicketsOnRequest, std::io::Error> {
        let mut with = tls.clone();
        with.send_tls13_tickets = TICKETS;
        let quic = |c| QuicServerConfig::try_from(c).map(Arc::new).map_err(std::io::Error::other);
        Ok(TicketsOnRequest { with: quic(with)?, without: quic(tls)? })
    }
}

impl crypto::ServerConfig for TicketsOnRequest {
    fn initial_keys(&self, version: u32, dst_cid: &ConnectionId) -> Result<Keys, UnsupportedVersion> {
        self.without.initial_keys(version, dst_cid)
    }

    fn retry_tag(&self, version: u32, orig_dst_cid: &ConnectionId, packet: &[u8]) -> [u8; 16] {
        self.without.retry_tag(version, orig_dst_cid, packet)
    }

    fn start_session(self: Arc<Self>, version: u32, params: &TransportParameters) -> Box<dyn crypto::Session> {
        // The session without tickets answers for the connection until
        // the ClientHello is whole (initial keys, retries); it sees no
        // handshake byte before then.
        let session = self.without.clone().start_session(version, params);
        Box::new(Session { session, chosen: None, hello: Vec::new(), config: self, version, params: *params })
    }
}

/// A connection's session: see [`TicketsOnRequest`].
struct Session {
    session: Box<dyn crypto::Session>,
    /// Once the ClientHello is read: the outcome.
    chosen: Option<Handshake>,
    /// Initial CRYPTO bytes until then.
    hello: Vec<u8>,
    config: Arc<TicketsOnRequest>,
    version: u32,
    params: TransportParameters,
}

impl Session {
    /// Choose the configuration for the ClientHello in `self.hello`, feed
    /// it to its session and return what that session returns.
    fn choose(&mut self, hello: Option<Hello>) -> Result<bool, TransportError> {
        let hello = hello.unwrap_or_default();
        if hello.tickets {
            self.session = self.config.with.clone().start_session(self.version, &self.params);
        }
        let bytes = std::mem::take(&mut self.hello);
        let ready = self.session.read_handshake(&bytes)?;
        let early_data = match (hello.early_data, self.session.early_crypto().is_some()) {
            (false, _) => EarlyData::NotOffered,
            (true, true) => EarlyData::Accepted,
            (true, false) => EarlyData::Refused,
        };
        // Logged with the peer's address by `quic::handshake`.
        if early_data == EarlyData::Refused {
            metrics::counter!(smbq_server::metrics::names::QUIC_0RTT_REFUSED).increment(1);
        } else if early_data == EarlyData::Accepted {
            metrics::counter!(smbq_server::metrics::names::QUIC_0RTT_ACCEPTED).increment(1);
        }
        let protocol = self.session.handshake_data().and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok()).and_then(|d| d.protocol);
        self.chosen = Some(Handshake { tickets: hello.tickets, early_data, protocol });
        Ok(ready)
    }
}

impl crypto::Session for Session {
    fn initial_keys(&self, dst_cid: &ConnectionId, side: Side) -> Keys {
        self.session.initial_keys(dst_cid, side)
    }

    fn handshake_data(&self) -> Option<Box<dyn Any>> {
        let chosen = self.chosen.as_ref()?;
        self.session.handshake_data()?;
        Some(Box::new(chosen.clone()))
    }

    fn peer_identity(&self) -> Option<Box<dyn Any>> {
        self.chosen.as_ref().and_then(|_| self.session.peer_identity())
    }

    fn early_crypto(&self) -> Option<(Box<dyn HeaderKey>, Box<dyn PacketKey>)> {
        self.chosen.as_ref().and_then(|_| self.session.early_crypto())
    }

    fn early_data_accepted(&self) -> Option<bool> {
        self.session.early_data_accepted()
    }

    fn is_handshaking(&self) -> bool {
        self.chosen.is_none() || self.session.is_handshaking()
    }

    fn read_handshake(&mut self, buf: &[u8]) -> Result<bool, TransportError> {
        if self.chosen.is_some() {
            return self.session.read_handshake(buf);
        }
        self.hello.extend_from_slice(buf);
        match client_hello(&self.hello) {
            Whole::Wait if self.hello.len() <= MAX_HELLO => Ok(false),
            Whole::Wait => Err(TransportError { code: TransportErrorCode::CRYPTO_BUFFER_EXCEEDED, frame: None, reason: "ClientHello too long".into() }),
            // rustls answers what is not a ClientHello with the right alert.
            Whole::NotHello => self.choose(None),
            Whole::Hello(h) => self.choose(Some(h)),
        }
    }

    fn transport_parameters(&self) -> Result<Option<TransportParameters>, TransportError> {
        match self.chosen {
            Some(_) => self.session.transport_parameters(),
            None => Ok(None),
        }
    }

    fn write_handshake(&mut self, buf: &mut Vec<u8>) -> Option<Keys> {
        self.chosen.as_ref()?;
        self.session.write_handshake(buf)
    }

    fn next_1rtt_keys(&mut self) -> Option<KeyPair<Box<dyn PacketKey>>> {
        self.chosen.as_ref()?;
        self.session.next_1rtt_keys()
    }

    fn is_valid_retry(&self, orig_dst_cid: &ConnectionId, header: &[u8], payload: &[u8]) -> bool {
        self.session.is_valid_retry(orig_dst_cid, header, payload)
    }

    fn export_keying_material(&self, output: &mut [u8], label: &[u8], context: &[u8]) -> Result<(), ExportKeyingMaterialError> {
        match self.chosen {
            Some(_) => self.session.export_keying_material(output, label, context),
            None => Err(ExportKeyingMaterialError),
        }
    }
}

/// What a ClientHello says for our purposes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Hello {
    /// Its ALPN list has [`ALPN_TICKETS`].
    tickets: bool,
    /// It has the early_data extension.
    early_data: bool,
}

#[derive(Debug, PartialEq, Eq)]
enum Whole {
    /// Not all of the first handshake message is here yet.
    Wait,
    /// The first message is not a well-formed ClientHello.
    NotHello,
    Hello(Hello),
}

/// TLS extension types (RFC 8446 4.2).
const EXT_ALPN: u16 = 16;
const EXT_EARLY_DATA: u16 = 42;

/// Read the ClientHello at the start of `b` (the Initial CRYPTO stream):
/// a handshake message (RFC 8446 4: type 1, 24-bit length) whose body is
/// legacy_version, random, legacy_session_id, cipher_suites,
/// legacy_compression_methods, extensions (4.1.2); ALPN's data is a
/// ProtocolNameList (RFC 7301 3.1).
fn client_hello(b: &[u8]) -> Whole {
    let (Some(&kind), Some(len)) = (b.first(), b.get(1..4)) else { return Whole::Wait };
    if kind != 1 {
        return Whole::NotHello;
    }
    let len = usize::from(len[0]) << 16 | usize::from(len[1]) << 8 | usize::from(len[2]);
    let Some(body) = b.get(4..4 + len) else { return Whole::Wait };
    parse_hello(body).map_or(Whole::NotHello, Whole::Hello)
}

struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<usize> {
        self.take(1).map(|b| usize::from(b[0]))
    }
    fn u16(&mut self) -> Option<usize> {
        self.take(2).map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    }
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.take(n)
    }
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(n)
    }
}

fn parse_hello(body: &[u8]) -> Option<Hello> {
    let mut c = Cursor(body);
    c.take(2 + 32)?;
    c.vec8()?;
    c.vec16()?;
    c.vec8()?;
    let mut exts = Cursor(c.vec16()?);
    let mut hello = Hello::default();
    while !exts.0.is_empty() {
        let kind = exts.u16()?;
        let data = exts.vec16()?;
        match kind as u16 {
            EXT_ALPN => {
                let mut list = Cursor(Cursor(data).vec16()?);
                while !list.0.is_empty() {
                    hello.tickets |= list.vec8()? == ALPN_TICKETS;
                }
            }
            EXT_EARLY_DATA => hello.early_data = true,
            _ => {}
        }
    }
    Some(hello)
}

/// Whether a message may run from 0-RTT data: an SMB2 NEGOTIATE
/// (MS-SMB2 2.2.2: ProtocolId 0xFE 'SMB', StructureSize 64, Command 0),
/// alone (NextCommand 0: no compound that would carry something else).
/// NEGOTIATE sets up only its own connection (MS-SMB2 3.3.5.4), so a
/// replayed one changes nothing; anything else, SESSION_SETUP included,
/// waits for the handshake.
pub fn is_negotiate(m: &[u8]) -> bool {
    let u16_at = |i: usize| m.get(i..i + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let next = m.get(20..24).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    m.starts_with(b"\xfeSMB") && u16_at(4) == Some(64) && u16_at(12) == Some(0) && next == Some(0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A ClientHello with the given ALPN names and whether it offers early data.
    fn hello(alpn: &[&[u8]], early: bool) -> Vec<u8> {
        let mut exts = Vec::new();
        let mut ext = |kind: u16, data: &[u8]| {
            exts.extend_from_slice(&kind.to_be_bytes());
            exts.extend_from_slice(&(data.len() as u16).to_be_bytes());
            exts.extend_from_slice(data);
        };
        ext(0, b"\x00\x00"); // server_name, whatever its content
        let mut list = Vec::new();
        for a in alpn {
            list.push(a.len() as u8);
            list.extend_from_slice(a);
        }
        let mut data = (list.len() as u16).to_be_bytes().to_vec();
        data.extend_from_slice(&list);
        ext(EXT_ALPN, &data);
        if early {
            ext(EXT_EARLY_DATA, &[]);
        }
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.extend_from_slice(&[32]);
        body.extend_from_slice(&[1; 32]);
        body.extend_from_slice(&[0, 2, 0x13, 0x01, 1, 0]);
        body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
        body.extend_from_slice(&exts);
        let mut m = vec![1];
        m.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        m.extend_from_slice(&body);
        m
    }

    #[test]
    fn the_token_in_the_alpn_list_asks_for_tickets() {
        assert_eq!(client_hello(&hello(&[b"smb", ALPN_TICKETS], true)), Whole::Hello(Hello { tickets: true, early_data: true }));
        assert_eq!(client_hello(&hello(&[b"smb"], false)), Whole::Hello(Hello { tickets: false, early_data: false }));
        // A name that merely starts like the token is not it.
        assert_eq!(client_hello(&hello(&[b"smb", b"smbq-ticketsX"], false)), Whole::Hello(Hello::default()));
    }

    #[test]
    fn a_hello_in_pieces_waits_and_a_broken_one_is_not_a_hello() {
        let h = hello(&[b"smb", ALPN_TICKETS], false);
        for cut in [0, 1, 3, 4, 40, h.len() - 1] {
            assert_eq!(client_hello(&h[..cut]), Whole::Wait, "cut at {cut}");
        }
        let mut bad = h.clone();
        bad[0] = 2;
        assert_eq!(client_hello(&bad), Whole::NotHello);
        // An extension list that claims more bytes than there are.
        let mut short = h.clone();
        let n = short.len();
        short.truncate(n - 3);
        let len = (n - 3 - 4) as u32;
        short[1..4].copy_from_slice(&len.to_be_bytes()[1..]);
        assert_eq!(client_hello(&short), Whole::NotHello);
    }

    #[test]
    fn only_a_lone_smb2_negotiate_may_run_from_early_data() {
        let mut m = vec![0u8; 64 + 36];
        m[..4].copy_from_slice(b"\xfeSMB");
        m[4] = 64;
        assert!(is_negotiate(&m));
        let mut setup = m.clone();
        setup[12] = 1; // SESSION_SETUP
        assert!(!is_negotiate(&setup));
        let mut compound = m.clone();
        compound[20] = 104;
        assert!(!is_negotiate(&compound));
        let mut sealed = m.clone();
        sealed[0] = 0xfd;
        assert!(!is_negotiate(&sealed));
        assert!(!is_negotiate(&m[..16]));
    }
}
