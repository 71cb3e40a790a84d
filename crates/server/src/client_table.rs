//! What the connections of one client share: its sessions, their opens
//! and the durable v2 CREATEs still waiting
//! (Samba's smbXsrv_client). Connections that negotiate SMB 2.1 or later
//! with the same ClientGuid share one [`Client`], so a session
//! established on one of them can be bound to another as a further
//! channel (MS-SMB2 3.3.5.5.2 multichannel) and then reaches its trees and
//! opens from either.
//!
//! A connection works on its client's tables while it handles a message,
//! a timeout or a notice, with the client locked: [`crate::Connection`]
//! moves the tables into its [`crate::conn_state::ConnState`] for that
//! time and back after, so handlers see plain maps. A client is locked
//! before the file table and the mailboxes, never after them.

use crate::open::Open;
use crate::session::Session;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

#[derive(Default)]
pub struct ClientState {
    pub sessions: HashMap<u64, Session>,
    pub opens: HashMap<u64, Open>,
    /// CreateGuids of durable v2 CREATEs that wait (for a break), and the
    /// connection each waits on: a replay of one is FILE_NOT_AVAILABLE.
    pub creating: HashMap<[u8; 16], u64>,
}

#[derive(Default)]
pub struct Client(Mutex<ClientState>);

impl Client {
    pub fn lock(&self) -> MutexGuard<'_, ClientState> {
        // A panic while it is held is a bug; the tables stay usable.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The clients by ClientGuid, held as long as one of their connections lives.
#[derive(Default)]
pub struct Registry(Mutex<HashMap<[u8; 16], Weak<Client>>>);

impl Registry {
    /// The client `guid` names, made if no live connection has it.
    pub fn join(&self, guid: [u8; 16]) -> Arc<Client> {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = m.get(&guid).and_then(Weak::upgrade) {
            return c;
        }
        m.retain(|_, c| c.strong_count() > 0);
        let c = Arc::new(Client::default());
        m.insert(guid, Arc::downgrade(&c));
        c
    }
}
