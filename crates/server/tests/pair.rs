//! In-memory client <-> server tests: a scripted SMB2 client drives a
//! `Connection` with byte buffers (no sockets, no sleeps), the way
//! quinn-proto's `Pair` drives two endpoints. Hostile inputs live here too.

use smbq_auth::{ClientAuth, UserDb};
use smbq_crypto::{derive_keys, Cipher, PreauthHash, Sealer, Signer, SigningAlgorithm};
use smbq_server::{Connection, Fatal, Server, ServerConfig, ShareConfig, TransportInfo, TransportKind};
use smbq_wire::header::{flags, HEADER_LEN};
use smbq_wire::negotiate::{ctx, encode_request};
use smbq_wire::{framing, Command, Dialect, Header, NtStatus, Put};
use std::sync::Arc;
use std::time::Instant;

struct Pair {
    conn: Connection,
    _dir: tempfile::TempDir,
    next_id: u64,
    session_id: u64,
    tree_id: u32,
    preauth: PreauthHash,
    signer: Option<Signer>,
    /// (client->server sealer, server->client opener)
    seal: Option<(Sealer, Sealer)>,
}

fn server(encrypt: smbq_server::EncryptPolicy) -> (Arc<Server>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut users = UserDb::new();
    users.add("alice", "secret");
    let mut config = ServerConfig::default();
    config.encrypt = encrypt;
    config.limits.failed_logon_delay_ms = 0;
    config.shares.push(ShareConfig { name: "share".into(), path: dir.path().into(), read_only: false, encrypt: Default::default() });
    (Arc::new(Server::new(config, users).unwrap()), dir)
}

fn info() -> TransportInfo {
    TransportInfo { kind: TransportKind::Tcp, peer: None, local: None, secure: false }
}

impl Pair {
    fn new() -> Pair {
        Pair::with_policy(smbq_server::EncryptPolicy::Off)
    }

    fn with_policy(p: smbq_server::EncryptPolicy) -> Pair {
        let (srv, dir) = server(p);
        Pair {
            conn: Connection::new(srv, info(), Instant::now()),
            _dir: dir,
            next_id: 0,
            session_id: 0,
            tree_id: 0,
            preauth: PreauthHash::new(),
            signer: None,
            seal: None,
        }
    }

    fn header(&mut self, command: Command, charge: u16) -> Header {
        let h = Header {
            credit_charge: charge,
            command: command.0,
            credits: 64,
            message_id: self.next_id,
            session_id: self.session_id,
            tree_id: self.tree_id,
            ..Default::default()
        };
        self.next_id += u64::from(charge.max(1));
        h
    }

    fn message(&mut self, command: Command, body: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        self.header(command, 1).encode(&mut m);
        m.extend_from_slice(body);
        m
    }

    /// Feed raw bytes; collect every response frame (prefix stripped, opened if sealed).
    fn raw(&mut self, mut msg: Vec<u8>) -> Result<Vec<Vec<u8>>, Fatal> {
        self.conn.handle_message(Instant::now(), &mut msg)?;
        let mut out = Vec::new();
        while let Some(f) = self.conn.poll_transmit() {
            let len = framing::frame_len(f[..4].try_into().unwrap(), usize::MAX).unwrap();
            assert_eq!(len, f.len() - 4);
            let mut body = f[4..].to_vec();
            if smbq_wire::transform::is_transform(&body) {
                let (_, open) = self.seal.as_ref().expect("sealed response without keys");
                body = open.open(&mut body).expect("server's sealed response opens").to_vec();
            }
            out.push(body);
        }
        Ok(out)
    }

    /// Send one request (signed/sealed as the session needs); one response expected.
    fn call(&mut self, command: Command, body: &[u8]) -> (Header, Vec<u8>) {
        let mut m = self.message(command, body);
        if let Some((seal, _)) = &self.seal {
            let mut buf = vec![0u8; 52];
            buf.extend_from_slice(&m);
            seal.seal(self.session_id, &rand_nonce(), &mut buf);
            m = buf;
        } else if let Some(s) = &self.signer {
            m[16..20].copy_from_slice(&(flags::SIGNED).to_le_bytes());
            s.sign(&mut m);
        }
        let mut r = self.raw(m).expect("connection stays up");
        assert_eq!(r.len(), 1, "one response");
        let resp = r.remove(0);
        (Header::decode(&resp).unwrap(), resp)
    }

    fn negotiate(&mut self) {
        let mut body = Vec::new();
        let mut pre = Vec::new();
        pre.u16(1);
        pre.u16(32);
        pre.u16(1);
        pre.bytes(&[3; 32]);
        let ctxs = vec![(ctx::PREAUTH_INTEGRITY, pre), (ctx::ENCRYPTION, vec![2, 0, 2, 0, 1, 0]), (ctx::SIGNING, vec![1, 0, 1, 0])];
        // Offsets are header-relative: encode after a 64-byte placeholder.
        let mut m = vec![0u8; HEADER_LEN];
        encode_request(&mut m, 0, &[Dialect::SMB210, Dialect::SMB300, Dialect::SMB311], 1, 0x7F, [5; 16], &ctxs);
        body.extend_from_slice(&m[HEADER_LEN..]);
        let req = self.message(Command::NEGOTIATE, &body);
        self.preauth.update(&req);
        let r = self.raw(req).unwrap();
        let h = Header::decode(&r[0]).unwrap();
        assert_eq!(NtStatus(h.status), NtStatus::SUCCESS);
        assert_eq!(u16::from_le_bytes([r[0][68], r[0][69]]), 0x0311);
        self.preauth.update(&r[0]);
    }

    fn login(&mut self, user: &str, password: &str) -> NtStatus {
        self.negotiate();
        let mut auth = ClientAuth::new(user, "", password, 133_000_000_000_000_000);
        let mut token = auth.step(None).unwrap().unwrap();
        loop {
            let mut m = vec![0u8; HEADER_LEN];
            smbq_wire::session_setup::encode_request(&mut m, 0, 1, &token);
            let req = self.message(Command::SESSION_SETUP, &m[HEADER_LEN..]);
            let mut hash = self.preauth.clone();
            hash.update(&req);
            let r = self.raw(req).unwrap();
            let h = Header::decode(&r[0]).unwrap();
            self.session_id = h.session_id;
            let status = NtStatus(h.status);
            let off = u16::from_le_bytes([r[0][68], r[0][69]]) as usize;
            let len = u16::from_le_bytes([r[0][70], r[0][71]]) as usize;
            let server_token = r[0][off..off + len].to_vec();
            if status == NtStatus::MORE_PROCESSING_REQUIRED {
                hash.update(&r[0]);
                self.preauth = hash;
                token = auth.step(Some(&server_token)).unwrap().unwrap();
                continue;
            }
            if status != NtStatus::SUCCESS {
                return status;
            }
            let _ = auth.step(Some(&server_token)).unwrap();
            let keys = derive_keys(0x0311, &auth.session_key().unwrap(), Some(&hash.0), Some(Cipher::Aes128Gcm));
            let signer = Signer::new(SigningAlgorithm::AesCmac, &keys.signing);
            assert!(signer.verify(&r[0]), "final SESSION_SETUP response is signed with the derived key");
            self.signer = Some(signer);
            // Client view: seal with C2S (server's decrypt key), open with S2C.
            let session_flags = u16::from_le_bytes([r[0][66], r[0][67]]);
            if session_flags & 4 != 0 {
                self.seal = Some((Sealer::new(Cipher::Aes128Gcm, &keys.decrypt), Sealer::new(Cipher::Aes128Gcm, &keys.encrypt)));
            }
            return status;
        }
    }

    fn tree_connect(&mut self, share: &str) -> NtStatus {
        let path: Vec<u8> = format!("\\\\127.0.0.1\\{share}").encode_utf16().flat_map(|u| u.to_le_bytes()).collect();
        let mut b = Vec::new();
        b.u16(9);
        b.u16(0);
        b.u16(72);
        b.u16(path.len() as u16);
        b.bytes(&path);
        let (h, _) = self.call(Command::TREE_CONNECT, &b);
        self.tree_id = h.tree_id;
        NtStatus(h.status)
    }
}

fn rand_nonce() -> [u8; 16] {
    let mut n = [0u8; 16];
    n[..8].copy_from_slice(&rand::random::<u64>().to_le_bytes());
    n
}

fn echo_body() -> Vec<u8> {
    vec![4, 0, 0, 0]
}

#[test]
fn login_tree_connect_echo_signed() {
    let mut p = Pair::new();
    assert_eq!(p.login("alice", "secret"), NtStatus::SUCCESS);
    assert_eq!(p.tree_connect("share"), NtStatus::SUCCESS);
    let (h, resp) = p.call(Command::ECHO, &echo_body());
    assert_eq!(NtStatus(h.status), NtStatus::SUCCESS);
    assert!(h.flags & flags::SIGNED != 0);
    assert!(p.signer.as_ref().unwrap().verify(&resp), "response signature verifies");
    assert_eq!(p.tree_connect("nosuch"), NtStatus::BAD_NETWORK_NAME);
}

#[test]
fn encryption_required_session_is_sealed_and_plain_refused() {
    let mut p = Pair::with_policy(smbq_server::EncryptPolicy::Required);
    assert_eq!(p.login("alice", "secret"), NtStatus::SUCCESS);
    assert!(p.seal.is_some(), "server set SMB2_SESSION_FLAG_ENCRYPT_DATA");
    assert_eq!(p.tree_connect("share"), NtStatus::SUCCESS);
    // A signed but unencrypted request is refused.
    let seal = p.seal.take();
    let (h, _) = p.call(Command::ECHO, &echo_body());
    assert_eq!(NtStatus(h.status), NtStatus::SUCCESS, "ECHO needs no session");
    let mut b = Vec::new();
    b.u16(4);
    b.u16(0);
    let (h, _) = p.call(Command::TREE_DISCONNECT, &b);
    assert_eq!(NtStatus(h.status), NtStatus::ACCESS_DENIED);
    p.seal = seal;
    let (h, _) = p.call(Command::TREE_DISCONNECT, &b);
    assert_eq!(NtStatus(h.status), NtStatus::SUCCESS);
}

#[test]
fn wrong_password_is_logon_failure() {
    let mut p = Pair::new();
    assert_eq!(p.login("alice", "wrong"), NtStatus::LOGON_FAILURE);
    let mut q = Pair::new();
    assert_eq!(q.login("mallory", "secret"), NtStatus::LOGON_FAILURE);
}

#[test]
fn failed_logon_answer_is_delayed() {
    let (srv, _d) = server(smbq_server::EncryptPolicy::Off);
    let mut cfg = srv.config.clone();
    cfg.limits.failed_logon_delay_ms = 300;
    let mut users = UserDb::new();
    users.add("alice", "secret");
    let srv = Arc::new(Server::new(cfg, users).unwrap());
    let mut p = Pair::new();
    p.conn = Connection::new(srv, info(), Instant::now());
    p.negotiate();
    let mut auth = ClientAuth::new("alice", "", "wrong", 133_000_000_000_000_000);
    let mut token = auth.step(None).unwrap().unwrap();
    let mut m = vec![0u8; HEADER_LEN];
    smbq_wire::session_setup::encode_request(&mut m, 0, 1, &token);
    let req = p.message(Command::SESSION_SETUP, &m[HEADER_LEN..]);
    let r = p.raw(req).unwrap();
    let h = Header::decode(&r[0]).unwrap();
    p.session_id = h.session_id;
    let off = u16::from_le_bytes([r[0][68], r[0][69]]) as usize;
    let len = u16::from_le_bytes([r[0][70], r[0][71]]) as usize;
    token = auth.step(Some(&r[0][off..off + len])).unwrap().unwrap();
    let mut m = vec![0u8; HEADER_LEN];
    smbq_wire::session_setup::encode_request(&mut m, 0, 1, &token);
    let t0 = Instant::now();
    let req = p.message(Command::SESSION_SETUP, &m[HEADER_LEN..]);
    let r = p.raw(req).unwrap();
    assert!(r.is_empty(), "the failure is held back");
    let due = p.conn.poll_timeout().unwrap();
    assert!(due >= t0 + std::time::Duration::from_millis(300));
    p.conn.handle_timeout(due).unwrap();
    let f = p.conn.poll_transmit().expect("released at the deadline");
    assert_eq!(NtStatus(Header::decode(&f[4..]).unwrap().status), NtStatus::LOGON_FAILURE);
}

#[test]
fn wrong_signature_is_access_denied() {
    let mut p = Pair::new();
    p.login("alice", "secret");
    p.tree_connect("share");
    let mut m = p.message(Command::TREE_DISCONNECT, &[4, 0, 0, 0]);
    m[16..20].copy_from_slice(&(flags::SIGNED).to_le_bytes());
    p.signer.as_ref().unwrap().sign(&mut m);
    m[50] ^= 1;
    let r = p.raw(m).unwrap();
    assert_eq!(NtStatus(Header::decode(&r[0]).unwrap().status), NtStatus::ACCESS_DENIED);
    // ECHO needs no session, but a signed ECHO naming one is verified too.
    let mut m = p.message(Command::ECHO, &echo_body());
    m[16..20].copy_from_slice(&(flags::SIGNED).to_le_bytes());
    p.signer.as_ref().unwrap().sign(&mut m);
    m[60] ^= 1;
    let r = p.raw(m).unwrap();
    assert_eq!(NtStatus(Header::decode(&r[0]).unwrap().status), NtStatus::ACCESS_DENIED);
    // The session still works with a good signature.
    let (h, _) = p.call(Command::TREE_DISCONNECT, &[4, 0, 0, 0]);
    assert_eq!(NtStatus(h.status), NtStatus::SUCCESS);
}

#[test]
fn bad_transform_tag_disconnects() {
    let mut p = Pair::with_policy(smbq_server::EncryptPolicy::Required);
    p.login("alice", "secret");
    let mut m = p.message(Command::ECHO, &echo_body());
    let mut buf = vec![0u8; 52];
    buf.append(&mut m);
    p.seal.as_ref().unwrap().0.seal(p.session_id, &rand_nonce(), &mut buf);
    buf[10] ^= 0x80; // signature (tag)
    assert!(matches!(p.raw(buf), Err(Fatal::PeerMisbehaved(_))));
    assert!(p.conn.is_closed());
}

#[test]
fn unknown_command_is_invalid_parameter() {
    let mut p = Pair::new();
    p.negotiate();
    let m = p.message(Command(0x42), &[4, 0, 0, 0]);
    let r = p.raw(m).unwrap();
    assert_eq!(NtStatus(Header::decode(&r[0]).unwrap().status), NtStatus::INVALID_PARAMETER);
}

#[test]
fn truncated_header_disconnects() {
    let mut p = Pair::new();
    p.negotiate();
    let m = p.message(Command::ECHO, &echo_body());
    assert!(matches!(p.raw(m[..40].to_vec()), Err(Fatal::Malformed(_))));
}

#[test]
fn request_before_negotiate_and_second_negotiate_disconnect() {
    let mut p = Pair::new();
    let m = p.message(Command::ECHO, &echo_body());
    assert!(p.raw(m).is_err());
    let mut q = Pair::new();
    q.negotiate();
    let m = q.message(Command::NEGOTIATE, &[36, 0, 1, 0, 0, 0]);
    assert!(q.raw(m).is_err());
}

#[test]
fn compound_next_command_abuse_disconnects() {
    for next in [0x10u32, 65, 0x1000_0000, 64 + 8 + 4] {
        let mut p = Pair::new();
        p.negotiate();
        let mut m = p.message(Command::ECHO, &echo_body());
        m.extend_from_slice(&[0; 4]);
        m[20..24].copy_from_slice(&next.to_le_bytes());
        assert!(matches!(p.raw(m), Err(Fatal::Malformed(_))), "NextCommand {next:#x}");
    }
}

#[test]
fn compound_of_echoes_answered_in_one_frame() {
    let mut p = Pair::new();
    p.negotiate();
    let mut m = p.message(Command::ECHO, &echo_body());
    m.resize(72, 0);
    m[20..24].copy_from_slice(&72u32.to_le_bytes());
    let second = p.message(Command::ECHO, &echo_body());
    m.extend_from_slice(&second);
    let r = p.raw(m).unwrap();
    assert_eq!(r.len(), 1);
    let h1 = Header::decode(&r[0]).unwrap();
    assert_eq!(h1.next_command % 8, 0);
    let h2 = Header::decode(&r[0][h1.next_command as usize..]).unwrap();
    assert_eq!((h1.message_id, h2.message_id), (1, 2));
}

#[test]
fn message_ids_outside_the_window_disconnect() {
    let mut p = Pair::new();
    p.negotiate();
    // Reuse of id 0.
    let mut m = p.message(Command::ECHO, &echo_body());
    m[24..32].copy_from_slice(&0u64.to_le_bytes());
    assert!(matches!(p.raw(m), Err(Fatal::PeerMisbehaved(_))));
    // A charge far beyond what was granted.
    let mut q = Pair::new();
    q.negotiate();
    let mut m = q.message(Command::ECHO, &echo_body());
    m[6..8].copy_from_slice(&0xFFFFu16.to_le_bytes());
    assert!(matches!(q.raw(m), Err(Fatal::PeerMisbehaved(_))));
}

#[test]
fn smb1_negotiate_gets_wildcard_then_smb2() {
    let (srv, _d) = server(smbq_server::EncryptPolicy::Off);
    let mut c = Connection::new(srv, info(), Instant::now());
    let mut m = vec![0xFF, b'S', b'M', b'B', 0x72];
    m.resize(32, 0);
    m.push(0); // WordCount
    let dialects = b"\x02NT LM 0.12\0\x02SMB 2.002\0\x02SMB 2.???\0";
    m.extend_from_slice(&(dialects.len() as u16).to_le_bytes());
    m.extend_from_slice(dialects);
    c.handle_message(Instant::now(), &mut m).unwrap();
    let f = c.poll_transmit().unwrap();
    let h = Header::decode(&f[4..]).unwrap();
    assert_eq!(h.command, 0);
    assert_eq!(u16::from_le_bytes([f[4 + 68], f[4 + 69]]), 0x02FF);
    // Garbage SMB1 is a clean disconnect.
    let (srv, _d) = server(smbq_server::EncryptPolicy::Off);
    let mut c = Connection::new(srv, info(), Instant::now());
    assert!(c.handle_message(Instant::now(), &mut b"\xffSMB\x72garbage".to_vec()).is_err());
}

#[test]
fn preauth_timeout_closes_unauthenticated_connection() {
    let (srv, _d) = server(smbq_server::EncryptPolicy::Off);
    let t0 = Instant::now();
    let mut c = Connection::new(srv.clone(), info(), t0);
    let deadline = c.poll_timeout().unwrap();
    assert!(deadline > t0);
    assert!(c.handle_timeout(deadline).is_err());
    assert!(c.is_closed());
}

#[test]
fn random_bytes_never_panic() {
    let mut seed = 0x1234_5678_9abc_def0u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut base = Pair::new();
    base.negotiate();
    let template = base.message(Command::CREATE, &[0u8; 120]);
    for _ in 0..3000 {
        let mut p = Pair::new();
        p.negotiate();
        let mut m = template.clone();
        m[24..32].copy_from_slice(&1u64.to_le_bytes());
        for _ in 0..(next() % 8 + 1) {
            let i = (next() as usize) % m.len();
            m[i] = next() as u8;
        }
        let _ = p.raw(m);
    }
}
