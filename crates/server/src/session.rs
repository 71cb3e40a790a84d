//! Session state (MS-SMB2 3.3.1.8).

use crate::tree::Tree;
use smbq_auth::ServerAuth;
use smbq_crypto::{PreauthHash, Sealer, Signer};
use std::collections::HashMap;
use std::sync::Arc;

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
    /// SIDs the user acts with beyond its own (access::Token): the user
    /// and group SIDs of a Kerberos ticket's PAC.
    pub groups: Vec<smbq_wire::security::Sid>,
    /// Session.SigningKey: verifies binding requests and signs the
    /// SESSION_SETUP answers that are not a success (MS-SMB2 3.3.4.1.1).
    pub signer: Option<Arc<Signer>>,
    /// Session.ChannelList: the connections bound to the session, each
    /// with its Channel.SigningKey (none while its binding authenticates).
    pub channels: Vec<Channel>,
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
    /// The nonce bytes after the counter, drawn once for the session (as
    /// Samba draws its nonce_high).
    nonce_salt: [u8; 3],
}

/// MS-SMB2 3.3.1.14 Channel.
pub struct Channel {
    pub connection: u64,
    pub signer: Option<Arc<Signer>>,
    /// A binding under way on this channel: its exchange and preauth hash
    /// (which starts from the channel's own NEGOTIATE).
    pub binding: Option<(Box<ServerAuth>, PreauthHash)>,
}

impl Session {
    /// A session being set up on connection `connection`; `nonce_salt`
    /// goes into every nonce it seals with.
    pub fn new(id: u64, connection: u64, auth: ServerAuth, preauth: PreauthHash, nonce_salt: [u8; 3]) -> Session {
        Session {
            id,
            state: SessionState::InProgress(Box::new(auth)),
            preauth,
            user: String::new(),
            logon_user: String::new(),
            groups: Vec::new(),
            domain: String::new(),
            signer: None,
            channels: vec![Channel { connection, signer: None, binding: None }],
            encryptor: None,
            decryptor: None,
            signing_required: false,
            encrypt_data: false,
            trees: HashMap::new(),
            ended: Default::default(),
            next_tree_id: 1,
            nonce: 0,
            nonce_salt,
        }
    }

    /// The session's channel on `connection`.
    pub fn channel(&self, connection: u64) -> Option<&Channel> {
        self.channels.iter().find(|c| c.connection == connection)
    }

    pub fn channel_mut(&mut self, connection: u64) -> Option<&mut Channel> {
        self.channels.iter_mut().find(|c| c.connection == connection)
    }

    /// Whether `connection` is one of the session's channels (a session
    /// being set up is its own connection's until it is valid).
    pub fn on(&self, connection: u64) -> bool {
        self.channel(connection).is_some()
    }

    /// The key that signs on `connection`: its channel's (MS-SMB2
    /// 3.3.4.1.1, 3.3.5.2.4).
    pub fn channel_signer(&self, connection: u64) -> Option<&Arc<Signer>> {
        self.channel(connection).and_then(|c| c.signer.as_ref())
    }

    /// The preauth hash a SESSION_SETUP on `connection` extends: its
    /// binding's, while one is under way there, else the session's.
    pub fn preauth_on(&mut self, connection: u64) -> &mut PreauthHash {
        let binding = self.channels.iter_mut().find(|c| c.connection == connection).and_then(|c| c.binding.as_mut());
        match binding {
            Some((_, p)) => p,
            None => &mut self.preauth,
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
    /// counter in the first 8 bytes plus the session's 3 salt bytes (CCM
    /// uses 11).
    pub fn next_nonce(&mut self) -> [u8; 16] {
        self.nonce += 1;
        let mut n = [0u8; 16];
        n[..8].copy_from_slice(&self.nonce.to_le_bytes());
        n[8..11].copy_from_slice(&self.nonce_salt);
        n
    }
}
