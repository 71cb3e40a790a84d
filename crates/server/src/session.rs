//! Session state (MS-SMB2 3.3.1.8).

use crate::tree::Tree;
use smbq_auth::ServerAuth;
use smbq_crypto::{PreauthHash, Sealer, Signer};
use std::collections::HashMap;

pub enum SessionState {
    /// Authentication under way; holds the exchange and the session's preauth hash.
    InProgress(Box<ServerAuth>),
    Valid,
    /// LOGOFF processed; removed once its response is sent.
    LoggedOff,
}

pub struct Session {
    pub id: u64,
    pub state: SessionState,
    pub preauth: PreauthHash,
    /// The user now (empty while re-authenticated as anonymous).
    pub user: String,
    /// The user of the first logon: a re-authentication may not change it.
    pub logon_user: String,
    pub domain: String,
    pub signer: Option<Signer>,
    /// Encrypts responses (ServerToClient key).
    pub encryptor: Option<Sealer>,
    /// Decrypts requests (ClientToServer key).
    pub decryptor: Option<Sealer>,
    pub signing_required: bool,
    /// Session-wide EncryptData (MS-SMB2 3.3.1.8).
    pub encrypt_data: bool,
    pub trees: HashMap<u32, Tree>,
    /// Set (from any connection) when a reconnect replaced this session.
    pub ended: std::sync::Arc<std::sync::atomic::AtomicBool>,
    next_tree_id: u32,
    nonce: u64,
}

impl Session {
    pub fn new(id: u64, auth: ServerAuth, preauth: PreauthHash) -> Session {
        Session {
            id,
            state: SessionState::InProgress(Box::new(auth)),
            preauth,
            user: String::new(),
            logon_user: String::new(),
            domain: String::new(),
            signer: None,
            encryptor: None,
            decryptor: None,
            signing_required: false,
            encrypt_data: false,
            trees: HashMap::new(),
            ended: Default::default(),
            next_tree_id: 1,
            nonce: 0,
        }
    }

    pub fn is_valid(&self) -> bool {
        matches!(self.state, SessionState::Valid) && !self.ended.load(std::sync::atomic::Ordering::Acquire)
    }

    pub fn tree_id(&mut self) -> u32 {
        let id = self.next_tree_id;
        self.next_tree_id = self.next_tree_id.wrapping_add(1).max(1);
        id
    }

    /// A nonce never used before with this session's encryption key: a
    /// counter in the first 8 bytes plus 3 random bytes (CCM uses 11).
    pub fn next_nonce(&mut self) -> [u8; 16] {
        self.nonce += 1;
        let mut n = [0u8; 16];
        n[..8].copy_from_slice(&self.nonce.to_le_bytes());
        let r: [u8; 3] = rand::random();
        n[8..11].copy_from_slice(&r);
        n
    }
}
