//! Connection migration as the server sees it (RFC 9000 section 9). A
//! client whose address changes (a laptop moving from one network to
//! another, a NAT rebinding) keeps its QUIC connection, and with it its
//! SMB session and opens: quinn moves a server connection to the address
//! of the newest packet that comes from elsewhere (the endpoints steer by
//! connection ID, `smbq_quic::reuseport`, so that packet reaches the
//! endpoint that owns the connection), restarts congestion control and
//! MTU discovery there unless only the port changed, and validates the
//! new path with a PATH_CHALLENGE the client must answer with a
//! PATH_RESPONSE from it; until then the server sends at most three times
//! what it received there, and if no answer comes it goes back to the old
//! path.
//!
//! quinn reports none of this as an event, so [`watch`] samples the
//! connection's remote address and its PATH_RESPONSE count every
//! [`WATCH_EVERY`] and logs each change at info level:
//! `QUIC peer address changed` (from, to) and `QUIC path validated`;
//! each address change is also counted in
//! `smbq_quic_migrations_total`.

use std::time::Duration;
use tracing::info;

/// How often [`watch`] samples a connection (a lock on its state each time).
pub const WATCH_EVERY: Duration = Duration::from_millis(500);

/// Log the connection's address changes and path validations until it
/// closes (sampled every [`WATCH_EVERY`] and once at the end).
pub async fn watch(conn: quinn::Connection) {
    let migrations = metrics::counter!(smbq_server::metrics::names::QUIC_MIGRATIONS);
    let mut peer = conn.remote_address();
    let mut responses = 0;
    let mut tick = tokio::time::interval(WATCH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        // One last sample when it closes: a move shortly before the end
        // (a transfer that finished quickly on the new path) counts too.
        let end = tokio::select! {
            _ = conn.closed() => true,
            _ = tick.tick() => false,
        };
        let now = conn.remote_address();
        let stats = conn.stats();
        if now != peer {
            migrations.increment(1);
            info!(from = %peer, to = %now, path_challenges_sent = stats.frame_tx.path_challenge, "QUIC peer address changed");
            peer = now;
        }
        // The server sends PATH_CHALLENGE only on a migration, so a
        // PATH_RESPONSE answers one (quinn counts every one it receives;
        // it validates the path with the one that echoes the new path's
        // challenge from the new address, and otherwise goes back to the
        // old address after three PTOs, which the next sample shows as
        // another address change).
        if stats.frame_rx.path_response > responses {
            responses = stats.frame_rx.path_response;
            info!(peer = %now, path_responses = responses, "QUIC path validated");
        }
        if end {
            return;
        }
    }
}
