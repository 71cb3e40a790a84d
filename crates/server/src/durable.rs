//! Durable handles v1 and v2 (MS-SMB2 3.3.5.9.6, 3.3.5.9.7, 3.3.5.9.10,
//! 3.3.5.9.12, 3.3.7.1): an open that outlives its connection.
//!
//! When a connection is lost (or its session is replaced by a reconnect
//! naming it as PreviousSessionId) its durable opens that still hold a
//! batch oplock are parked here, server-wide, with their file, share
//! modes, oplock and byte-range locks, until the client reclaims them
//! on a new connection or their timeout passes. A new open that would
//! need their oplock broken closes them instead: nobody is there to
//! acknowledge a break.

use crate::open::DISCONNECTED;
use crate::files::OpenOwner;
use crate::open::Open;
use crate::server::Server;
use smbq_wire::oplock_break::level;
use smbq_wire::{NtStatus, Reader};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// v1 handles and v2 requests with Timeout 0 are kept this long (Samba
/// and Windows default); a v2 request may ask up to [`MAX_TIMEOUT`].
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
pub const MAX_TIMEOUT: Duration = Duration::from_secs(300);

/// A durable request in a CREATE (DHnQ or DH2Q).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub v2: bool,
    pub create_guid: [u8; 16],
    /// The timeout asked for (v2), in milliseconds; 0 is the default.
    pub timeout_ms: u32,
}

/// A reconnect in a CREATE (DHnC or DH2C).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reconnect {
    pub v2: bool,
    pub persistent: u64,
    pub create_guid: [u8; 16],
}

fn guid(r: &mut Reader<'_>) -> Result<[u8; 16], NtStatus> {
    r.array().map_err(|_| NtStatus::INVALID_PARAMETER)
}

/// DH2Q data (MS-SMB2 2.2.13.2.11): Timeout, Flags, Reserved, CreateGuid.
pub fn parse_request_v2(data: &[u8]) -> Result<Request, NtStatus> {
    if data.len() != 32 {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let mut r = Reader::new(data);
    let timeout_ms = r.u32().map_err(|_| NtStatus::INVALID_PARAMETER)?;
    r.skip(12).map_err(|_| NtStatus::INVALID_PARAMETER)?;
    Ok(Request { v2: true, create_guid: guid(&mut r)?, timeout_ms })
}

/// DHnC data (2.2.13.2.4): the FileId; DH2C (2.2.13.2.12): FileId,
/// CreateGuid, Flags.
pub fn parse_reconnect(data: &[u8], v2: bool) -> Result<Reconnect, NtStatus> {
    if data.len() != if v2 { 36 } else { 16 } {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    let mut r = Reader::new(data);
    let persistent = r.u64().map_err(|_| NtStatus::INVALID_PARAMETER)?;
    r.skip(8).map_err(|_| NtStatus::INVALID_PARAMETER)?;
    let create_guid = if v2 { guid(&mut r)? } else { [0; 16] };
    Ok(Reconnect { v2, persistent, create_guid })
}

/// The timeout a v2 request gets.
pub fn timeout(requested_ms: u32) -> Duration {
    match requested_ms {
        0 => DEFAULT_TIMEOUT,
        ms => Duration::from_millis(u64::from(ms)).min(MAX_TIMEOUT),
    }
}

/// DH2Q response data (2.2.14.2.12): Timeout in ms, Flags (not persistent).
pub fn response_v2(t: Duration) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&(t.as_millis() as u32).to_le_bytes());
    b
}

/// A durable open whose connection is gone.
pub struct Parked {
    pub open: Open,
    pub deadline: Instant,
}

/// Parked opens by persistent FileId.
#[derive(Default)]
pub struct Table {
    parked: HashMap<u64, Parked>,
}

impl Server {
    fn lock_durable(&self) -> std::sync::MutexGuard<'_, Table> {
        self.durable.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keep `open` for a reconnect, if it may
    /// be kept (MS-SMB2 3.3.7.1: durable, and its batch oplock or its
    /// lease's handle caching held, not breaking); otherwise hand it back
    /// to be closed.
    pub(crate) fn park(&self, mut open: Open, now: Instant) -> Option<Open> {
        let Some(d) = &open.durable else { return Some(open) };
        let old = open.owner();
        let new = OpenOwner { connection: DISCONNECTED, volatile: open.file_id.volatile };
        {
            let Some(mut e) = self.files.get(open.file_key) else { return Some(open) };
            let lease = e.opens.iter().find(|o| o.owner == old).and_then(|o| o.lease);
            let keep = match lease {
                Some(id) => e.leases.iter().any(|l| l.id == id && l.state & crate::oplock::HANDLE != 0 && l.breaking.is_none()),
                None => e.open_mut(old).is_some_and(|o| o.oplock == level::BATCH && o.breaking.is_none()),
            };
            if !keep && !d.resilient {
                return Some(open);
            }
            e.reown(old, new);
        }
        let deadline = now + d.timeout;
        open.home = DISCONNECTED;
        self.lock_durable().parked.insert(open.file_id.persistent, Parked { open, deadline });
        None
    }

    /// Take a parked open back for a reconnect by `user` of client
    /// `client_guid` on connection `connection`, naming lease `lease_key`
    /// if any (MS-SMB2 3.3.5.9.7 and 3.3.5.9.12): OBJECT_NAME_NOT_FOUND
    /// when there is none to take (or its lease is another), ACCESS_DENIED
    /// when it is another user's.
    pub(crate) fn reclaim(&self, rc: &Reconnect, user: &str, client_guid: [u8; 16], lease_key: Option<[u8; 16]>, connection: u64) -> Result<Open, NtStatus> {
        let mut t = self.lock_durable();
        let p = t.parked.get(&rc.persistent).ok_or(NtStatus::OBJECT_NAME_NOT_FOUND)?;
        let d = p.open.durable.as_ref().ok_or(NtStatus::OBJECT_NAME_NOT_FOUND)?;
        //= MS-SMB2 3.3.5.9.12
        //# If Open.CreateGuid is not equal to the CreateGuid in the
        //# request, the server MUST fail the request with
        //# STATUS_OBJECT_NAME_NOT_FOUND.
        // A v1 open has no CreateGuid (zero here, as in Samba's
        // smb2srv_open_recreate): a v2 reconnect naming the zero GUID takes
        // it back (smb2.durable-open.reopen2-lease), one naming another GUID
        // does not (smb2.durable-v2-open.reopen2c). A v1 reconnect names
        // none and may take a v2 open back (smb2.durable-v2-open.reopen2b).
        // The client GUID must match only for leases: an oplock's open may
        // come back from a client that restarted (smb2.durable-v2-open.reopen1a).
        let lease_differs = p.open.lease != lease_key || (p.open.lease.is_some() && d.client_guid != client_guid);
        if (rc.v2 && d.create_guid != rc.create_guid) || lease_differs {
            return Err(NtStatus::OBJECT_NAME_NOT_FOUND);
        }
        if d.user != user.to_lowercase() {
            return Err(NtStatus::ACCESS_DENIED);
        }
        let mut open = t.parked.remove(&rc.persistent).ok_or(NtStatus::OBJECT_NAME_NOT_FOUND)?.open;
        drop(t);
        let old = open.owner();
        open.home = connection;
        if let Some(mut e) = self.files.get(open.file_key) {
            e.reown(old, open.owner());
        }
        Ok(open)
    }

    /// Whether open `persistent` is still held by a connection other than
    /// `connection` (one whose loss the server may not have noticed yet).
    pub(crate) fn open_elsewhere(&self, persistent: u64, connection: u64) -> bool {
        self.files.any_open(|o| {
            o.owner.volatile == persistent && o.owner.connection != connection && o.owner.connection != DISCONNECTED
        })
    }

    /// Close the parked opens whose time is up, and those of file `key`
    /// that `purge` selects (an open that needs their oplock broken).
    pub(crate) fn expire_parked(&self, now: Instant, mut purge: impl FnMut(&Parked) -> bool) {
        let gone: Vec<Parked> = {
            let mut t = self.lock_durable();
            let ids: Vec<u64> = t.parked.iter().filter(|(_, p)| now >= p.deadline || purge(p)).map(|(&k, _)| k).collect();
            ids.iter().filter_map(|k| t.parked.remove(k)).collect()
        };
        for p in gone {
            crate::teardown::release(self, p.open, now);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::harness;
    use crate::open::access;

    /// Park open `fid` of `h` as a durable open of user "alice" with no
    /// lease, granted through DHnQ (`v2` false) or DH2Q.
    fn park(h: &mut harness::H, fid: smbq_wire::FileId, v2: bool, create_guid: [u8; 16], now: Instant) {
        let mut open = h.conn.st.opens.remove(&fid.volatile).unwrap();
        open.durable = Some(crate::open::Durable { v2, create_guid, client_guid: [7; 16], user: "alice".into(), timeout: DEFAULT_TIMEOUT, resilient: false });
        open.home = DISCONNECTED;
        h.conn.st.server.lock_durable().parked.insert(fid.persistent, Parked { open, deadline: now + DEFAULT_TIMEOUT });
    }

    fn reconnect(v2: bool, fid: smbq_wire::FileId, create_guid: [u8; 16]) -> Reconnect {
        Reconnect { v2, persistent: fid.persistent, create_guid }
    }

    //= MS-SMB2 3.3.5.9.12
    //= type=test
    //# If Open.CreateGuid is not equal to the CreateGuid in the
    //# request, the server MUST fail the request with
    //# STATUS_OBJECT_NAME_NOT_FOUND.
    #[test]
    fn a_v2_reconnect_takes_a_v1_open_back_by_its_empty_create_guid() {
        let mut h = harness::new();
        let now = Instant::now();
        let server = std::sync::Arc::clone(&h.conn.st.server);
        let fid = h.open("v1.dat", access::FILE_ALL);
        park(&mut h, fid, false, [0; 16], now);
        let other = reconnect(true, fid, [9; 16]);
        assert_eq!(server.reclaim(&other, "alice", [7; 16], None, 5).err(), Some(NtStatus::OBJECT_NAME_NOT_FOUND));
        let open = server.reclaim(&reconnect(true, fid, [0; 16]), "alice", [7; 16], None, 5).unwrap();
        assert_eq!((open.file_id, open.home), (fid, 5));
    }

    #[test]
    fn a_v2_open_comes_back_to_its_create_guid_or_a_v1_reconnect() {
        let mut h = harness::new();
        let now = Instant::now();
        let server = std::sync::Arc::clone(&h.conn.st.server);
        let fid = h.open("v2.dat", access::FILE_ALL);
        park(&mut h, fid, true, [3; 16], now);
        for guid in [[0; 16], [4; 16]] {
            assert_eq!(server.reclaim(&reconnect(true, fid, guid), "alice", [7; 16], None, 5).err(), Some(NtStatus::OBJECT_NAME_NOT_FOUND));
        }
        assert!(server.reclaim(&reconnect(true, fid, [3; 16]), "alice", [7; 16], None, 5).is_ok());
        let fid = h.open("v2b.dat", access::FILE_ALL);
        park(&mut h, fid, true, [3; 16], now);
        assert!(server.reclaim(&reconnect(false, fid, [0; 16]), "alice", [7; 16], None, 5).is_ok());
    }
}
