//! The client side of SPNEGO with NTLMSSP/NTLMv2 (MS-NLMP 3.1.5, RFC 4178)
//! or Kerberos (MS-KILE 3.2, RFC 4121, through `smbq_gssapi`).

use crate::ntlm::{self, Challenge};
use crate::spnego::{self, NegState, Token, KRB5_OID, MS_KRB5_OID, NTLMSSP_OID};
use crate::AuthError;
use smbq_gssapi::{Initiator, Step};

/// Flags the client asks for in NEGOTIATE_MESSAGE (MS-NLMP 2.2.2.5).
const CLIENT_FLAGS: u32 = ntlm::NEGOTIATE_UNICODE
    | ntlm::REQUEST_TARGET
    | ntlm::NEGOTIATE_SIGN
    | ntlm::NEGOTIATE_SEAL
    | ntlm::NEGOTIATE_NTLM
    | ntlm::NEGOTIATE_ALWAYS_SIGN
    | ntlm::NEGOTIATE_EXTENDED_SESSIONSECURITY
    | ntlm::NEGOTIATE_VERSION
    | ntlm::NEGOTIATE_128
    | ntlm::NEGOTIATE_KEY_EXCH
    | ntlm::NEGOTIATE_56;

enum State {
    Start,
    SentNegotiate { negotiate: Vec<u8> },
    /// SPNEGO only: waiting for the server's accept-completed.
    SentAuthenticate { flags: u32, sent_mic: bool, key: [u8; 16] },
    /// Kerberos: a token went out (the AP-REQ first), waiting for the
    /// server's NegTokenResp; `sent_mic`: ours went with it.
    Kerberos { sent_mic: bool },
    Finished,
}

/// Client side of one authentication: produces NTLMSSP tokens (wrapped in
/// SPNEGO unless built with [`ClientAuth::new_raw`]) for user/domain/password,
/// or, built with [`ClientAuth::kerberos`], a Kerberos AP-REQ in SPNEGO
/// from the user's credential cache.
/// An empty user name authenticates anonymously (MS-NLMP 3.2.5.1.2).
pub struct ClientAuth {
    user: String,
    domain: String,
    nt_hash: [u8; 16],
    now_filetime: u64,
    spnego: bool,
    state: State,
    /// NTLM's exported session key (16 bytes) or the Kerberos session key
    /// (MS-KILE 3.1.1.2; 32 bytes for AES-256 enctypes).
    session_key: Option<Vec<u8>>,
    /// Kerberos: MIT's context, and the AP-REQ made when it was built.
    kerberos: Option<Kerberos>,
    /// The client challenge and exported session key to use instead of
    /// random ones (a test that repeats a conversation byte for byte).
    fixed: Option<([u8; 8], [u8; 16])>,
}

struct Kerberos {
    initiator: Initiator,
    ap_req: Option<Vec<u8>>,
}

/// The SPNEGO MechTypeList we send: NTLMSSP only.
fn our_mech_types() -> Vec<u8> {
    spnego::mech_type_list(&[NTLMSSP_OID])
}

/// The MechTypeList of a Kerberos logon: MS-KRB5 then KRB5, as Windows
/// and Samba send them (MS-KILE 3.2.5.1, MS-SPNG 3.3.5.1).
fn kerberos_mech_types() -> Vec<u8> {
    spnego::mech_type_list(&[MS_KRB5_OID, KRB5_OID])
}

impl ClientAuth {
    pub fn new(user: &str, domain: &str, password: &str, now_filetime: u64) -> ClientAuth {
        ClientAuth {
            user: user.to_string(),
            domain: domain.to_string(),
            nt_hash: ntlm::nt_hash(password),
            now_filetime,
            spnego: true,
            state: State::Start,
            session_key: None,
            kerberos: None,
            fixed: None,
        }
    }

    /// Kerberos for the service `cifs/host` (MS-KILE 3.2.1: the SMB
    /// server's host name, not its address), with the credentials of the
    /// default credential cache (`KRB5CCNAME`). The AP-REQ is made here,
    /// asking the KDC for the service ticket unless the cache holds one: a
    /// missing or expired TGT, an unknown service or an unreachable KDC is
    /// an error now, in MIT's words (prefixed "no Kerberos credentials: run
    /// kinit" when the cache has no usable TGT), not at the server.
    pub fn kerberos(host: &str) -> Result<ClientAuth, smbq_gssapi::Error> {
        let mut initiator = Initiator::new(&format!("cifs@{host}"))?;
        let ap_req = match initiator.step(None) {
            Ok(Step::Continue(t)) => t,
            // RFC 2743 2.2.1: mutual authentication waits for the AP-REP.
            Ok(Step::Done(_)) => {
                return Err(smbq_gssapi::Error { major: 0, minor: 0, message: "Kerberos finished without the server's AP-REP".into() })
            }
            Err(e) => {
                // RFC 2744 3.9.1: GSS_S_NO_CRED (7), GSS_S_CREDENTIALS_EXPIRED (11).
                let routine = (e.major >> 16) & 0xff;
                if routine == 7 || routine == 11 {
                    return Err(smbq_gssapi::Error { message: format!("no Kerberos credentials: run kinit ({})", e.message), ..e });
                }
                return Err(smbq_gssapi::Error { message: format!("Kerberos ticket for cifs/{host}: {}", e.message), ..e });
            }
        };
        Ok(ClientAuth {
            kerberos: Some(Kerberos { initiator, ap_req: Some(ap_req) }),
            ..ClientAuth::new("", "", "", 0)
        })
    }

    /// Use `client_challenge` and `session_key` where a random client
    /// challenge and exported session key would go.
    pub fn with_randomness(self, client_challenge: [u8; 8], session_key: [u8; 16]) -> ClientAuth {
        ClientAuth { fixed: Some((client_challenge, session_key)), ..self }
    }

    /// Like [`ClientAuth::new`] but sends bare NTLMSSP messages, no SPNEGO.
    pub fn new_raw(user: &str, domain: &str, password: &str, now_filetime: u64) -> ClientAuth {
        ClientAuth { spnego: false, ..ClientAuth::new(user, domain, password, now_filetime) }
    }

    /// `input`: None for the first token, then the server's token. Returns
    /// the next token to send, or None when the exchange is complete. With
    /// SPNEGO the server's final token is checked (accept-completed and its
    /// mechListMIC); raw NTLMSSP is complete once AUTHENTICATE is produced,
    /// and a later empty server token is accepted.
    pub fn step(&mut self, input: Option<&[u8]>) -> Result<Option<Vec<u8>>, AuthError> {
        match (std::mem::replace(&mut self.state, State::Finished), input) {
            (State::Start, None) if self.kerberos.is_some() => {
                let ap_req = self.kerberos.as_mut().and_then(|k| k.ap_req.take()).ok_or(AuthError::Malformed("token out of sequence"))?;
                self.state = State::Kerberos { sent_mic: false };
                Ok(Some(spnego::encode_init(&kerberos_mech_types(), Some(&ap_req))))
            }
            (State::Kerberos { sent_mic }, Some(input)) => self.on_kerberos_reply(input, sent_mic),
            (State::Start, None) => {
                let negotiate = ntlm::encode_negotiate(CLIENT_FLAGS);
                let out = if self.spnego { spnego::encode_init(&our_mech_types(), Some(&negotiate)) } else { negotiate.clone() };
                self.state = State::SentNegotiate { negotiate };
                Ok(Some(out))
            }
            (State::SentNegotiate { negotiate }, Some(input)) => self.on_challenge(&negotiate, input).map(Some),
            (State::SentAuthenticate { flags, sent_mic, key }, Some(input)) => {
                let Token::Resp(r) = spnego::decode(input)? else {
                    return Err(AuthError::Malformed("expected NegTokenResp"));
                };
                match r.neg_state {
                    Some(NegState::AcceptCompleted) => {}
                    Some(NegState::Reject) => return Err(AuthError::LogonFailure),
                    _ => return Err(AuthError::Malformed("expected accept-completed")),
                }
                match r.mech_list_mic {
                    Some(mic) => {
                        let expected = ntlm::first_mic(flags, &key, false, &our_mech_types())?;
                        if !ntlm::ct_eq(mic, &expected) {
                            return Err(AuthError::LogonFailure);
                        }
                    }
                    None if sent_mic => return Err(AuthError::LogonFailure),
                    None => {}
                }
                Ok(None)
            }
            (State::Finished, Some([])) if self.session_key.is_some() => Ok(None),
            _ => Err(AuthError::Malformed("token out of sequence")),
        }
    }

    /// The session key, whole: NTLM's exported session key (MS-NLMP
    /// 3.1.5.1.2, 16 bytes), available once the AUTHENTICATE message has
    /// been produced; or Kerberos's (MS-KILE 3.1.1.2: the acceptor's subkey,
    /// else ours, else the ticket's; 32 bytes for AES-256 enctypes) once
    /// the server's AP-REP is checked. SMB signs with its first 16 bytes
    /// and derives AES-256 keys from all of it (MS-SMB2 3.2.5.3.1).
    pub fn session_key(&self) -> Option<Vec<u8>> {
        self.session_key.clone()
    }

    /// The server's NegTokenResp to our AP-REQ (or to a later token of
    /// ours): the AP-REP goes to MIT, which checks it (mutual
    /// authentication); a mechListMIC is checked with the context's key
    /// (RFC 4178 5); a server that asks for ours (request-mic) gets it.
    fn on_kerberos_reply(&mut self, input: &[u8], sent_mic: bool) -> Result<Option<Vec<u8>>, AuthError> {
        let Token::Resp(r) = spnego::decode(input)? else {
            return Err(AuthError::Malformed("expected NegTokenResp"));
        };
        if r.neg_state == Some(NegState::Reject) {
            return Err(AuthError::LogonFailure);
        }
        if r.supported_mech.is_some_and(|m| m != MS_KRB5_OID && m != KRB5_OID) {
            return Err(AuthError::Unsupported("server chose another mechanism than Kerberos"));
        }
        let k = self.kerberos.as_mut().ok_or(AuthError::Malformed("token out of sequence"))?;
        let refused = |what: &str, e: smbq_gssapi::Error| {
            tracing::info!("kerberos: {what}: {e}");
            AuthError::LogonFailure
        };
        if self.session_key.is_none() {
            let Some(token) = r.response_token else {
                // Established only with the server's AP-REP (we asked for mutual authentication).
                return Err(AuthError::Malformed("NegTokenResp without responseToken"));
            };
            match k.initiator.step(Some(token)).map_err(|e| refused("the server's AP-REP", e))? {
                Step::Continue(t) => {
                    if r.neg_state == Some(NegState::AcceptCompleted) {
                        return Err(AuthError::Malformed("accept-completed before Kerberos completed"));
                    }
                    self.state = State::Kerberos { sent_mic };
                    return Ok(Some(spnego::encode_resp(None, None, Some(&t), None)));
                }
                Step::Done(_) => {}
            }
            self.session_key = Some(k.initiator.session_key().map_err(|e| refused("no session key", e))?);
        } else if r.response_token.is_some_and(|t| !t.is_empty()) {
            return Err(AuthError::Malformed("a token after Kerberos completed"));
        }
        match r.mech_list_mic {
            Some(mic) => k.initiator.verify_mic(&kerberos_mech_types(), mic).map_err(|e| refused("the server's mechListMIC", e))?,
            None if sent_mic => return Err(AuthError::LogonFailure),
            None => {}
        }
        match r.neg_state {
            Some(NegState::AcceptCompleted) => Ok(None),
            // The server wants our mechListMIC (RFC 4178 5, MS-SPNG 3.2.5.1).
            Some(NegState::AcceptIncomplete | NegState::RequestMic) if !sent_mic => {
                let mic = k.initiator.get_mic(&kerberos_mech_types()).map_err(|e| refused("our mechListMIC", e))?;
                self.state = State::Kerberos { sent_mic: true };
                Ok(Some(spnego::encode_resp(None, None, None, Some(&mic))))
            }
            _ => Err(AuthError::Malformed("expected accept-completed")),
        }
    }

    fn on_challenge(&mut self, negotiate: &[u8], input: &[u8]) -> Result<Vec<u8>, AuthError> {
        let challenge_msg = if self.spnego {
            let Token::Resp(r) = spnego::decode(input)? else {
                return Err(AuthError::Malformed("expected NegTokenResp"));
            };
            if r.neg_state == Some(NegState::Reject) {
                return Err(AuthError::LogonFailure);
            }
            if r.supported_mech.is_some_and(|m| m != NTLMSSP_OID) {
                return Err(AuthError::Unsupported("server chose another mechanism"));
            }
            r.response_token.ok_or(AuthError::Malformed("NegTokenResp without responseToken"))?
        } else {
            input
        };
        let ch = ntlm::decode_challenge(challenge_msg)?;
        // MS-NLMP 3.1.5.1.2: use the flags both sides support.
        let flags = ch.flags & CLIENT_FLAGS;
        if flags & ntlm::NEGOTIATE_UNICODE == 0 {
            return Err(AuthError::Unsupported("NTLMSSP without Unicode"));
        }
        let (client_challenge, random_key) = self.fixed.unwrap_or_else(|| (rand::random(), rand::random()));
        let (auth, key) = self.build_authenticate(negotiate, challenge_msg, &ch, flags, client_challenge, random_key)?;
        self.session_key = Some(key.to_vec());
        if !self.spnego {
            return Ok(auth);
        }
        let anonymous = self.user.is_empty();
        let mic = if !anonymous && flags & ntlm::NEGOTIATE_EXTENDED_SESSIONSECURITY != 0 {
            Some(ntlm::first_mic(flags, &key, true, &our_mech_types())?)
        } else {
            None
        };
        self.state = State::SentAuthenticate { flags, sent_mic: mic.is_some(), key };
        Ok(spnego::encode_resp(None, None, Some(&auth), mic.as_ref().map(|m| m.as_slice())))
    }

    /// MS-NLMP 3.1.5.1.2: AUTHENTICATE_MESSAGE and the exported session key.
    /// With a server MsvAvTimestamp the timestamp is reused, LmChallengeResponse
    /// is Z(24), MsvAvFlags gets 0x2 and the MIC is filled in.
    fn build_authenticate(
        &self,
        negotiate: &[u8],
        challenge_msg: &[u8],
        ch: &Challenge<'_>,
        flags: u32,
        client_challenge: [u8; 8],
        random_session_key: [u8; 16],
    ) -> Result<(Vec<u8>, [u8; 16]), AuthError> {
        if self.user.is_empty() {
            let msg = ntlm::encode_authenticate(&ntlm::AuthenticateOut {
                flags: (flags | ntlm::NEGOTIATE_ANONYMOUS) & !ntlm::NEGOTIATE_KEY_EXCH,
                lm: &[0],
                nt: &[],
                domain: "",
                user: "",
                encrypted_session_key: &[],
            });
            return Ok((msg, [0; 16]));
        }
        let pairs = ntlm::parse_av_pairs(ch.target_info)?;
        let timestamp = pairs
            .iter()
            .find(|(id, _)| *id == ntlm::AV_TIMESTAMP)
            .and_then(|(_, v)| <[u8; 8]>::try_from(*v).ok())
            .map(u64::from_le_bytes);
        let mut av = Vec::new();
        let mut av_flags = 0u32;
        for (id, value) in &pairs {
            if *id == ntlm::AV_FLAGS {
                av_flags |= ntlm::u32_at(value, 0).unwrap_or(0);
            } else {
                ntlm::push_av(&mut av, *id, value);
            }
        }
        if timestamp.is_some() {
            av_flags |= ntlm::AV_FLAG_MIC_PRESENT;
        }
        if av_flags != 0 {
            ntlm::push_av(&mut av, ntlm::AV_FLAGS, &av_flags.to_le_bytes());
        }
        ntlm::push_av(&mut av, ntlm::AV_EOL, &[]);
        let ntowf = ntlm::ntowf_v2(&self.nt_hash, &self.user, &self.domain);
        let r = ntlm::v2_response(&ntowf, &ch.server_challenge, &client_challenge, timestamp.unwrap_or(self.now_filetime), &av);
        let (encrypted, exported) = if flags & ntlm::NEGOTIATE_KEY_EXCH != 0 {
            let mut e = random_session_key;
            ntlm::rc4(&r.session_base_key, &mut e);
            (e.to_vec(), random_session_key)
        } else {
            (Vec::new(), r.session_base_key)
        };
        let mut msg = ntlm::encode_authenticate(&ntlm::AuthenticateOut {
            flags,
            lm: if timestamp.is_some() { &[0; 24] } else { &r.lm },
            nt: &r.nt,
            domain: &self.domain,
            user: &self.user,
            encrypted_session_key: &encrypted,
        });
        if timestamp.is_some() {
            let mic = ntlm::message_mic(&exported, negotiate, challenge_msg, &msg).ok_or(AuthError::Malformed("short AUTHENTICATE"))?;
            if let Some(slot) = msg.get_mut(ntlm::MIC_OFFSET..ntlm::MIC_OFFSET + 16) {
                slot.copy_from_slice(&mic);
            }
        }
        Ok((msg, exported))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MS-NLMP 4.2.4.3 CHALLENGE_MESSAGE (no MsvAvTimestamp).
    const CHALLENGE_4_2_4_3: &str = "4e544c4d53535000020000000c000c003800000033828ae20123456789abcdef00000000000000002400240044000000060070170000000f53006500720076006500720002000c0044006f006d00610069006e0001000c0053006500720076006500720000000000";

    #[test]
    fn authenticate_reproduces_4_2_4_responses() {
        let chal = hex::decode(CHALLENGE_4_2_4_3).unwrap();
        let ch = ntlm::decode_challenge(&chal).unwrap();
        let client = ClientAuth::new("User", "Domain", "Password", 0);
        let flags = ch.flags & CLIENT_FLAGS;
        let (msg, key) = client.build_authenticate(&[], &chal, &ch, flags, [0xaa; 8], [0x55; 16]).unwrap();
        assert_eq!(key, [0x55; 16]);
        let a = ntlm::decode_authenticate(&msg).unwrap();
        // MS-NLMP 4.2.4.2.1, 4.2.4.2.2 and 4.2.4.2.3 as they appear in 4.2.4.3.
        assert_eq!(a.lm, hex::decode("86c35097ac9cec102554764a57cccc19aaaaaaaaaaaaaaaa").unwrap());
        assert_eq!(
            hex::encode(a.nt),
            "68cd0ab851e51c96aabc927bebef6a1c01010000000000000000000000000000aaaaaaaaaaaaaaaa00000000\
             02000c0044006f006d00610069006e0001000c005300650072007600650072000000000000000000"
        );
        assert_eq!(a.encrypted_session_key, hex::decode("c5dad2544fc9799094ce1ce90bc9d03e").unwrap());
        assert_eq!((a.user.as_str(), a.domain.as_str()), ("User", "Domain"));
        // No timestamp from the server: no MIC.
        assert_eq!(&msg[ntlm::MIC_OFFSET..ntlm::MIC_OFFSET + 16], &[0; 16]);
    }

    #[test]
    fn out_of_sequence_and_garbage_are_errors() {
        let mut c = ClientAuth::new("u", "d", "p", 0);
        assert!(c.step(Some(b"x")).is_err());
        let mut c = ClientAuth::new("u", "d", "p", 0);
        c.step(None).unwrap();
        assert!(matches!(c.step(Some(b"\xa1\x03\x30\x01")), Err(AuthError::Malformed(_))));
        assert!(c.step(None).is_err());
        let mut c = ClientAuth::new_raw("u", "d", "p", 0);
        c.step(None).unwrap();
        assert!(c.step(Some(b"NTLMSSP\0\x02\0\0\0")).is_err());
    }

    /// No credential cache: an error in MIT's words that says to run
    /// kinit, before anything reaches a server. (Logons with a real KDC:
    /// tests/e2e/test_kerberos_client.py.)
    #[test]
    fn kerberos_without_credentials_fails_cleanly() {
        let dir = std::env::temp_dir().join(format!("smbq-auth-krb-{}", std::process::id()));
        std::env::set_var("KRB5CCNAME", format!("FILE:{}", dir.join("no-ccache").display()));
        std::env::set_var("KRB5_CONFIG", dir.join("no-krb5.conf"));
        let Err(e) = ClientAuth::kerberos("smbq.example") else { panic!("a Kerberos logon without a ticket") };
        assert!(e.message.starts_with("no Kerberos credentials: run kinit ("), "{e}");
    }
}
