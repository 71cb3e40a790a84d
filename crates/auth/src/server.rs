//! The server side of one SPNEGO/NTLMSSP exchange (MS-SPNG 3.2.5, MS-NLMP 3.2.5).

use crate::ntlm::{self, utf16le};
use crate::spnego::{self, NegState, NegTokenResp, Token, MAX_TOKEN, NTLMSSP_OID};
use crate::{AuthError, AuthStep, TargetInfo};

/// Flags the server always sets in CHALLENGE_MESSAGE (MS-NLMP 3.2.5.1.1).
const SERVER_FLAGS: u32 = ntlm::NEGOTIATE_UNICODE
    | ntlm::REQUEST_TARGET
    | ntlm::NEGOTIATE_NTLM
    | ntlm::TARGET_TYPE_SERVER
    | ntlm::NEGOTIATE_TARGET_INFO
    | ntlm::NEGOTIATE_VERSION;

/// What SPNEGO remembers across legs (RFC 4178 5).
struct Spnego {
    /// DER of the client's MechTypeList, covered by both mechListMICs.
    mech_types_der: Vec<u8>,
    /// NTLMSSP was not the client's first choice: the MIC exchange is
    /// mandatory and we answered request-mic.
    mic_required: bool,
}

enum State {
    Start,
    /// SPNEGO chose NTLMSSP but the client has not sent NEGOTIATE_MESSAGE yet.
    AwaitNegotiate(Spnego),
    AwaitAuthenticate { spnego: Option<Spnego>, negotiate: Vec<u8>, challenge: Vec<u8> },
    /// Done or failed: an error sticks, like the exchange's end.
    Finished,
}

/// One authentication exchange on the server (one per SESSION_SETUP
/// sequence). Feed each client security buffer to [`ServerAuth::step`].
///
/// The client may send SPNEGO (an InitialContextToken with NegTokenInit,
/// then NegTokenResp) or raw NTLMSSP messages; answers use the same form.
/// Once `step` returns an error or `Done`, further calls fail.
pub struct ServerAuth {
    target: TargetInfo,
    now_filetime: u64,
    server_challenge: [u8; 8],
    state: State,
}

fn expect_resp(token: &[u8]) -> Result<NegTokenResp<'_>, AuthError> {
    match spnego::decode(token)? {
        Token::Resp(r) if r.neg_state == Some(NegState::Reject) => Err(AuthError::LogonFailure),
        Token::Resp(r) => Ok(r),
        Token::Init(_) => Err(AuthError::Malformed("expected NegTokenResp")),
    }
}

impl ServerAuth {
    /// `now_filetime`: the current time as FILETIME (100 ns since 1601),
    /// sent as MsvAvTimestamp; the server challenge comes from `rand`.
    pub fn new(target: TargetInfo, now_filetime: u64) -> ServerAuth {
        ServerAuth::with_challenge(target, now_filetime, rand::random())
    }

    /// As [`ServerAuth::new`], with the server challenge given (a fixed
    /// one lets a test replay a client's tokens).
    pub fn with_challenge(target: TargetInfo, now_filetime: u64, server_challenge: [u8; 8]) -> ServerAuth {
        ServerAuth { target, now_filetime, server_challenge, state: State::Start }
    }

    /// Feeds the client's security buffer. `lookup(user, domain)` returns
    /// the user's NT hash.
    ///
    /// Errors: [`AuthError::Malformed`] for undecodable tokens or a token out
    /// of sequence; [`AuthError::Unsupported`] when the client offers no
    /// NTLMSSP (e.g. Kerberos only), an OEM-only NTLMSSP, or needs a
    /// mechListMIC without extended session security;
    /// [`AuthError::LogonFailure`] for an unknown user, a wrong password, a
    /// bad MIC or mechListMIC, a client reject, and for NTLMv1 and LM-only
    /// responses, which are refused (as Windows does when set to "NTLMv2
    /// only").
    pub fn step(&mut self, token: &[u8], lookup: &dyn Fn(&str, &str) -> Option<[u8; 16]>) -> Result<AuthStep, AuthError> {
        if token.len() > MAX_TOKEN {
            self.state = State::Finished;
            return Err(AuthError::Malformed("security token too large"));
        }
        match std::mem::replace(&mut self.state, State::Finished) {
            State::Start => self.start(token),
            State::AwaitNegotiate(spnego) => {
                let resp = expect_resp(token)?;
                let negotiate = resp.response_token.ok_or(AuthError::Malformed("NegTokenResp without responseToken"))?;
                self.challenge(negotiate, Some(spnego), false)
            }
            State::AwaitAuthenticate { spnego, negotiate, challenge } => {
                self.authenticate(token, spnego, &negotiate, &challenge, lookup)
            }
            State::Finished => Err(AuthError::Malformed("authentication exchange already finished")),
        }
    }

    /// First leg: raw NEGOTIATE_MESSAGE, or SPNEGO NegTokenInit
    /// (RFC 4178 4.2.1, MS-SPNG 3.2.5.2).
    fn start(&mut self, token: &[u8]) -> Result<AuthStep, AuthError> {
        if token.starts_with(ntlm::SIGNATURE) {
            return self.challenge(token, None, false);
        }
        let Token::Init(init) = spnego::decode(token)? else {
            return Err(AuthError::Malformed("exchange must start with NegTokenInit"));
        };
        let pos = init
            .mech_types
            .iter()
            .position(|m| *m == NTLMSSP_OID)
            .ok_or(AuthError::Unsupported("client offered no NTLMSSP mechanism"))?;
        // RFC 4178 5: when the selected mechanism is not the initiator's
        // first choice, the mechListMIC exchange is mandatory (request-mic).
        let spnego = Spnego { mech_types_der: init.mech_types_der.to_vec(), mic_required: pos != 0 };
        match init.mech_token {
            // The optimistic token is ours: answer it with the challenge.
            Some(negotiate) if pos == 0 => self.challenge(negotiate, Some(spnego), true),
            // No token, or one for a mechanism we lack: name NTLMSSP and wait.
            _ => {
                let state = if spnego.mic_required { NegState::RequestMic } else { NegState::AcceptIncomplete };
                self.state = State::AwaitNegotiate(spnego);
                Ok(AuthStep::Continue(spnego::encode_resp(Some(state), true, None, None)))
            }
        }
    }

    /// MS-NLMP 3.2.5.1.1: answer NEGOTIATE_MESSAGE with CHALLENGE_MESSAGE.
    fn challenge(&mut self, negotiate: &[u8], spnego: Option<Spnego>, first_reply: bool) -> Result<AuthStep, AuthError> {
        let client_flags = ntlm::decode_negotiate(negotiate)?;
        if client_flags & ntlm::NEGOTIATE_UNICODE == 0 {
            return Err(AuthError::Unsupported("NTLMSSP without Unicode"));
        }
        let flags = SERVER_FLAGS | (client_flags & ntlm::ECHOED_FLAGS);
        let challenge = ntlm::encode_challenge(flags, &self.target.netbios_computer, &self.server_challenge, &self.target_info());
        let out = match &spnego {
            None => challenge.clone(),
            Some(_) => spnego::encode_resp(Some(NegState::AcceptIncomplete), first_reply, Some(&challenge), None),
        };
        self.state = State::AwaitAuthenticate { spnego, negotiate: negotiate.to_vec(), challenge };
        Ok(AuthStep::Continue(out))
    }

    /// MS-NLMP 2.2.1.2 TargetInfo: NetBIOS and DNS names, MsvAvTimestamp, EOL.
    fn target_info(&self) -> Vec<u8> {
        let t = &self.target;
        let mut out = Vec::new();
        ntlm::push_av(&mut out, ntlm::AV_NB_DOMAIN_NAME, &utf16le(&t.netbios_domain));
        ntlm::push_av(&mut out, ntlm::AV_NB_COMPUTER_NAME, &utf16le(&t.netbios_computer));
        ntlm::push_av(&mut out, ntlm::AV_DNS_DOMAIN_NAME, &utf16le(&t.dns_domain));
        ntlm::push_av(&mut out, ntlm::AV_DNS_COMPUTER_NAME, &utf16le(&t.dns_computer));
        ntlm::push_av(&mut out, ntlm::AV_TIMESTAMP, &self.now_filetime.to_le_bytes());
        ntlm::push_av(&mut out, ntlm::AV_EOL, &[]);
        out
    }

    /// MS-NLMP 3.2.5.1.2 on AUTHENTICATE_MESSAGE, then RFC 4178 5 mechListMIC.
    fn authenticate(
        &mut self,
        token: &[u8],
        spnego: Option<Spnego>,
        negotiate: &[u8],
        challenge: &[u8],
        lookup: &dyn Fn(&str, &str) -> Option<[u8; 16]>,
    ) -> Result<AuthStep, AuthError> {
        let (auth_msg, client_mic) = match spnego {
            None => (token, None),
            Some(_) => {
                let r = expect_resp(token)?;
                (r.response_token.ok_or(AuthError::Malformed("NegTokenResp without responseToken"))?, r.mech_list_mic)
            }
        };
        let auth = ntlm::decode_authenticate(auth_msg)?;
        if auth.nt.is_empty() {
            // MS-NLMP 3.2.5.1.2: an empty NtChallengeResponse and UserName with
            // an empty or Z(1) LmChallengeResponse is anonymous authentication.
            if auth.user.is_empty() && matches!(auth.lm, [] | [0]) {
                let token = match spnego {
                    None => Vec::new(),
                    Some(_) => spnego::encode_resp(Some(NegState::AcceptCompleted), false, None, None),
                };
                return Ok(AuthStep::Done { token, user: String::new(), domain: auth.domain, session_key: [0; 16], anonymous: true });
            }
            // LM-only: refused.
            return Err(AuthError::LogonFailure);
        }
        // NTLMv1 (a 24-byte NT response) fails verify_v2's length check.
        let nt_hash = lookup(&auth.user, &auth.domain).ok_or(AuthError::LogonFailure)?;
        // NTOWFv2 covers the domain the client typed; also accept the usual
        // alternatives clients use with a standalone server.
        let upper = auth.domain.to_uppercase();
        let mut domains: Vec<&str> = Vec::new();
        for d in [auth.domain.as_str(), &upper, "", &self.target.netbios_domain, &self.target.netbios_computer] {
            if !domains.contains(&d) {
                domains.push(d);
            }
        }
        let v = ntlm::verify_v2(auth_msg, &auth, &nt_hash, &domains, &self.server_challenge, negotiate, challenge)?;
        let key = v.exported_session_key;
        let token = match spnego {
            None => Vec::new(),
            Some(s) => {
                let send_mic = match client_mic {
                    Some(mic) => {
                        let expected = ntlm::first_mic(auth.flags, &key, true, &s.mech_types_der)?;
                        if !ntlm::ct_eq(mic, &expected) {
                            return Err(AuthError::LogonFailure);
                        }
                        true
                    }
                    None if s.mic_required => return Err(AuthError::LogonFailure),
                    None => false,
                };
                let server_mic = if send_mic { Some(ntlm::first_mic(auth.flags, &key, false, &s.mech_types_der)?) } else { None };
                spnego::encode_resp(Some(NegState::AcceptCompleted), false, None, server_mic.as_ref().map(|m| m.as_slice()))
            }
        };
        Ok(AuthStep::Done { token, user: auth.user, domain: auth.domain, session_key: key, anonymous: false })
    }
}
