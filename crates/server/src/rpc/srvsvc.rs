//! The srvsvc interface (MS-SRVS), the operations clients use to list
//! shares and name the server: NetrShareEnum (opnum 15, levels 0 and 1),
//! NetrShareEnumSticky (36, the same without the special `$` shares, as
//! Samba answers it), NetrShareGetInfo (16, levels 0 and 1) and NetrServerGetInfo (21,
//! levels 100 and 101). Requests and responses are NDR stub data.

use smbq_wire::ndr::{Reader, Writer};
use smbq_wire::DecodeError;

pub use smbq_wire::srvsvc::{
    OP_SERVER_GET_INFO, OP_SHARE_ENUM, OP_SHARE_ENUM_STICKY, OP_SHARE_GET_INFO, STYPE_DISKTREE, STYPE_IPC_SPECIAL,
    SYNTAX, WERR_INVALID_LEVEL, WERR_NET_NAME_NOT_FOUND, WERR_OK,
};

/// PLATFORM_ID_NT (MS-SRVS 2.2.2.6) and the SV_TYPE bits we announce
/// (2.2.2.7): workstation, server, NT, server NT.
const PLATFORM_NT: u32 = 500;
const SV_TYPE: u32 = 0x0000_0001 | 0x0000_0002 | 0x0000_1000 | 0x0000_8000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareInfo {
    pub name: String,
    pub kind: u32,
    pub remark: String,
}

/// What the interface answers from: the server's name and shares.
pub struct Srvsvc {
    pub server_name: String,
    pub shares: Vec<ShareInfo>,
}

impl Srvsvc {
    /// Run operation `opnum` on `stub`; `None` for an operation not
    /// implemented here (the caller faults with nca_op_rng_error).
    pub fn call(&self, opnum: u16, stub: &[u8]) -> Option<Result<Vec<u8>, DecodeError>> {
        match opnum {
            OP_SHARE_ENUM => Some(self.share_enum(stub, false)),
            OP_SHARE_ENUM_STICKY => Some(self.share_enum(stub, true)),
            OP_SHARE_GET_INFO => Some(self.share_get_info(stub)),
            OP_SERVER_GET_INFO => Some(self.server_get_info(stub)),
            _ => None,
        }
    }

    /// NetrShareEnum (MS-SRVS 3.1.4.8): `[in, string, unique] ServerName,
    /// [in, out] SHARE_ENUM_STRUCT* InfoStruct, [in] PreferedMaximumLength,
    /// [out] TotalEntries, [in, out, unique] ResumeHandle`. All entries
    /// fit in one answer (PreferedMaximumLength is advisory). `sticky`
    /// leaves out shares whose name ends in `$`.
    fn share_enum(&self, stub: &[u8], sticky: bool) -> Result<Vec<u8>, DecodeError> {
        let mut r = Reader::new(stub);
        server_name(&mut r)?;
        let level = r.u32()?;
        if r.u32()? != level {
            return Err(DecodeError::Invalid);
        }
        if r.pointer()? {
            let _entries_read = r.u32()?;
            // A client sends an empty container; an array here is not parsed.
            if r.pointer()? {
                return Err(DecodeError::Invalid);
            }
        }
        let _prefered_max = r.u32()?;
        let resume = if r.pointer()? { Some(r.u32()?) } else { None };

        let all: Vec<&ShareInfo> = self.shares.iter().filter(|s| !(sticky && s.name.ends_with('$'))).collect();
        let shares = all.get(resume.unwrap_or(0) as usize..).unwrap_or(&[]);
        let mut w = Writer::new();
        w.u32(level);
        w.u32(level);
        let status = if level == 0 || level == 1 {
            w.pointer();
            w.u32(shares.len() as u32);
            if shares.is_empty() {
                w.null();
            } else {
                w.pointer();
                w.u32(shares.len() as u32);
                for s in shares {
                    share_scalars(&mut w, level, s);
                }
                for s in shares {
                    share_buffers(&mut w, level, s);
                }
            }
            WERR_OK
        } else {
            w.null();
            WERR_INVALID_LEVEL
        };
        w.u32(all.len() as u32);
        if resume.is_some() {
            w.pointer();
            w.u32(0);
        } else {
            w.null();
        }
        w.u32(status);
        Ok(w.buf)
    }

    /// NetrShareGetInfo (MS-SRVS 3.1.4.10): `[in, string, unique]
    /// ServerName, [in, string] NetName, [in] Level, [out, switch_is(Level)]
    /// SHARE_INFO* InfoStruct`.
    fn share_get_info(&self, stub: &[u8]) -> Result<Vec<u8>, DecodeError> {
        let mut r = Reader::new(stub);
        server_name(&mut r)?;
        let name = r.string()?;
        let level = r.u32()?;
        let share = self.shares.iter().find(|s| s.name.eq_ignore_ascii_case(&name));
        let mut w = Writer::new();
        w.u32(level);
        let status = match (level, share) {
            (0 | 1, Some(s)) => {
                w.pointer();
                share_scalars(&mut w, level, s);
                share_buffers(&mut w, level, s);
                WERR_OK
            }
            (0 | 1, None) => {
                w.null();
                WERR_NET_NAME_NOT_FOUND
            }
            _ => {
                w.null();
                WERR_INVALID_LEVEL
            }
        };
        w.u32(status);
        Ok(w.buf)
    }

    /// NetrServerGetInfo (MS-SRVS 3.1.4.17): `[in, string, unique]
    /// ServerName, [in] Level, [out, switch_is(Level)] SERVER_INFO*
    /// InfoStruct`; SERVER_INFO_101 says NT platform, version 10.0.
    fn server_get_info(&self, stub: &[u8]) -> Result<Vec<u8>, DecodeError> {
        let mut r = Reader::new(stub);
        server_name(&mut r)?;
        let level = r.u32()?;
        let mut w = Writer::new();
        w.u32(level);
        let status = match level {
            100 => {
                w.pointer();
                w.u32(PLATFORM_NT);
                w.pointer();
                w.string(&self.server_name);
                WERR_OK
            }
            101 => {
                w.pointer();
                w.u32(PLATFORM_NT);
                w.pointer();
                w.u32(10);
                w.u32(0);
                w.u32(SV_TYPE);
                w.pointer();
                w.string(&self.server_name);
                w.string("");
                WERR_OK
            }
            _ => {
                w.null();
                WERR_INVALID_LEVEL
            }
        };
        w.u32(status);
        Ok(w.buf)
    }
}

/// `[in, string, unique] SRVSVC_HANDLE ServerName`: read and ignored.
fn server_name(r: &mut Reader<'_>) -> Result<(), DecodeError> {
    if r.pointer()? {
        r.string()?;
    }
    Ok(())
}

/// SHARE_INFO_0 (netname) or SHARE_INFO_1 (netname, type, remark),
/// pointers only; the strings follow in [`share_buffers`].
fn share_scalars(w: &mut Writer, level: u32, s: &ShareInfo) {
    w.pointer();
    if level == 1 {
        w.u32(s.kind);
        w.pointer();
    }
}

fn share_buffers(w: &mut Writer, level: u32, s: &ShareInfo) {
    w.string(&s.name);
    if level == 1 {
        w.string(&s.remark);
    }
}
