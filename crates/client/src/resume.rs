//! Reconnecting over QUIC in 0-RTT (docs/zero-rtt.md).
//!
//! A [`Resumption`] keeps one QUIC endpoint, and with it one rustls client
//! configuration and its session cache, for every connection made through
//! it (a [`crate::share::Share`] and its reconnects). Its TLS asks for
//! session tickets (RFC 8446 4.6.1) by adding `smbq-tickets` to the ALPN
//! list after "smb" (what smbq's server looks for; others ignore it) and
//! allows early data. A later connection then resumes the session and
//! sends its NEGOTIATE as 0-RTT data (RFC 9001 4.6.1, RFC 8446 2.3), and
//! the server answers it with its handshake: the connection is logged on
//! one round trip sooner. SESSION_SETUP and everything after go once the
//! handshake is complete (the client waits for the NEGOTIATE response,
//! which comes with the server's Finished). If the server refuses the
//! early data, the NEGOTIATE is sent again on a new stream once the
//! handshake is done (quinn drops streams opened in rejected 0-RTT),
//! costing the round trip saved and nothing more.
//!
//! NEGOTIATE is the one request sent early because replaying it changes
//! nothing (MS-SMB2 3.3.5.4 sets up only its own connection); smbq's
//! server also runs nothing else from early data.

use crate::{Client, ClientError, QuicTarget, Reader, Writer};
use smbq_quic::StreamChunks;
use std::sync::{Arc, Mutex};

/// The ALPN token that asks smbq's server for session tickets
/// (`smbq_transport::quic::zero_rtt::ALPN_TICKETS`).
pub const ALPN_TICKETS: &[u8] = b"smbq-tickets";

/// One endpoint and TLS session cache shared by the connections made
/// through it (see the module documentation). The first connection
/// decides the endpoint's settings (trust, client certificate, windows);
/// later ones reuse them whatever their own [`QuicTarget`] says beyond
/// the address and name.
#[derive(Default)]
pub struct Resumption {
    /// The endpoint and its client configuration (whose TLS configuration
    /// holds the session cache; a traced connection uses a copy of it).
    endpoint: Mutex<Option<(quinn::Endpoint, quinn::ClientConfig)>>,
}

impl std::fmt::Debug for Resumption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resumption").finish_non_exhaustive()
    }
}

/// What became of a connection's 0-RTT.
#[derive(Default)]
pub enum ZeroRtt {
    /// Not tried: no [`Resumption`], or no ticket for the server yet.
    #[default]
    NotTried,
    /// The connection is in 0-RTT: the NEGOTIATE goes as early data.
    Pending(quinn::ZeroRttAccepted, Arc<smbq_quic::Counters>),
    /// The server took the early data.
    Accepted,
    /// The server refused it; NEGOTIATE went again after the handshake.
    Refused,
}

impl ZeroRtt {
    /// Some(accepted) once 0-RTT was tried and settled.
    pub fn accepted(&self) -> Option<bool> {
        match self {
            ZeroRtt::Accepted => Some(true),
            ZeroRtt::Refused => Some(false),
            _ => None,
        }
    }
}

impl Resumption {
    /// The endpoint and its client configuration, made for `t` the first time.
    fn endpoint(&self, t: &QuicTarget<'_>) -> Result<(quinn::Endpoint, quinn::ClientConfig), ClientError> {
        let mut kept = self.endpoint.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(made) = kept.as_ref() {
            return Ok(made.clone());
        }
        let cfg = crate::client_config(t, |tls| {
            tls.alpn_protocols.push(ALPN_TICKETS.to_vec());
            tls.enable_early_data = true;
        })?;
        let ep = crate::quic_endpoint_for(t, cfg.clone())?;
        *kept = Some((ep.clone(), cfg.clone()));
        Ok((ep, cfg))
    }
}

/// Connect to `t` through `r`: in 0-RTT if the cache has a ticket for the
/// server, else with a full handshake (which brings tickets for next time).
pub(crate) async fn connect(t: QuicTarget<'_>, r: &Resumption) -> Result<Client, ClientError> {
    let (ep, cfg) = r.endpoint(&t)?;
    let (connecting, mut trace) = crate::connecting(&ep, &cfg, &t)?;
    let (conn, zero_rtt) = match connecting.into_0rtt() {
        Ok((conn, accepted)) => (conn, ZeroRtt::Pending(accepted, t.udp.clone())),
        Err(connecting) => (connecting.await.map_err(crate::handshake_error)?, ZeroRtt::NotTried),
    };
    crate::started(&mut trace, &ep, &conn);
    let (send, recv) = conn.open_bi().await.map_err(|e| ClientError::Quic(e.to_string()))?;
    let mut c = Client::on_quic(ep, conn, send, StreamChunks::new(recv, t.udp.clone()));
    c.zero_rtt = zero_rtt;
    c.qlog = trace;
    Ok(c)
}

/// Send the NEGOTIATE `m` ([`Client::negotiate`]): as 0-RTT data if the
/// connection is in 0-RTT, then, once the server has answered the
/// handshake, again on a new stream if it refused the early data.
pub(crate) async fn send_negotiate(c: &mut Client, m: Vec<u8>) -> Result<(), ClientError> {
    let ZeroRtt::Pending(accepted, udp) = std::mem::take(&mut c.zero_rtt) else {
        return c.send(m).await;
    };
    let early = c.send(m.clone()).await;
    // The server's answer to the ClientHello and its 0.5-RTT answer to the
    // NEGOTIATE come in the same flight: waiting for the first costs nothing.
    if accepted.await {
        c.zero_rtt = ZeroRtt::Accepted;
        return early;
    }
    c.zero_rtt = ZeroRtt::Refused;
    let conn = c.quic.as_ref().map(|(_, conn)| conn.clone()).ok_or_else(|| ClientError::Quic("not a QUIC connection".into()))?;
    if let Some(e) = conn.close_reason() {
        return Err(ClientError::Quic(e.to_string()));
    }
    let (send, recv) = conn.open_bi().await.map_err(|e| ClientError::Quic(e.to_string()))?;
    c.rd = Reader::Quic(StreamChunks::new(recv, udp));
    c.wr = Writer::Quic(send);
    // The same bytes: the server never saw the first copy, so message id,
    // credits and the preauth hash (MS-SMB2 3.2.5.2) stay as they are.
    c.send(m).await
}
