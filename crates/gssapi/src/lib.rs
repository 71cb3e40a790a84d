//! Kerberos (RFC 4121, MS-KILE) through MIT krb5's GSS-API (RFC 2744),
//! `libgssapi_krb5`: an [`Acceptor`] that checks AP-REQs against a keytab
//! and answers with an AP-REP, and an [`Initiator`] that makes AP-REQs from
//! the user's credential cache (`KRB5CCNAME`).
//!
//! Why MIT's library and not a Kerberos of our own: the acceptor's work is
//! decrypting tickets with keytab keys, checking authenticators, clocks and
//! the replay cache, and verifying the PAC's server checksum; MIT does all
//! of it, is what Linux distributions ship and configure (`krb5.conf`,
//! keytabs from `kadmin` or `samba-tool`/`msktutil`), and is what the peers
//! we test against (Samba's clients, pyspnego) use. Only token bytes cross
//! this boundary, so SPNEGO stays in `smbq-auth`, sans-IO.
//!
//! The session key both sides use for SMB is GSS_C_INQ_SSPI_SESSION_KEY
//! (MS-KILE 3.1.1.2: the acceptor's subkey, else the initiator's, else
//! the ticket's session key), as Samba's gensec_gssapi reads it.

// FFI: every unsafe block says why it is sound.
#![deny(clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn)]

use std::ffi::{c_int, c_void, CString};
use std::path::Path;
use std::ptr;

mod ffi {
    //! The part of RFC 2744's C bindings (and MIT's gssapi_ext.h) we call.
    #![allow(non_camel_case_types)]
    use std::ffi::{c_char, c_int, c_void};

    pub type OM_uint32 = u32;
    pub type gss_name_t = *mut c_void;
    pub type gss_cred_id_t = *mut c_void;
    pub type gss_ctx_id_t = *mut c_void;

    #[repr(C)]
    pub struct gss_buffer_desc {
        pub length: usize,
        pub value: *mut c_void,
    }
    #[repr(C)]
    pub struct gss_OID_desc {
        pub length: OM_uint32,
        pub elements: *mut c_void,
    }
    #[repr(C)]
    pub struct gss_OID_set_desc {
        pub count: usize,
        pub elements: *mut gss_OID_desc,
    }
    #[repr(C)]
    pub struct gss_buffer_set_desc {
        pub count: usize,
        pub elements: *mut gss_buffer_desc,
    }
    #[repr(C)]
    pub struct gss_key_value_element_desc {
        pub key: *const c_char,
        pub value: *const c_char,
    }
    #[repr(C)]
    pub struct gss_key_value_set_desc {
        pub count: OM_uint32,
        pub elements: *mut gss_key_value_element_desc,
    }

    // Linked by build.rs (libgssapi_krb5.so.2).
    extern "C" {
        pub fn gss_acquire_cred_from(
            minor: *mut OM_uint32,
            desired_name: gss_name_t,
            time_req: OM_uint32,
            desired_mechs: *mut gss_OID_set_desc,
            cred_usage: c_int,
            cred_store: *const gss_key_value_set_desc,
            output_cred: *mut gss_cred_id_t,
            actual_mechs: *mut *mut gss_OID_set_desc,
            time_rec: *mut OM_uint32,
        ) -> OM_uint32;
        pub fn gss_release_cred(minor: *mut OM_uint32, cred: *mut gss_cred_id_t) -> OM_uint32;
        pub fn gss_accept_sec_context(
            minor: *mut OM_uint32,
            context: *mut gss_ctx_id_t,
            acceptor_cred: gss_cred_id_t,
            input_token: *mut gss_buffer_desc,
            channel_bindings: *mut c_void,
            src_name: *mut gss_name_t,
            mech_type: *mut *mut gss_OID_desc,
            output_token: *mut gss_buffer_desc,
            ret_flags: *mut OM_uint32,
            time_rec: *mut OM_uint32,
            delegated_cred: *mut gss_cred_id_t,
        ) -> OM_uint32;
        pub fn gss_init_sec_context(
            minor: *mut OM_uint32,
            claimant_cred: gss_cred_id_t,
            context: *mut gss_ctx_id_t,
            target_name: gss_name_t,
            mech_type: *mut gss_OID_desc,
            req_flags: OM_uint32,
            time_req: OM_uint32,
            channel_bindings: *mut c_void,
            input_token: *mut gss_buffer_desc,
            actual_mech: *mut *mut gss_OID_desc,
            output_token: *mut gss_buffer_desc,
            ret_flags: *mut OM_uint32,
            time_rec: *mut OM_uint32,
        ) -> OM_uint32;
        pub fn gss_delete_sec_context(minor: *mut OM_uint32, context: *mut gss_ctx_id_t, output: *mut gss_buffer_desc) -> OM_uint32;
        pub fn gss_import_name(minor: *mut OM_uint32, name: *mut gss_buffer_desc, name_type: *mut gss_OID_desc, out: *mut gss_name_t) -> OM_uint32;
        pub fn gss_display_name(minor: *mut OM_uint32, name: gss_name_t, out: *mut gss_buffer_desc, out_type: *mut *mut gss_OID_desc) -> OM_uint32;
        pub fn gss_release_name(minor: *mut OM_uint32, name: *mut gss_name_t) -> OM_uint32;
        pub fn gss_inquire_context(
            minor: *mut OM_uint32,
            context: gss_ctx_id_t,
            src_name: *mut gss_name_t,
            targ_name: *mut gss_name_t,
            lifetime: *mut OM_uint32,
            mech_type: *mut *mut gss_OID_desc,
            ctx_flags: *mut OM_uint32,
            locally_initiated: *mut c_int,
            open: *mut c_int,
        ) -> OM_uint32;
        pub fn gss_inquire_sec_context_by_oid(
            minor: *mut OM_uint32,
            context: gss_ctx_id_t,
            desired_object: *mut gss_OID_desc,
            data_set: *mut *mut gss_buffer_set_desc,
        ) -> OM_uint32;
        pub fn gss_release_buffer_set(minor: *mut OM_uint32, set: *mut *mut gss_buffer_set_desc) -> OM_uint32;
        pub fn gss_get_name_attribute(
            minor: *mut OM_uint32,
            name: gss_name_t,
            attr: *mut gss_buffer_desc,
            authenticated: *mut c_int,
            complete: *mut c_int,
            value: *mut gss_buffer_desc,
            display_value: *mut gss_buffer_desc,
            more: *mut c_int,
        ) -> OM_uint32;
        pub fn gss_get_mic(minor: *mut OM_uint32, context: gss_ctx_id_t, qop: OM_uint32, msg: *mut gss_buffer_desc, token: *mut gss_buffer_desc) -> OM_uint32;
        pub fn gss_verify_mic(minor: *mut OM_uint32, context: gss_ctx_id_t, msg: *mut gss_buffer_desc, token: *mut gss_buffer_desc, qop: *mut OM_uint32) -> OM_uint32;
        pub fn gss_release_buffer(minor: *mut OM_uint32, buffer: *mut gss_buffer_desc) -> OM_uint32;
        pub fn gss_display_status(
            minor: *mut OM_uint32,
            status: OM_uint32,
            status_type: c_int,
            mech_type: *mut gss_OID_desc,
            message_context: *mut OM_uint32,
            status_string: *mut gss_buffer_desc,
        ) -> OM_uint32;
    }
}

use ffi::OM_uint32;

/// Kerberos V5 mechanism, 1.2.840.113554.1.2.2 (RFC 1964), DER contents.
pub const KRB5_OID: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x12, 0x01, 0x02, 0x02];
/// Microsoft's Kerberos OID, 1.2.840.48018.1.2.2 (MS-KILE 1.9), DER contents.
pub const MS_KRB5_OID: &[u8] = &[0x2a, 0x86, 0x48, 0x82, 0xf7, 0x12, 0x01, 0x02, 0x02];
/// GSS_C_NT_HOSTBASED_SERVICE, 1.2.840.113554.1.2.1.4 (RFC 2743 4.1).
const HOSTBASED_SERVICE_OID: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x12, 0x01, 0x02, 0x01, 0x04];
/// GSS_C_INQ_SSPI_SESSION_KEY, 1.2.840.113554.1.2.2.5.5.
const SSPI_SESSION_KEY_OID: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x12, 0x01, 0x02, 0x02, 0x05, 0x05];

const GSS_C_MUTUAL_FLAG: OM_uint32 = 2;
const GSS_C_REPLAY_FLAG: OM_uint32 = 4;
const GSS_C_SEQUENCE_FLAG: OM_uint32 = 8;
const GSS_C_INTEG_FLAG: OM_uint32 = 32;
const GSS_C_ACCEPT: c_int = 2;
const GSS_S_CONTINUE_NEEDED: OM_uint32 = 1;
const GSS_C_GSS_CODE: c_int = 1;
const GSS_C_MECH_CODE: c_int = 2;
/// Supplementary status: the token was already seen (replay cache).
const GSS_S_DUPLICATE_TOKEN: OM_uint32 = 1 << 1;

/// The krb5 error table (com_err base -1765328384; RFC 4120 7.5.9 codes).
const KRB5_ERR_BASE: i64 = -1_765_328_384;

/// A failed GSS-API call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub major: u32,
    pub minor: u32,
    /// MIT's own words for both codes.
    pub message: String,
}

/// What a failed acceptance means, for the status it gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Not a Kerberos token we can parse (GSS_S_DEFECTIVE_TOKEN, BAD_MECH).
    Malformed,
    /// KRB_AP_ERR_SKEW: the authenticator's time is more than the allowed
    /// skew (5 minutes by default) from ours.
    ClockSkew,
    /// KRB_AP_ERR_TKT_EXPIRED, or GSS_S_CREDENTIALS_EXPIRED.
    Expired,
    /// The replay cache has seen this authenticator (KRB_AP_ERR_REPEAT,
    /// GSS_S_DUPLICATE_TOKEN).
    Replay,
    /// No key for the ticket's service or version (KRB_AP_ERR_NOKEY,
    /// KRB_AP_ERR_BADKEYVER, KRB_AP_ERR_NOT_US, a principal not in the
    /// keytab), or it does not decrypt (KRB_AP_ERR_BAD_INTEGRITY,
    /// KRB_AP_ERR_MODIFIED).
    WrongKey,
    Other,
}

impl Error {
    pub fn failure(&self) -> Failure {
        let routine = (self.major >> 16) & 0xff;
        // RFC 2744 3.9.1: routine errors.
        const BAD_MECH: u32 = 1;
        const DEFECTIVE_TOKEN: u32 = 9;
        const CREDENTIALS_EXPIRED: u32 = 11;
        const CONTEXT_EXPIRED: u32 = 12;
        let krb = i64::from(self.minor as i32) - KRB5_ERR_BASE;
        match krb {
            37 => return Failure::ClockSkew,
            32 => return Failure::Expired,
            34 => return Failure::Replay,
            31 | 35 | 41 | 44 | 45 => return Failure::WrongKey,
            _ => {}
        }
        if self.major & GSS_S_DUPLICATE_TOKEN != 0 {
            return Failure::Replay;
        }
        match routine {
            BAD_MECH | DEFECTIVE_TOKEN => Failure::Malformed,
            CREDENTIALS_EXPIRED | CONTEXT_EXPIRED => Failure::Expired,
            _ => Failure::Other,
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (GSS major {:#x}, minor {})", self.message, self.major, self.minor as i32)
    }
}

impl std::error::Error for Error {}

/// One GSS-API status code in MIT's words (RFC 2744 5.11).
fn status_text(code: OM_uint32, kind: c_int) -> String {
    let mut words = Vec::new();
    let mut more: OM_uint32 = 0;
    // RFC 2744: call until message_context returns to 0; bounded anyway.
    for _ in 0..8 {
        let mut minor = 0;
        let mut buf = OutBuffer::new();
        // SAFETY: every pointer is to a live local; MIT fills `buf`, which
        // OutBuffer releases with gss_release_buffer.
        let major = unsafe { ffi::gss_display_status(&mut minor, code, kind, ptr::null_mut(), &mut more, &mut buf.0) };
        if major != 0 {
            break;
        }
        words.push(String::from_utf8_lossy(buf.bytes()).into_owned());
        if more == 0 {
            break;
        }
    }
    words.join("; ")
}

fn check(major: OM_uint32, minor: OM_uint32) -> Result<OM_uint32, Error> {
    if major & 0xffff_0000 == 0 {
        return Ok(major);
    }
    let mut message = status_text(major, GSS_C_GSS_CODE);
    if minor != 0 {
        message = format!("{message}: {}", status_text(minor, GSS_C_MECH_CODE));
    }
    Err(Error { major, minor, message })
}

/// A buffer MIT allocated for us, released on drop.
struct OutBuffer(ffi::gss_buffer_desc);

impl OutBuffer {
    fn new() -> OutBuffer {
        OutBuffer(ffi::gss_buffer_desc { length: 0, value: ptr::null_mut() })
    }

    fn bytes(&self) -> &[u8] {
        if self.0.value.is_null() || self.0.length == 0 {
            return &[];
        }
        // SAFETY: MIT set `value` to `length` bytes it owns until
        // gss_release_buffer, which only our Drop calls.
        unsafe { std::slice::from_raw_parts(self.0.value.cast::<u8>(), self.0.length) }
    }
}

impl Drop for OutBuffer {
    fn drop(&mut self) {
        if !self.0.value.is_null() {
            let mut minor = 0;
            // SAFETY: the buffer came from MIT and is released once.
            unsafe { ffi::gss_release_buffer(&mut minor, &mut self.0) };
        }
    }
}

/// An input buffer borrowing `bytes` (MIT only reads it).
fn in_buffer(bytes: &[u8]) -> ffi::gss_buffer_desc {
    ffi::gss_buffer_desc { length: bytes.len(), value: bytes.as_ptr().cast_mut().cast::<c_void>() }
}

/// An OID descriptor borrowing a constant's DER contents.
fn oid(der: &'static [u8]) -> ffi::gss_OID_desc {
    ffi::gss_OID_desc { length: der.len() as OM_uint32, elements: der.as_ptr().cast_mut().cast::<c_void>() }
}

/// A name MIT allocated, released on drop.
struct Name(ffi::gss_name_t);

impl Name {
    fn display(&self) -> Result<String, Error> {
        let (mut minor, mut buf) = (0, OutBuffer::new());
        // SAFETY: `self.0` is a live name; MIT fills `buf`.
        let major = unsafe { ffi::gss_display_name(&mut minor, self.0, &mut buf.0, ptr::null_mut()) };
        check(major, minor)?;
        Ok(String::from_utf8_lossy(buf.bytes()).into_owned())
    }
}

impl Drop for Name {
    fn drop(&mut self) {
        if !self.0.is_null() {
            let mut minor = 0;
            // SAFETY: the name came from MIT and is released once.
            unsafe { ffi::gss_release_name(&mut minor, &mut self.0) };
        }
    }
}

// SAFETY: as Context below: one owner at a time, no thread-local state.
unsafe impl Send for Name {}

/// A security context, deleted on drop.
struct Context(ffi::gss_ctx_id_t);

// SAFETY: a context is used by one owner at a time (every method takes
// &mut self or &self of its one owner, and the owner is not Sync); MIT's
// contexts hold no thread-local state, so moving one between threads is
// sound.
unsafe impl Send for Context {}

impl Drop for Context {
    fn drop(&mut self) {
        if !self.0.is_null() {
            let mut minor = 0;
            // SAFETY: the context came from MIT and is deleted once.
            unsafe { ffi::gss_delete_sec_context(&mut minor, &mut self.0, ptr::null_mut()) };
        }
    }
}

impl Context {
    /// GSS_C_INQ_SSPI_SESSION_KEY: the key SMB derives its keys from.
    fn session_key(&self) -> Result<Vec<u8>, Error> {
        let mut minor = 0;
        let mut set: *mut ffi::gss_buffer_set_desc = ptr::null_mut();
        let mut want = oid(SSPI_SESSION_KEY_OID);
        // SAFETY: a live, established context; MIT allocates `set`.
        let major = unsafe { ffi::gss_inquire_sec_context_by_oid(&mut minor, self.0, &mut want, &mut set) };
        check(major, minor)?;
        // SAFETY: on success `set` is null or a set of `count` buffers MIT
        // owns; we copy the first (the key; the second is its enctype) and
        // release the set.
        let key = unsafe {
            let key = match set.as_ref() {
                Some(s) if s.count >= 1 && !s.elements.is_null() => {
                    let b = &*s.elements;
                    if b.value.is_null() {
                        Vec::new()
                    } else {
                        std::slice::from_raw_parts(b.value.cast::<u8>(), b.length).to_vec()
                    }
                }
                _ => Vec::new(),
            };
            ffi::gss_release_buffer_set(&mut minor, &mut set);
            key
        };
        if key.is_empty() {
            return Err(Error { major: 0, minor: 0, message: "the context has no session key".into() });
        }
        Ok(key)
    }

    /// Who the initiator and the acceptor are.
    fn names(&self) -> Result<(Name, Name), Error> {
        let mut minor = 0;
        let (mut src, mut targ): (ffi::gss_name_t, ffi::gss_name_t) = (ptr::null_mut(), ptr::null_mut());
        // SAFETY: a live context; MIT allocates both names, which Name releases.
        let major = unsafe {
            ffi::gss_inquire_context(
                &mut minor,
                self.0,
                &mut src,
                &mut targ,
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        let names = (Name(src), Name(targ));
        check(major, minor)?;
        Ok(names)
    }

    fn get_mic(&self, message: &[u8]) -> Result<Vec<u8>, Error> {
        let (mut minor, mut out) = (0, OutBuffer::new());
        let mut msg = in_buffer(message);
        // SAFETY: a live context; `msg` borrows `message` for the call.
        let major = unsafe { ffi::gss_get_mic(&mut minor, self.0, 0, &mut msg, &mut out.0) };
        check(major, minor)?;
        Ok(out.bytes().to_vec())
    }

    fn verify_mic(&self, message: &[u8], mic: &[u8]) -> Result<(), Error> {
        let mut minor = 0;
        let (mut msg, mut tok) = (in_buffer(message), in_buffer(mic));
        // SAFETY: a live context; both buffers borrow slices for the call.
        let major = unsafe { ffi::gss_verify_mic(&mut minor, self.0, &mut msg, &mut tok, ptr::null_mut()) };
        check(major, minor).map(drop)
    }
}

/// An error unless the exchange is `done`: keys, names and MICs come from
/// an established context only.
fn established(done: bool) -> Result<(), Error> {
    if done {
        Ok(())
    } else {
        Err(Error { major: 0, minor: 0, message: "the context is not established".into() })
    }
}

/// The result of feeding one token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Send this token and wait for the peer's next.
    Continue(Vec<u8>),
    /// Established; send this token (the AP-REP; for an initiator, empty).
    Done(Vec<u8>),
}

/// An acceptor credential: the keys of a keytab.
struct Cred(ffi::gss_cred_id_t);

impl Drop for Cred {
    fn drop(&mut self) {
        if !self.0.is_null() {
            let mut minor = 0;
            // SAFETY: the credential came from MIT and is released once.
            unsafe { ffi::gss_release_cred(&mut minor, &mut self.0) };
        }
    }
}

// SAFETY: as Context: one owner, no thread-local state in MIT's credentials.
unsafe impl Send for Cred {}

fn keytab_cred(keytab: &Path) -> Result<Cred, Error> {
    let path = keytab.to_str().and_then(|p| CString::new(p).ok()).ok_or_else(|| Error {
        major: 0,
        minor: 0,
        message: format!("keytab path {} is not valid UTF-8 without NUL", keytab.display()),
    })?;
    let key = c"keytab";
    let mut element = ffi::gss_key_value_element_desc { key: key.as_ptr(), value: path.as_ptr() };
    let store = ffi::gss_key_value_set_desc { count: 1, elements: &mut element };
    // Kerberos only: with no list, MIT picks a mechanism from each token,
    // and a token of its own SPNEGO (or of another installed mechanism,
    // such as gss-ntlmssp) would be accepted too.
    let mut oids = [oid(KRB5_OID), oid(MS_KRB5_OID)];
    let mut mechs = ffi::gss_OID_set_desc { count: oids.len(), elements: oids.as_mut_ptr() };
    let (mut minor, mut cred): (OM_uint32, ffi::gss_cred_id_t) = (0, ptr::null_mut());
    // SAFETY: `store` points at `element`, whose strings live to the end of
    // this function, and `mechs` at `oids`, local too; MIT copies what it
    // keeps. No name: any principal of the keytab (the caller checks which
    // one a ticket was for).
    let major = unsafe {
        ffi::gss_acquire_cred_from(
            &mut minor,
            ptr::null_mut(),
            0,
            &mut mechs,
            GSS_C_ACCEPT,
            &store,
            &mut cred,
            ptr::null_mut(),
            ptr::null_mut(),
        )
    };
    let cred = Cred(cred);
    check(major, minor)?;
    Ok(cred)
}

/// An MIT keytab file (format 0x0502) with one key for `service/host@realm`:
/// what `ktutil` writes, for tests and fuzzing that need an acceptor without
/// a KDC. `enctype` is RFC 3961's number (18: aes256-cts-hmac-sha1-96).
pub fn keytab_file(realm: &str, service: &str, host: &str, kvno: u8, enctype: u16, key: &[u8]) -> Vec<u8> {
    let counted = |out: &mut Vec<u8>, s: &[u8]| {
        out.extend_from_slice(&(s.len() as u16).to_be_bytes());
        out.extend_from_slice(s);
    };
    let mut entry = Vec::new();
    entry.extend_from_slice(&2u16.to_be_bytes());
    counted(&mut entry, realm.as_bytes());
    counted(&mut entry, service.as_bytes());
    counted(&mut entry, host.as_bytes());
    entry.extend_from_slice(&1u32.to_be_bytes()); // KRB5_NT_PRINCIPAL
    entry.extend_from_slice(&0u32.to_be_bytes()); // timestamp
    entry.push(kvno);
    entry.extend_from_slice(&enctype.to_be_bytes());
    counted(&mut entry, key);
    let mut file = vec![0x05, 0x02];
    file.extend_from_slice(&(entry.len() as i32).to_be_bytes());
    file.extend_from_slice(&entry);
    file
}

/// Checks that `keytab` holds acceptor keys MIT can use.
pub fn check_keytab(keytab: &Path) -> Result<(), Error> {
    keytab_cred(keytab).map(drop)
}

/// The server side of one Kerberos exchange (RFC 4121 through GSS-API).
pub struct Acceptor {
    cred: Cred,
    ctx: Context,
    src: Option<Name>,
    done: bool,
}

impl Acceptor {
    pub fn new(keytab: &Path) -> Result<Acceptor, Error> {
        Ok(Acceptor { cred: keytab_cred(keytab)?, ctx: Context(ptr::null_mut()), src: None, done: false })
    }

    /// Feeds the initiator's token (an InitialContextToken with an AP-REQ).
    /// MIT checks the ticket with the keytab, the authenticator's time
    /// against the clock skew, and its replay cache.
    pub fn step(&mut self, token: &[u8]) -> Result<Step, Error> {
        let (mut minor, mut out) = (0, OutBuffer::new());
        let mut input = in_buffer(token);
        let mut src: ffi::gss_name_t = ptr::null_mut();
        // SAFETY: `ctx` is null or the context MIT made in a previous step;
        // `input` borrows `token`; MIT allocates `src` and `out`, which Name
        // and OutBuffer release.
        let major = unsafe {
            ffi::gss_accept_sec_context(
                &mut minor,
                &mut self.ctx.0,
                self.cred.0,
                &mut input,
                ptr::null_mut(),
                &mut src,
                ptr::null_mut(),
                &mut out.0,
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        let src = Name(src);
        let status = check(major, minor)?;
        let token = out.bytes().to_vec();
        if status & 0xffff == GSS_S_CONTINUE_NEEDED {
            return Ok(Step::Continue(token));
        }
        self.src = Some(src);
        self.done = true;
        Ok(Step::Done(token))
    }

    fn established(&self) -> Result<(), Error> {
        established(self.done)
    }

    /// The initiator's principal, e.g. `alice@EXAMPLE.COM`.
    pub fn initiator(&self) -> Result<String, Error> {
        self.established()?;
        self.src.as_ref().map_or_else(|| Ok(String::new()), Name::display)
    }

    /// The principal the ticket was for, e.g. `cifs/host.example.com@EXAMPLE.COM`.
    pub fn acceptor(&self) -> Result<String, Error> {
        self.established()?;
        self.ctx.names()?.1.display()
    }

    pub fn session_key(&self) -> Result<Vec<u8>, Error> {
        self.established()?;
        self.ctx.session_key()
    }

    /// The ticket's PAC (MS-PAC 2.3), when the KDC put one in: the
    /// `urn:mspac:` name attribute. MIT returns it only after checking its
    /// server checksum with the ticket's key; an unverified PAC (one MIT
    /// could not check) is not returned.
    pub fn pac(&self) -> Result<Option<Vec<u8>>, Error> {
        self.established()?;
        let Some(src) = &self.src else { return Ok(None) };
        let attr = b"urn:mspac:";
        let mut name = in_buffer(attr);
        let (mut minor, mut value, mut display) = (0, OutBuffer::new(), OutBuffer::new());
        let (mut authenticated, mut complete, mut more): (c_int, c_int, c_int) = (0, 0, -1);
        // SAFETY: a live name; `name` borrows a constant; MIT fills both
        // buffers, which OutBuffer releases.
        let major = unsafe {
            ffi::gss_get_name_attribute(
                &mut minor,
                src.0,
                &mut name,
                &mut authenticated,
                &mut complete,
                &mut value.0,
                &mut display.0,
                &mut more,
            )
        };
        // GSS_S_UNAVAILABLE (routine error 16): no PAC in the ticket.
        if (major >> 16) & 0xff == 16 {
            return Ok(None);
        }
        check(major, minor)?;
        if authenticated == 0 {
            return Ok(None);
        }
        Ok(Some(value.bytes().to_vec()))
    }

    pub fn get_mic(&self, message: &[u8]) -> Result<Vec<u8>, Error> {
        self.established()?;
        self.ctx.get_mic(message)
    }

    pub fn verify_mic(&self, message: &[u8], mic: &[u8]) -> Result<(), Error> {
        self.established()?;
        self.ctx.verify_mic(message, mic)
    }
}

/// The client side of one Kerberos exchange, with the credentials of the
/// default credential cache (`KRB5CCNAME`).
pub struct Initiator {
    target: Name,
    ctx: Context,
    done: bool,
}

impl Initiator {
    /// `service@host`, e.g. `cifs@server.example.com` (RFC 2743 4.1).
    pub fn new(service_at_host: &str) -> Result<Initiator, Error> {
        let (mut minor, mut name): (OM_uint32, ffi::gss_name_t) = (0, ptr::null_mut());
        let mut buf = in_buffer(service_at_host.as_bytes());
        let mut kind = oid(HOSTBASED_SERVICE_OID);
        // SAFETY: `buf` borrows the string and `kind` a constant for the
        // call; MIT allocates `name`, which Name releases.
        let major = unsafe { ffi::gss_import_name(&mut minor, &mut buf, &mut kind, &mut name) };
        let target = Name(name);
        check(major, minor)?;
        Ok(Initiator { target, ctx: Context(ptr::null_mut()), done: false })
    }

    /// The first call takes no token; later ones the acceptor's reply.
    /// Asks for mutual authentication, as SMB clients do.
    pub fn step(&mut self, token: Option<&[u8]>) -> Result<Step, Error> {
        let (mut minor, mut out) = (0, OutBuffer::new());
        let mut input = in_buffer(token.unwrap_or(&[]));
        let input_ptr: *mut ffi::gss_buffer_desc = if token.is_some() { &mut input } else { ptr::null_mut() };
        let mut mech = oid(KRB5_OID);
        let flags = GSS_C_MUTUAL_FLAG | GSS_C_REPLAY_FLAG | GSS_C_SEQUENCE_FLAG | GSS_C_INTEG_FLAG;
        // SAFETY: `ctx` is null or MIT's context from the previous step;
        // the target name is live; `input`/`mech` borrow locals; MIT fills
        // `out`, which OutBuffer releases.
        let major = unsafe {
            ffi::gss_init_sec_context(
                &mut minor,
                ptr::null_mut(),
                &mut self.ctx.0,
                self.target.0,
                &mut mech,
                flags,
                0,
                ptr::null_mut(),
                input_ptr,
                ptr::null_mut(),
                &mut out.0,
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        let status = check(major, minor)?;
        let token = out.bytes().to_vec();
        if status & 0xffff == GSS_S_CONTINUE_NEEDED {
            return Ok(Step::Continue(token));
        }
        self.done = true;
        Ok(Step::Done(token))
    }

    pub fn session_key(&self) -> Result<Vec<u8>, Error> {
        established(self.done)?;
        self.ctx.session_key()
    }

    pub fn get_mic(&self, message: &[u8]) -> Result<Vec<u8>, Error> {
        self.ctx.get_mic(message)
    }

    pub fn verify_mic(&self, message: &[u8], mic: &[u8]) -> Result<(), Error> {
        self.ctx.verify_mic(message, mic)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_from_krb5_codes() {
        let e = |minor: i64| Error { major: 13 << 16, minor: (KRB5_ERR_BASE + minor) as i32 as u32, message: String::new() };
        assert_eq!(e(37).failure(), Failure::ClockSkew);
        assert_eq!(e(32).failure(), Failure::Expired);
        assert_eq!(e(34).failure(), Failure::Replay);
        assert_eq!(e(44).failure(), Failure::WrongKey);
        assert_eq!(e(31).failure(), Failure::WrongKey);
        assert_eq!(Error { major: 9 << 16, minor: 0, message: String::new() }.failure(), Failure::Malformed);
        assert_eq!(Error { major: (13 << 16) | GSS_S_DUPLICATE_TOKEN, minor: 0, message: String::new() }.failure(), Failure::Replay);
    }

    #[test]
    fn a_written_keytab_gives_an_acceptor_that_refuses_garbage() {
        let path = std::env::temp_dir().join(format!("smbq-gssapi-keytab-{}", std::process::id()));
        std::fs::write(&path, keytab_file("EXAMPLE.TEST", "cifs", "host", 1, 18, &[7; 32])).unwrap();
        check_keytab(&path).unwrap();
        let mut acc = Acceptor::new(&path).unwrap();
        // MIT: GSS_S_FAILURE for a token no mechanism of the credential claims.
        let e = acc.step(b"not a token").unwrap_err();
        assert_eq!(e.failure(), Failure::Other, "{e}");
        assert!(acc.initiator().is_err() && acc.session_key().is_err());
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn garbage_is_a_defective_token_not_a_crash() {
        let dir = std::env::temp_dir().join(format!("smbq-gssapi-test-{}", std::process::id()));
        // A keytab that does not exist: acquiring its credential fails cleanly.
        assert!(check_keytab(&dir.join("none.keytab")).is_err());
        // An initiator for a name with no credential cache fails cleanly too.
        std::env::set_var("KRB5CCNAME", format!("FILE:{}", dir.join("no-ccache").display()));
        std::env::set_var("KRB5_CONFIG", dir.join("no-krb5.conf"));
        let mut init = Initiator::new("cifs@localhost").expect("import name");
        assert!(init.step(None).is_err());
    }
}
