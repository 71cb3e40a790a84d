//! A connection with a logged-on session and two trees (a disk share on
//! a temporary directory, IPC$) for the handlers' unit tests.
#![allow(clippy::unwrap_used)]

use crate::config::{EncryptPolicy, ServerConfig, ShareConfig};
use crate::conn_state::{Connection, Negotiated};
use crate::transport_info::{TransportInfo, TransportKind};
use crate::pending::AsyncWork;
use crate::ctx::{Ctx, HResult, Req};
use crate::open::{access, Open, OpenKind};
use crate::session::{Session, SessionState};
use crate::tree::Tree;
use crate::Server;
use smbq_auth::{ServerAuth, TargetInfo, UserDb};
use smbq_crypto::{PreauthHash, SigningAlgorithm};
use smbq_vfs::{Disposition, Kind, OpenOptions};
use smbq_wire::{Dialect, FileId, Header};
use std::sync::Arc;
use std::time::Instant;

pub struct H {
    pub conn: Connection,
    pub dir: tempfile::TempDir,
}

pub const DISK: u32 = 1;
pub const IPC: u32 = 2;

pub fn new() -> H {
    with_interfaces(Vec::new())
}

/// A server whose transport found `interfaces`.
pub fn with_interfaces(interfaces: Vec<crate::NetInterface>) -> H {
    let dir = tempfile::tempdir().unwrap();
    let share = ShareConfig { encrypt: EncryptPolicy::Off, ..ShareConfig::new("data", dir.path()) };
    let cfg = ServerConfig { shares: vec![share], interfaces, ..Default::default() };
    let server = Arc::new(Server::new(cfg, UserDb::new()).unwrap());
    let info = TransportInfo { kind: TransportKind::Tcp, peer: Some("127.0.0.1:50000".parse().unwrap()), local: None, secure: false, streams: 1 };
    let mut conn = Connection::new(server.clone(), info, Instant::now());
    conn.st.neg = Some(Negotiated {
        dialect: Dialect::SMB302,
        client_guid: [7; 16],
        client_capabilities: 0x7f,
        client_security_mode: 1,
        cipher: None,
        signing: SigningAlgorithm::AesCmac,
        max_io: 8 << 20,
        server_capabilities: 0x44,
        server_security_mode: 1,
        transport_security: false,
        posix: false,
        streams: 1,
    });
    let target = TargetInfo {
        netbios_computer: "SMBQ".into(),
        netbios_domain: "WORKGROUP".into(),
        dns_computer: "smbq".into(),
        dns_domain: String::new(),
    };
    let mut s = Session::new(1, conn.st.id, ServerAuth::new(target, 0), PreauthHash::new(), [0; 3]);
    s.state = SessionState::Valid;
    for (id, name) in [(DISK, "data"), (IPC, "IPC$")] {
        let share = server.share(name).unwrap();
        s.trees.insert(id, Tree { id, share, encrypt: false, maximal_access: access::FILE_ALL });
    }
    conn.st.sessions.insert(1, s);
    H { conn, dir }
}

impl H {
    /// Open (creating) `name` on the disk share with `granted` access.
    pub fn open(&mut self, name: &str, granted: u32) -> FileId {
        let share = self.conn.st.server.share("data").unwrap();
        let opts = OpenOptions { disposition: Disposition::OpenIf, kind: Kind::NonDirectory, read: true, write: true };
        let (h, _) = share.fs().unwrap().open(name, &opts).unwrap();
        let file_key = h.stat().unwrap().file_id;
        self.insert(DISK, share, OpenKind::File(h), granted, file_key)
    }

    pub fn open_pipe(&mut self) -> FileId {
        let share = self.conn.st.server.share("IPC$").unwrap();
        let pipe = crate::rpc::Pipe::open("srvsvc", "SMBQ", &self.conn.st.server.shares(), "alice", 1).unwrap();
        self.insert(IPC, share, OpenKind::Pipe(pipe), access::FILE_ALL, 0)
    }

    fn insert(&mut self, tree_id: u32, share: Arc<crate::share::Share>, kind: OpenKind, granted: u32, file_key: u64) -> FileId {
        let v = self.conn.st.volatile_id();
        let file_id = FileId { persistent: v + 1000, volatile: v };
        let open = Open {
            file_id,
            session_id: 1,
            tree_id,
            share,
            kind,
            path: String::new(),
            access: granted,
            share_access: 7,
            create_options: 0,
            file_key,
            delete_on_close: false,
            dir: None,
            lock_sequences: [crate::open::NO_LOCK_SEQUENCE; 64],
            channel_sequence: 0,
            position: 0,
            durable: None,
            lease: None,
            replay: None,
            home: self.conn.st.id,
            written: false,
            posix: false,
            counted: crate::metrics::Held::NONE,
        };
        self.conn.st.opens.insert(v, open);
        file_id
    }

    /// Run `handler` on `body`; returns its result, the response body
    /// and any async work it queued.
    pub fn call(
        &mut self,
        tree_id: u32,
        handler: fn(&mut Ctx<'_>, &Req<'_>) -> HResult,
        body: &[u8],
    ) -> (HResult, Vec<u8>, Option<AsyncWork>) {
        let hdr = Header { session_id: 1, tree_id, credit_charge: 1, ..Default::default() };
        let mut msg = vec![0u8; 64];
        msg.extend_from_slice(body);
        let mut out = vec![0u8; 64];
        let mut ctx = Ctx {
            conn: &mut self.conn.st,
            hdr: &hdr,
            session_id: 1,
            tree_id,
            related_file_id: None,
            encrypted: false,
            out: &mut out,
            header_start: 0,
            now: Instant::now(),
            go_async: None,
            may_defer: false,
            deferred_since: None,
            disconnect: false,
        };
        let r = handler(&mut ctx, &Req { hdr: &hdr, msg: &msg, tail: &[] });
        let work = ctx.go_async.take();
        (r, out.split_off(64), work)
    }

    /// Run `f` with a context as the dispatcher builds it for retries.
    pub fn with_ctx<T>(&mut self, f: impl FnOnce(&mut Ctx<'_>) -> T) -> (T, Vec<u8>) {
        let hdr = Header { session_id: 1, tree_id: DISK, ..Default::default() };
        let mut out = vec![0u8; 64];
        let mut ctx = Ctx {
            conn: &mut self.conn.st,
            hdr: &hdr,
            session_id: 1,
            tree_id: DISK,
            related_file_id: None,
            encrypted: false,
            out: &mut out,
            header_start: 0,
            now: Instant::now(),
            go_async: None,
            may_defer: false,
            deferred_since: None,
            disconnect: false,
        };
        let t = f(&mut ctx);
        (t, out.split_off(64))
    }
}
