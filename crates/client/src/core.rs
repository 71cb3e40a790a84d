//! The client's protocol state, no I/O (MS-SMB2 3.2): message ids and
//! credits, preauth integrity, key derivation, signing and sealing.

use smbq_auth::ClientAuth;
use smbq_crypto::{derive_keys, Cipher, PreauthHash, Sealer, Signer, SigningAlgorithm, TRANSFORM_HEADER_LEN};
use smbq_wire::header::{flags, HEADER_LEN};
use smbq_wire::negotiate::{ctx, decode_id_list, encode_request, security_mode, ACCEPT_TRANSPORT_LEVEL_SECURITY};
use smbq_wire::{multistream, posix, transform, Command, Dialect, Header, NtStatus, Put, Reader};

use crate::ClientError;

pub struct Core {
    next_id: u64,
    pub session_id: u64,
    pub tree_id: u32,
    preauth: PreauthHash,
    pub dialect: Dialect,
    pub cipher: Option<Cipher>,
    /// The ciphers offered in NEGOTIATE (3.1.1), in our order of preference
    /// ([`DEFAULT_CIPHERS`] unless the user chose).
    pub offer_ciphers: Vec<Cipher>,
    signing: SigningAlgorithm,
    signer: Option<Signer>,
    /// (seal with the client-to-server key, open with the server-to-client key)
    seal: Option<(Sealer, Sealer)>,
    /// Seal every request once the session has keys.
    pub encrypt: bool,
    pub transport_security: bool,
    /// The server's NEGOTIATE response set SMB2_NEGOTIATE_SIGNING_REQUIRED.
    server_requires_signing: bool,
    nonce: u64,
    /// Transform messages seen in each direction (tests use these).
    pub transforms_received: u64,
    pub transforms_sent: u64,
    /// Requests sent with SMB2_FLAGS_SIGNED.
    pub signed_sent: u64,
    /// Credits granted and not yet spent (MS-SMB2 3.2.4.1.2, 3.2.5.1.4).
    pub credits: u32,
    /// The largest READ and WRITE the server takes (NEGOTIATE), at most [`MAX_IO`].
    pub max_read: u32,
    pub max_write: u32,
    /// Sent in NEGOTIATE; a durable open is reclaimed only by a connection with the same one (MS-SMB2 3.3.5.9.12).
    pub client_guid: [u8; 16],
    /// Message ids of requests sent and not yet answered.
    outstanding: std::collections::HashSet<u64>,
    /// Offer the SMB3 POSIX extensions in NEGOTIATE (3.1.1 only).
    pub offer_posix: bool,
    /// The server answered the POSIX negotiate context with its tag.
    pub posix: bool,
    /// Streams to offer in smbq's multi-stream negotiate context
    /// (`docs/multistream.md`; QUIC only); 1: not offered.
    pub offer_streams: u16,
    /// Streams the server agreed to (1 when it did not answer).
    pub streams: u16,
}

/// The most credits this client keeps: a server granting more (65535 on
/// every answer, say) does not grow our window without bound.
pub const MAX_CREDITS: u32 = 8192;

/// The largest READ or WRITE this client sends (the 1-8 MiB requests).
pub const MAX_IO: u32 = 8 << 20;

/// The ciphers offered by default: AES-128-GCM, AES-128-CCM.
pub const DEFAULT_CIPHERS: [Cipher; 2] = [Cipher::Aes128Gcm, Cipher::Aes128Ccm];

/// The dialects this client offers (MS-SMB2 2.2.3).
const DIALECTS: [Dialect; 3] = [Dialect::SMB300, Dialect::SMB302, Dialect::SMB311];

/// Credits asked for on every request: enough for 8 MiB in flight many times over.
const CREDIT_REQUEST: u16 = 512;

impl Core {
    pub fn new() -> Core {
        Core {
            next_id: 0,
            session_id: 0,
            tree_id: 0,
            preauth: PreauthHash::new(),
            dialect: Dialect::SMB311,
            cipher: None,
            offer_ciphers: DEFAULT_CIPHERS.to_vec(),
            signing: SigningAlgorithm::AesCmac,
            signer: None,
            seal: None,
            encrypt: false,
            transport_security: false,
            server_requires_signing: false,
            nonce: 0,
            transforms_received: 0,
            transforms_sent: 0,
            signed_sent: 0,
            credits: 1,
            max_read: 65536,
            max_write: 65536,
            client_guid: rand::random(),
            outstanding: Default::default(),
            offer_posix: false,
            posix: false,
            offer_streams: 1,
            streams: 1,
        }
    }

    /// A whole request message (header + body), signed or sealed as the
    /// session requires. `charge` is the credit charge.
    pub fn request(&mut self, command: Command, charge: u16, body: &[u8]) -> (u64, Vec<u8>) {
        self.request_with(command, charge, body.len(), |m| m.extend_from_slice(body))
    }

    /// [`Core::request`] with the body written by `encode` straight into the
    /// message (a WRITE's data is copied once); `body_len` sizes the buffer.
    pub fn request_with(&mut self, command: Command, charge: u16, body_len: usize, encode: impl FnOnce(&mut Vec<u8>)) -> (u64, Vec<u8>) {
        let sealing = self.seals();
        let mut m = Vec::with_capacity(TRANSFORM_HEADER_LEN + HEADER_LEN + body_len);
        if sealing {
            m.resize(TRANSFORM_HEADER_LEN, 0);
        }
        let h = self.header(command, charge, 0);
        h.encode(&mut m);
        encode(&mut m);
        if sealing {
            self.seal_in_place(&mut m);
        } else {
            self.sign_in_place(command, &mut m);
        }
        (h.message_id, m)
    }

    /// A compound request (MS-SMB2 3.2.4.1.4): `parts` (command, body)
    /// chained as related operations, each 8-byte aligned and signed, the
    /// whole sealed once when the session seals. Bodies of the second and
    /// later parts name the file as `FileId::RELATED`.
    pub fn compound(&mut self, parts: &[(Command, Vec<u8>)]) -> Vec<u8> {
        let sealing = self.seals();
        let mut m = Vec::new();
        if sealing {
            m.resize(TRANSFORM_HEADER_LEN, 0);
        }
        for (i, (command, body)) in parts.iter().enumerate() {
            let start = m.len();
            let related = if i == 0 { 0 } else { flags::RELATED_OPERATIONS };
            self.header(*command, 1, related).encode(&mut m);
            m.extend_from_slice(body);
            if i + 1 < parts.len() {
                m.resize(start + (m.len() - start).next_multiple_of(8), 0);
                let next = (m.len() - start) as u32;
                m[start + 20..start + 24].copy_from_slice(&next.to_le_bytes());
            }
            if !sealing {
                let mut one = m.split_off(start);
                self.sign_in_place(*command, &mut one);
                m.extend_from_slice(&one);
            }
        }
        if sealing {
            self.seal_in_place(&mut m);
        }
        m
    }

    /// The next request header: a message id and its credits taken.
    fn header(&mut self, command: Command, charge: u16, flags: u32) -> Header {
        let id = self.next_id;
        self.next_id += u64::from(charge.max(1));
        self.credits = self.credits.saturating_sub(u32::from(charge.max(1)));
        self.outstanding.insert(id);
        Header {
            credit_charge: charge,
            command: command.0,
            credits: CREDIT_REQUEST,
            flags,
            message_id: id,
            session_id: self.session_id,
            tree_id: self.tree_id,
            ..Default::default()
        }
    }

    fn seal_in_place(&mut self, m: &mut [u8]) {
        if let Some((sealer, _)) = &self.seal {
            self.nonce += 1;
            let mut n = [0u8; 16];
            n[..8].copy_from_slice(&self.nonce.to_le_bytes());
            sealer.seal(self.session_id, &n, m);
            self.transforms_sent += 1;
        }
    }

    /// Sign one plain message (starting at its SMB2 header) if `command`'s requests are signed.
    fn sign_in_place(&mut self, command: Command, m: &mut [u8]) {
        if let (Some(s), true) = (&self.signer, self.signs(command)) {
            if let Some(f) = m.get_mut(16..20) {
                let v = u32::from_le_bytes([f[0], f[1], f[2], f[3]]) | flags::SIGNED;
                f.copy_from_slice(&v.to_le_bytes());
            }
            s.sign(m);
            self.signed_sent += 1;
        }
    }

    /// MS-SMB2 3.2.4.1.1: requests are signed when the session requires it.
    /// This client signs every unsealed request, except over a transport
    /// that already protects integrity (SMB2_TRANSPORT_CAPABILITIES
    /// accepted on QUIC) where it signs only if the server requires it.
    fn signs(&self, command: Command) -> bool {
        command != Command::SESSION_SETUP && (!self.transport_security || self.server_requires_signing)
    }

    fn seals(&self) -> bool {
        self.encrypt && self.seal.is_some()
    }

    /// Whether `command`'s requests are sealed or signed: if not, their
    /// bytes go out as encoded, and a payload may follow the message
    /// without being copied into it.
    pub fn protects(&self, command: Command) -> bool {
        self.seals() || (self.signer.is_some() && self.signs(command))
    }

    /// Whether a request costing `charge` credits may be sent now; an error
    /// when it never can (nothing in flight whose answer could grant more).
    pub fn may_send(&self, charge: u16) -> Result<bool, ClientError> {
        if self.credits >= u32::from(charge.max(1)) {
            return Ok(true);
        }
        if self.outstanding.is_empty() {
            return Err(ClientError::Protocol(format!("the server left this client {} credits, {} needed, and nothing in flight", self.credits, charge.max(1))));
        }
        Ok(false)
    }

    /// Requests sent and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.outstanding.len()
    }

    /// Account for one plain response message (MS-SMB2 3.2.5.1): it must
    /// answer a request in flight, its credits are added, and its
    /// signature is checked when it carries one or when the request was
    /// signed. `sealed`: it came in a transform message. Returns the
    /// header, or `None` for what answers nothing yet: an interim
    /// STATUS_PENDING, or an unsolicited oplock/lease break.
    pub fn on_response(&mut self, msg: &[u8], sealed: bool) -> Result<Option<Header>, ClientError> {
        let h = Header::decode(msg).map_err(|e| ClientError::Protocol(format!("bad response header: {e}")))?;
        if h.flags & flags::SERVER_TO_REDIR == 0 {
            return Err(ClientError::Protocol("a request where a response was expected".into()));
        }
        if h.message_id == u64::MAX && h.command == Command::OPLOCK_BREAK.0 {
            return Ok(None);
        }
        let interim = h.is_async() && NtStatus(h.status) == NtStatus::PENDING;
        let known = if interim { self.outstanding.contains(&h.message_id) } else { self.outstanding.remove(&h.message_id) };
        // With several streams (docs/multistream.md) an interim comes on
        // the control stream and the final answer on the request's, which
        // may overtake it: a late interim still brings the credits it
        // grants (the final answer after an interim grants none).
        if interim && !known && h.message_id < self.next_id {
            self.credits = (self.credits + u32::from(h.credits)).min(MAX_CREDITS);
            return Ok(None);
        }
        if !known {
            return Err(ClientError::Protocol(format!("response to message {} that was never sent or already answered", h.message_id)));
        }
        self.credits = (self.credits + u32::from(h.credits)).min(MAX_CREDITS);
        if !sealed && !interim && h.command != Command::SESSION_SETUP.0 {
            if let Some(s) = &self.signer {
                let signed = h.flags & flags::SIGNED != 0;
                if signed && !s.verify(msg) {
                    return Err(ClientError::Protocol(format!("the signature of a {:?} response does not verify", Command(h.command))));
                }
                if !signed && self.signs(Command(h.command)) && !NtStatus(h.status).is_error() {
                    return Err(ClientError::Protocol(format!("an unsigned {:?} response in a signed session", Command(h.command))));
                }
            }
        }
        Ok((!interim).then_some(h))
    }

    /// Unseal a response if it is a transform message.
    pub fn open(&mut self, mut msg: Vec<u8>) -> Result<Vec<u8>, ClientError> {
        if !transform::is_transform(&msg) {
            return Ok(msg);
        }
        let (_, opener) = self.seal.as_ref().ok_or_else(|| ClientError::Protocol("sealed response without keys".into()))?;
        let plain = opener.open(&mut msg).map_err(|e| ClientError::Protocol(format!("cannot open response: {e}")))?.to_vec();
        self.transforms_received += 1;
        Ok(plain)
    }

    /// NEGOTIATE request body: SMB 3.1.1 with preauth, encryption and
    /// signing contexts, SMB2_TRANSPORT_CAPABILITIES when asked, and the
    /// POSIX extensions' context when [`Core::offer_posix`].
    pub fn negotiate_body(&self, transport_caps: bool) -> Vec<u8> {
        let mut pre = Vec::new();
        pre.u16(1);
        pre.u16(32);
        pre.u16(1);
        pre.bytes(&rand::random::<[u8; 32]>());
        // MS-SMB2 2.2.3.1.2: CipherCount, then the ids.
        let mut ciphers = Vec::new();
        ciphers.u16(self.offer_ciphers.len() as u16);
        for c in &self.offer_ciphers {
            ciphers.u16(c.id());
        }
        let mut ctxs = vec![
            (ctx::PREAUTH_INTEGRITY, pre),
            (ctx::ENCRYPTION, ciphers),
            (ctx::SIGNING, vec![2, 0, 2, 0, 1, 0]),    // AES-GMAC, AES-CMAC
        ];
        if transport_caps {
            ctxs.push((ctx::TRANSPORT_CAPABILITIES, ACCEPT_TRANSPORT_LEVEL_SECURITY.to_le_bytes().to_vec()));
        }
        if self.offer_posix {
            ctxs.push((posix::NEGOTIATE_CONTEXT, posix::TAG.to_vec()));
        }
        if self.offer_streams > 1 {
            ctxs.push((multistream::NEGOTIATE_CONTEXT, multistream::encode(self.offer_streams)));
        }
        let mut m = vec![0u8; HEADER_LEN];
        encode_request(&mut m, 0, &DIALECTS, security_mode::SIGNING_ENABLED, 0x44, self.client_guid, &ctxs);
        m.split_off(HEADER_LEN)
    }

    pub fn hash(&mut self, msg: &[u8]) {
        self.preauth.update(msg);
    }

    /// Read the NEGOTIATE response (plain `resp`, request already hashed).
    pub fn on_negotiate(&mut self, resp: &[u8]) -> Result<(), ClientError> {
        check(resp, Command::NEGOTIATE)?;
        let mut r = Reader::new(resp.get(HEADER_LEN..).unwrap_or(&[]));
        let bad = |_| ClientError::Protocol("bad NEGOTIATE response".into());
        r.skip(2).map_err(bad)?;
        self.server_requires_signing = r.u16().map_err(bad)? & security_mode::SIGNING_REQUIRED != 0;
        self.dialect = Dialect(r.u16().map_err(bad)?);
        if !DIALECTS.contains(&self.dialect) {
            return Err(ClientError::Protocol(format!("the server chose dialect {:#06x}, which this client did not offer", self.dialect.0)));
        }
        let ctx_count = r.u16().map_err(bad)? as usize;
        r.skip(16).map_err(bad)?;
        let caps = r.u32().map_err(bad)?;
        r.skip(4).map_err(bad)?;
        // Without SMB2_GLOBAL_CAP_LARGE_MTU a READ or WRITE is at most 64 KiB (MS-SMB2 3.2.4.6).
        let cap = if caps & 0x04 != 0 { MAX_IO } else { 65536 };
        self.max_read = r.u32().map_err(bad)?.clamp(4096, cap);
        self.max_write = r.u32().map_err(bad)?.clamp(4096, cap);
        r.skip(16 + 4).map_err(bad)?;
        let ctx_off = r.u32().map_err(bad)? as usize;
        if self.dialect == Dialect::SMB311 {
            self.hash(resp);
            let tail = resp.get(ctx_off..).unwrap_or(&[]);
            for c in smbq_wire::negotiate::decode_contexts(tail, ctx_count).map_err(bad)? {
                match c.kind {
                    ctx::ENCRYPTION => self.cipher = decode_id_list(c.data).ok().and_then(|l| l.first().and_then(|id| Cipher::from_id(*id))),
                    ctx::SIGNING => {
                        if let Some(a) = decode_id_list(c.data).ok().and_then(|l| l.first().and_then(|id| SigningAlgorithm::from_id(*id))) {
                            self.signing = a;
                        }
                    }
                    ctx::TRANSPORT_CAPABILITIES => self.transport_security = true,
                    // Only an answer to our offer, carrying the one variant we know.
                    posix::NEGOTIATE_CONTEXT => self.posix = self.offer_posix && c.data == posix::TAG,
                    // Never more than offered (a server that grants more is held to the offer).
                    multistream::NEGOTIATE_CONTEXT if self.offer_streams > 1 => {
                        self.streams = multistream::decode(c.data).map_or(1, |n| n.min(self.offer_streams));
                    }
                    _ => {}
                }
            }
        } else if self.dialect == Dialect::SMB300 || self.dialect == Dialect::SMB302 {
            self.cipher = Some(Cipher::Aes128Ccm);
        }
        Ok(())
    }

    /// Derive keys after the final SESSION_SETUP; `hash` is the preauth
    /// value over the last request. Turns on sealing if the server asked.
    pub fn on_session_established(&mut self, auth: &ClientAuth, hash: &PreauthHash, session_flags: u16, resp: &[u8]) -> Result<(), ClientError> {
        let key = auth.session_key().ok_or_else(|| ClientError::Protocol("no session key".into()))?;
        let pre = (self.dialect == Dialect::SMB311).then_some(&hash.0);
        let keys = derive_keys(self.dialect.0, &key, pre, self.cipher);
        let signer = Signer::new(if self.dialect.is_smb3() { self.signing } else { SigningAlgorithm::HmacSha256 }, &keys.signing);
        if resp.get(16..20).map(|f| f[0] & flags::SIGNED as u8 != 0).unwrap_or(false) && !signer.verify(resp) {
            return Err(ClientError::Protocol("final SESSION_SETUP response signature does not verify".into()));
        }
        self.signer = Some(signer);
        if let Some(c) = self.cipher {
            self.seal = Some((Sealer::new(c, &keys.decrypt), Sealer::new(c, &keys.encrypt)));
        }
        if session_flags & smbq_wire::session_setup::session_flags::ENCRYPT_DATA != 0 {
            self.encrypt = true;
        }
        Ok(())
    }

    pub fn preauth(&self) -> PreauthHash {
        self.preauth.clone()
    }

    pub fn set_preauth(&mut self, h: PreauthHash) {
        self.preauth = h;
    }
}

impl Default for Core {
    fn default() -> Self {
        Core::new()
    }
}

/// Header of `resp`, checked to answer `command`; error statuses become errors.
pub fn check(resp: &[u8], command: Command) -> Result<Header, ClientError> {
    let h = Header::decode(resp).map_err(|e| ClientError::Protocol(format!("bad response header: {e}")))?;
    if h.command != command.0 {
        return Err(ClientError::Protocol(format!("response to {:?} for {command:?}", Command(h.command))));
    }
    let st = NtStatus(h.status);
    if st.is_error() && st != NtStatus::MORE_PROCESSING_REQUIRED {
        return Err(ClientError::Status(command, st));
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use smbq_wire::negotiate::{NegotiateRequest, NegotiateResponse};

    /// A NEGOTIATE response for 3.1.1 with `contexts` (a SERVER_TO_REDIR header).
    fn negotiate_response(contexts: Vec<(u16, Vec<u8>)>) -> Vec<u8> {
        let mut m = Vec::new();
        Header { command: Command::NEGOTIATE.0, flags: flags::SERVER_TO_REDIR, ..Default::default() }.encode(&mut m);
        NegotiateResponse { security_mode: 1, dialect: Dialect::SMB311, server_guid: [0; 16], capabilities: 0, max_transact: 65536, max_read: 65536, max_write: 65536, system_time: 0, start_time: 0, security_buffer: &[], contexts }.encode(&mut m, 0);
        m
    }

    #[test]
    fn posix_extensions_are_offered_and_agreed_only_with_their_tag() {
        let mut c = Core::new();
        let mut m = vec![0u8; HEADER_LEN];
        m.extend(c.negotiate_body(false));
        assert!(NegotiateRequest::decode(&m).unwrap().context(posix::NEGOTIATE_CONTEXT).is_none());
        c.offer_posix = true;
        let mut m = vec![0u8; HEADER_LEN];
        m.extend(c.negotiate_body(false));
        assert_eq!(NegotiateRequest::decode(&m).unwrap().context(posix::NEGOTIATE_CONTEXT), Some(&posix::TAG[..]));

        let preauth = (ctx::PREAUTH_INTEGRITY, vec![1, 0, 0, 0, 1, 0]);
        c.on_negotiate(&negotiate_response(vec![preauth.clone(), (posix::NEGOTIATE_CONTEXT, posix::TAG.to_vec())])).unwrap();
        assert!(c.posix);
        for other in [vec![preauth.clone()], vec![preauth.clone(), (posix::NEGOTIATE_CONTEXT, vec![0; 16])]] {
            let mut c = Core { offer_posix: true, ..Core::new() };
            c.on_negotiate(&negotiate_response(other)).unwrap();
            assert!(!c.posix);
        }
        // An answer to what was never offered does not count.
        let mut c = Core::new();
        c.on_negotiate(&negotiate_response(vec![preauth, (posix::NEGOTIATE_CONTEXT, posix::TAG.to_vec())])).unwrap();
        assert!(!c.posix);
    }

    #[test]
    fn an_interim_overtaken_by_its_final_answer_brings_its_credits() {
        let mut c = Core::new();
        let (id, _) = c.request(Command::WRITE, 1, &[]);
        let answer = |interim: bool, credits: u16, message_id: u64| {
            let mut m = Vec::new();
            let status = if interim { NtStatus::PENDING } else { NtStatus::SUCCESS };
            Header { command: Command::WRITE.0, flags: flags::SERVER_TO_REDIR | flags::ASYNC_COMMAND, status: status.0, credits, message_id, async_id: 1, ..Default::default() }.encode(&mut m);
            m
        };
        let before = c.credits;
        assert!(c.on_response(&answer(false, 0, id), false).unwrap().is_some());
        assert_eq!(c.in_flight(), 0);
        assert!(c.on_response(&answer(true, 10, id), false).unwrap().is_none());
        assert_eq!(c.credits, before + 10);
        // A final answer twice, or an interim for what was never sent, is wrong.
        assert!(c.on_response(&answer(false, 0, id), false).is_err());
        assert!(c.on_response(&answer(true, 1, id + 1), false).is_err());
    }
}
