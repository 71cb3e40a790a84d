//! Share listing with srvsvc NetrShareEnum (MS-SRVS 3.1.4.8, opnum 15)
//! over connection-oriented DCE/RPC (C706 chapter 12, MS-RPCE 2.2.2) on
//! the named pipe `srvsvc` of IPC$. No I/O: these functions build the
//! PDUs to write and decode the bytes read; the caller opens the pipe and
//! moves the bytes (WRITE/READ or FSCTL_PIPE_TRANSCEIVE).
//!
//! The exchange: write [`bind_pdu`], read the answer and pass it to
//! [`check_bind_ack`]; write [`share_enum_request`], feed every byte read
//! into a [`Reassembler`] until it yields the stub, then
//! [`decode_share_enum`] it.

use smbq_wire::dcerpc::{self, pfc, ptype, set_frag_len, Header, HEADER_LEN, MAX_FRAG, NDR};
use smbq_wire::ndr;
use smbq_wire::reader::Reader;
use smbq_wire::srvsvc::{
    OP_SHARE_ENUM, STYPE_DEVICE, STYPE_DISKTREE, STYPE_IPC, STYPE_MASK, STYPE_PRINTQ, STYPE_SPECIAL, SYNTAX, WERR_OK,
};
use smbq_wire::DecodeError;

/// Bound on a reassembled response's stub data: a share list is a few
/// KiB, and a server sending more is not answering NetrShareEnum.
pub const MAX_RESPONSE: usize = 1024 * 1024;

/// Presentation context id of the one context [`bind_pdu`] proposes.
const CONTEXT_ID: u16 = 0;

/// The fixed part of one SHARE_INFO_1 (MS-SRVS 2.2.4.23): netname
/// pointer, type, remark pointer.
const SHARE_INFO_1_LEN: usize = 12;

/// Why a share listing failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RpcError {
    /// Bytes that are not a well-formed PDU or NDR stub.
    #[error("malformed DCE/RPC data: {0}")]
    Decode(#[from] DecodeError),
    /// Well-formed bytes the exchange does not allow here.
    #[error("DCE/RPC protocol violation: {0}")]
    Protocol(&'static str),
    #[error("unexpected DCE/RPC PDU type {got} (expected {expected})")]
    UnexpectedPdu { got: u8, expected: u8 },
    /// The server refused the whole BIND (C706 12.6.4.4, p_reject_reason_t).
    #[error("bind refused (bind_nak): {}", reject_reason_name(*.0))]
    BindNak(u16),
    /// The server did not accept srvsvc over NDR (C706 12.6.3.1
    /// p_cont_def_result_t and p_provider_reason_t).
    #[error("srvsvc presentation context not accepted: {} ({})", result_name(*.result), provider_reason_name(*.reason))]
    ContextRejected { result: u16, reason: u16 },
    /// A FAULT PDU (C706 12.6.4.7) with its status.
    #[error("RPC fault {:#010x} ({})", .0, fault_name(*.0))]
    Fault(u32),
    #[error("response stub above {max} bytes", max = MAX_RESPONSE)]
    TooLarge,
    /// NetrShareEnum's NET_API_STATUS was not NERR_Success.
    #[error("NetrShareEnum failed: WERROR {} ({})", .0, werror_name(*.0))]
    Werror(u32),
}

/// One share of the list (SHARE_INFO_1, MS-SRVS 2.2.4.23).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Share {
    pub name: String,
    /// STYPE bits (MS-SRVS 2.2.2.4); see [`kind_name`].
    pub kind: u32,
    pub comment: String,
}

/// The share type as a word: "disk", "printer", "device", "ipc" (or
/// "unknown"), with " (special)" when STYPE_SPECIAL (0x80000000) marks an
/// administrative share such as IPC$ or C$ (MS-SRVS 2.2.2.4).
pub fn kind_name(kind: u32) -> &'static str {
    let special = kind & STYPE_SPECIAL != 0;
    match (kind & STYPE_MASK, special) {
        (STYPE_DISKTREE, false) => "disk",
        (STYPE_DISKTREE, true) => "disk (special)",
        (STYPE_PRINTQ, false) => "printer",
        (STYPE_PRINTQ, true) => "printer (special)",
        (STYPE_DEVICE, false) => "device",
        (STYPE_DEVICE, true) => "device (special)",
        (STYPE_IPC, false) => "ipc",
        (STYPE_IPC, true) => "ipc (special)",
        (_, false) => "unknown",
        (_, true) => "unknown (special)",
    }
}

/// BIND (C706 12.6.4.3) proposing one presentation context, id 0: srvsvc
/// v3.0 (MS-SRVS 1.9) over NDR; fragments up to 4280 bytes both ways, a
/// new association group, no authentication.
pub fn bind_pdu(call_id: u32) -> Vec<u8> {
    let mut pdu = Vec::with_capacity(72);
    Header { ptype: ptype::BIND, flags: pfc::FIRST_FRAG | pfc::LAST_FRAG, frag_len: 0, auth_len: 0, call_id }
        .encode(&mut pdu);
    pdu.extend_from_slice(&MAX_FRAG.to_le_bytes()); // max_xmit_frag
    pdu.extend_from_slice(&MAX_FRAG.to_le_bytes()); // max_recv_frag
    pdu.extend_from_slice(&0u32.to_le_bytes()); // assoc_group_id
    pdu.extend_from_slice(&[1, 0, 0, 0]); // n_context_elem, reserved
    pdu.extend_from_slice(&CONTEXT_ID.to_le_bytes());
    pdu.extend_from_slice(&[1, 0]); // n_transfer_syn, reserved
    pdu.extend_from_slice(&SYNTAX);
    pdu.extend_from_slice(&NDR);
    set_frag_len(&mut pdu);
    pdu
}

/// Check the answer to [`bind_pdu`], one whole PDU: a BIND_ACK (C706
/// 12.6.4.4) whose first result accepts context 0 with NDR. A BIND_NAK is
/// [`RpcError::BindNak`], a rejected context [`RpcError::ContextRejected`],
/// a FAULT [`RpcError::Fault`].
pub fn check_bind_ack(pdu: &[u8]) -> Result<(), RpcError> {
    let (h, body) = split_pdu(pdu)?;
    match h.ptype {
        ptype::BIND_ACK => {}
        ptype::BIND_NAK => return Err(RpcError::BindNak(Reader::new(body).u16()?)),
        ptype::FAULT => return Err(RpcError::Fault(fault_status(body)?)),
        got => return Err(RpcError::UnexpectedPdu { got, expected: ptype::BIND_ACK }),
    }
    let mut r = Reader::new(pdu);
    r.skip(HEADER_LEN)?;
    let _max_xmit = r.u16()?;
    let _max_recv = r.u16()?;
    let _assoc_group = r.u32()?;
    let sec_addr_len = r.u16()? as usize;
    r.skip(sec_addr_len)?;
    // The result list is 4-aligned from the start of the PDU.
    r.skip((4 - r.pos() % 4) % 4)?;
    let n_results = r.u8()?;
    r.skip(3)?;
    if n_results == 0 {
        return Err(RpcError::Protocol("BIND_ACK carries no context result"));
    }
    let result = r.u16()?;
    let reason = r.u16()?;
    let transfer = r.array::<20>()?;
    if result != dcerpc::result::ACCEPTANCE {
        return Err(RpcError::ContextRejected { result, reason });
    }
    if transfer != NDR {
        return Err(RpcError::Protocol("BIND_ACK accepted a transfer syntax other than NDR"));
    }
    Ok(())
}

/// REQUEST (C706 12.6.4.9) on context 0, opnum 15: NetrShareEnum
/// (MS-SRVS 3.1.4.8) at level 1 with an empty SHARE_INFO_1_CONTAINER,
/// PreferedMaximumLength 0xFFFFFFFF (everything in one answer) and a
/// resume handle of 0. `server` is the ServerName, e.g. `\\host`; it is
/// cut at 1023 UTF-16 units so that the request is always one fragment
/// and within what servers accept ([`ndr::MAX_STRING`]).
pub fn share_enum_request(call_id: u32, server: &str) -> Vec<u8> {
    let mut units = 0;
    let server: String = server
        .chars()
        .take_while(|c| {
            units += c.len_utf16();
            units < ndr::MAX_STRING as usize
        })
        .collect();
    let mut w = ndr::Writer::new();
    w.pointer(); // [in, string, unique] ServerName
    w.string(&server);
    w.u32(1); // SHARE_ENUM_STRUCT.Level
    w.u32(1); // union switch
    w.pointer(); // SHARE_INFO_1_CONTAINER*
    w.u32(0); // EntriesRead
    w.null(); // Buffer
    w.u32(u32::MAX); // PreferedMaximumLength
    w.pointer(); // [in, out, unique] ResumeHandle
    w.u32(0);
    let mut pdu = Vec::with_capacity(HEADER_LEN + 8 + w.buf.len());
    Header { ptype: ptype::REQUEST, flags: pfc::FIRST_FRAG | pfc::LAST_FRAG, frag_len: 0, auth_len: 0, call_id }
        .encode(&mut pdu);
    pdu.extend_from_slice(&(w.buf.len() as u32).to_le_bytes()); // alloc_hint
    pdu.extend_from_slice(&CONTEXT_ID.to_le_bytes());
    pdu.extend_from_slice(&OP_SHARE_ENUM.to_le_bytes());
    pdu.extend_from_slice(&w.buf);
    set_frag_len(&mut pdu);
    pdu
}

/// Reassembles the RESPONSE fragments of one call (C706 12.6.4.10,
/// 12.4.1 on PFC_FIRST_FRAG/PFC_LAST_FRAG) from bytes as read from the
/// pipe: any split, a PDU across reads or several PDUs in one.
pub struct Reassembler {
    call_id: u32,
    /// Bytes of a PDU not yet complete.
    buf: Vec<u8>,
    stub: Vec<u8>,
    started: bool,
    /// The stub was handed out, or an error was: nothing more is taken.
    finished: bool,
}

impl Reassembler {
    /// Expect the answer to the request sent with `call_id`.
    pub fn new(call_id: u32) -> Reassembler {
        Reassembler { call_id, buf: Vec::new(), stub: Vec::new(), started: false, finished: false }
    }

    /// Feed bytes read from the pipe. `Ok(None)`: more are needed;
    /// `Ok(Some(stub))`: the last fragment is in. A FAULT is
    /// [`RpcError::Fault`]. After the stub or an error, the call is over
    /// and every further push is an error.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Option<Vec<u8>>, RpcError> {
        if self.finished {
            return Err(RpcError::Protocol("bytes after the end of the call"));
        }
        self.buf.extend_from_slice(bytes);
        let r = self.process();
        if !matches!(r, Ok(None)) {
            self.finished = true;
        }
        r
    }

    fn process(&mut self) -> Result<Option<Vec<u8>>, RpcError> {
        loop {
            if self.buf.len() < HEADER_LEN {
                return Ok(None);
            }
            let len = Header::decode(&self.buf)?.frag_len as usize;
            if self.buf.len() < len {
                return Ok(None);
            }
            let rest = self.buf.split_off(len);
            let pdu = std::mem::replace(&mut self.buf, rest);
            if self.fragment(&pdu)? {
                if !self.buf.is_empty() {
                    return Err(RpcError::Protocol("bytes after the last fragment"));
                }
                return Ok(Some(std::mem::take(&mut self.stub)));
            }
        }
    }

    /// One whole PDU; true once it was the last fragment.
    fn fragment(&mut self, pdu: &[u8]) -> Result<bool, RpcError> {
        let (h, body) = split_pdu(pdu)?;
        if h.call_id != self.call_id {
            return Err(RpcError::Protocol("PDU for another call_id"));
        }
        match h.ptype {
            ptype::RESPONSE => {}
            ptype::FAULT => return Err(RpcError::Fault(fault_status(body)?)),
            got => return Err(RpcError::UnexpectedPdu { got, expected: ptype::RESPONSE }),
        }
        if h.auth_len != 0 {
            return Err(RpcError::Protocol("authentication trailer on an unauthenticated association"));
        }
        let first = h.flags & pfc::FIRST_FRAG != 0;
        if first == self.started {
            return Err(RpcError::Protocol(if first {
                "PFC_FIRST_FRAG in the middle of a response"
            } else {
                "response does not start with PFC_FIRST_FRAG"
            }));
        }
        self.started = true;
        let mut r = Reader::new(body);
        let _alloc_hint = r.u32()?;
        if r.u16()? != CONTEXT_ID {
            return Err(RpcError::Protocol("response on another presentation context"));
        }
        let _cancel_count = r.u8()?;
        r.skip(1)?;
        let stub = r.rest();
        if self.stub.len() + stub.len() > MAX_RESPONSE {
            return Err(RpcError::TooLarge);
        }
        self.stub.extend_from_slice(stub);
        Ok(h.flags & pfc::LAST_FRAG != 0)
    }
}

/// Decode NetrShareEnum's answer (MS-SRVS 3.1.4.8): `[in, out]
/// SHARE_ENUM_STRUCT* InfoStruct` at level 1 (SHARE_INFO_1_CONTAINER,
/// 2.2.4.33), `[out] TotalEntries`, `[in, out, unique] ResumeHandle`, then
/// the NET_API_STATUS; a nonzero one is [`RpcError::Werror`]. Counts are
/// checked against the bytes present before anything is allocated.
pub fn decode_share_enum(stub: &[u8]) -> Result<Vec<Share>, RpcError> {
    let mut r = ndr::Reader::new(stub);
    let level = r.u32()?;
    if r.u32()? != level {
        return Err(RpcError::Protocol("union switch differs from the level"));
    }
    let mut shares = Vec::new();
    if r.pointer()? {
        if level != 1 {
            return Err(RpcError::Protocol("NetrShareEnum answered at a level other than 1"));
        }
        let entries = r.u32()?;
        if r.pointer()? {
            let count = r.u32()?;
            if count != entries {
                return Err(RpcError::Protocol("array size differs from EntriesRead"));
            }
            let count = count as usize;
            if count > r.remaining() / SHARE_INFO_1_LEN {
                return Err(DecodeError::Truncated.into());
            }
            // Fixed parts first, then the strings they point to (C706
            // 14.3.12.3, embedded pointers' referents deferred).
            let mut fixed = Vec::with_capacity(count);
            for _ in 0..count {
                fixed.push((r.pointer()?, r.u32()?, r.pointer()?));
            }
            shares.reserve_exact(count);
            for (has_name, kind, has_comment) in fixed {
                let name = if has_name { r.string()? } else { String::new() };
                let comment = if has_comment { r.string()? } else { String::new() };
                shares.push(Share { name, kind, comment });
            }
        } else if entries != 0 {
            return Err(RpcError::Protocol("EntriesRead nonzero with no buffer"));
        }
    }
    let _total_entries = r.u32()?;
    if r.pointer()? {
        let _resume_handle = r.u32()?;
    }
    let status = r.u32()?;
    // At most the zeros that pad a stub to 8 bytes may follow.
    let tail = stub.get(stub.len() - r.remaining()..).unwrap_or(&[]);
    if tail.len() >= 8 || tail.iter().any(|&b| b != 0) {
        return Err(RpcError::Protocol("bytes after the NetrShareEnum answer"));
    }
    if status != WERR_OK {
        return Err(RpcError::Werror(status));
    }
    Ok(shares)
}

/// A whole PDU: its header, and the body after it (frag_length must be
/// the length given).
fn split_pdu(pdu: &[u8]) -> Result<(Header, &[u8]), RpcError> {
    let h = Header::decode(pdu)?;
    match pdu.len().cmp(&(h.frag_len as usize)) {
        std::cmp::Ordering::Less => Err(DecodeError::Truncated.into()),
        std::cmp::Ordering::Greater => Err(RpcError::Protocol("bytes after the PDU's frag_length")),
        std::cmp::Ordering::Equal => Ok((h, pdu.get(HEADER_LEN..).unwrap_or(&[]))),
    }
}

/// The status of a FAULT body (MS-RPCE 2.2.2.13): alloc_hint, p_cont_id,
/// cancel_count, reserved, status.
fn fault_status(body: &[u8]) -> Result<u32, RpcError> {
    let mut r = Reader::new(body);
    r.skip(8)?;
    Ok(r.u32()?)
}

fn reject_reason_name(reason: u16) -> &'static str {
    use dcerpc::reject_reason::*;
    match reason {
        NOT_SPECIFIED => "reason not specified",
        TEMPORARY_CONGESTION => "temporary congestion",
        LOCAL_LIMIT_EXCEEDED => "local limit exceeded",
        CALLED_PADDR_UNKNOWN => "called address unknown",
        PROTOCOL_VERSION_NOT_SUPPORTED => "protocol version not supported",
        DEFAULT_CONTEXT_NOT_SUPPORTED => "default context not supported",
        USER_DATA_NOT_READABLE => "user data not readable",
        NO_PSAP_AVAILABLE => "no PSAP available",
        AUTHENTICATION_TYPE_NOT_RECOGNIZED => "authentication type not recognized",
        INVALID_CHECKSUM => "invalid checksum",
        _ => "unknown reason",
    }
}

fn result_name(result: u16) -> &'static str {
    use dcerpc::result::*;
    match result {
        ACCEPTANCE => "acceptance",
        USER_REJECTION => "user rejection",
        PROVIDER_REJECTION => "provider rejection",
        NEGOTIATE_ACK => "negotiate ack",
        _ => "unknown result",
    }
}

fn provider_reason_name(reason: u16) -> &'static str {
    use dcerpc::provider_reason::*;
    match reason {
        NOT_SPECIFIED => "reason not specified",
        ABSTRACT_SYNTAX_NOT_SUPPORTED => "abstract syntax not supported",
        TRANSFER_SYNTAXES_NOT_SUPPORTED => "proposed transfer syntaxes not supported",
        LOCAL_LIMIT_EXCEEDED => "local limit exceeded",
        _ => "unknown reason",
    }
}

fn fault_name(status: u32) -> &'static str {
    use dcerpc::fault::*;
    match status {
        NCA_OP_RNG_ERROR => "nca_op_rng_error: operation not implemented",
        NCA_UNK_IF => "nca_unk_if: interface not bound",
        NCA_PROTO_ERROR => "nca_proto_error",
        ACCESS_DENIED => "access denied",
        RPC_X_BAD_STUB_DATA => "rpc_x_bad_stub_data",
        _ => "unknown fault",
    }
}

fn werror_name(status: u32) -> &'static str {
    use smbq_wire::srvsvc::*;
    match status {
        WERR_ACCESS_DENIED => "access denied",
        WERR_NOT_ENOUGH_MEMORY => "not enough memory",
        WERR_INVALID_PARAMETER => "invalid parameter",
        WERR_INVALID_LEVEL => "invalid level",
        WERR_MORE_DATA => "more data",
        WERR_NET_NAME_NOT_FOUND => "network name not found",
        _ => "unknown error",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use smbq_server::rpc::Pipe;
    use smbq_server::{Server, ServerConfig, ShareConfig};
    use smbq_wire::srvsvc::{STYPE_IPC_SPECIAL, WERR_INVALID_LEVEL};
    use std::sync::Arc;

    /// A server with disk shares `names` (in memory) and IPC$, and its
    /// srvsvc pipe as user alice.
    fn pipe(names: &[String]) -> Pipe {
        let shares = names
            .iter()
            .map(|n| ShareConfig {
                fs: Some(Arc::new(smbq_vfs::MemFs::new(|| 0))),
                ..ShareConfig::new(n.as_str(), "/nonexistent")
            })
            .collect();
        let server = Server::new(ServerConfig { shares, ..Default::default() }, smbq_auth::UserDb::new()).unwrap();
        Pipe::open("srvsvc", &server.config.server_name, &server.shares(), "alice", 1).unwrap()
    }

    /// Write `pdu`, then READ `chunk` bytes at a time into a reassembler
    /// until it yields (or fails).
    fn call(p: &mut Pipe, pdu: &[u8], call_id: u32, chunk: usize) -> Result<Vec<u8>, RpcError> {
        p.write(pdu).unwrap();
        let mut asm = Reassembler::new(call_id);
        loop {
            let (bytes, _more) = p.read(chunk).unwrap();
            assert!(!bytes.is_empty(), "pipe ran dry before the last fragment");
            if let Some(stub) = asm.push(&bytes)? {
                return Ok(stub);
            }
        }
    }

    fn bound(p: &mut Pipe) {
        let (ack, more) = p.transceive(&bind_pdu(1), 4280).unwrap();
        assert!(!more);
        check_bind_ack(&ack).unwrap();
    }

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    /// The bind smbclient and impacket send (the server's bind_ack_bytes
    /// test), with a new association group.
    #[test]
    fn bind_pdu_bytes() {
        let mut want = vec![5, 0, 11, 3, 0x10, 0, 0, 0, 72, 0, 0, 0, 9, 0, 0, 0];
        want.extend_from_slice(&[0xb8, 0x10, 0xb8, 0x10, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0]);
        want.extend_from_slice(&SYNTAX);
        want.extend_from_slice(&NDR);
        assert_eq!(bind_pdu(9), want);
    }

    #[test]
    fn share_enum_against_server() {
        let mut p = pipe(&names(&["data", "photos"]));
        bound(&mut p);
        let stub = call(&mut p, &share_enum_request(2, "\\\\127.0.0.1"), 2, 4280).unwrap();
        let shares = decode_share_enum(&stub).unwrap();
        let want =
            [("data", STYPE_DISKTREE, ""), ("photos", STYPE_DISKTREE, ""), ("IPC$", STYPE_IPC_SPECIAL, "IPC Service")];
        let got: Vec<_> = shares.iter().map(|s| (s.name.as_str(), s.kind, s.comment.as_str())).collect();
        assert_eq!(got, want);
        assert_eq!(kind_name(shares[0].kind), "disk");
        assert_eq!(kind_name(shares[2].kind), "ipc (special)");
        // Short READs split PDUs; the same list comes back.
        let stub = call(&mut p, &share_enum_request(3, "\\\\127.0.0.1"), 3, 7).unwrap();
        assert_eq!(decode_share_enum(&stub).unwrap(), shares);
    }

    /// 150 shares at max_recv_frag 1432: several RESPONSE fragments,
    /// reassembled whether read in pieces or all at once.
    #[test]
    fn fragmented_response() {
        let many: Vec<String> = (0..150).map(|i| format!("share-number-{i:03}")).collect();
        let mut p = pipe(&many);
        let mut bind = bind_pdu(1);
        bind[18..20].copy_from_slice(&1432u16.to_le_bytes());
        check_bind_ack(&p.transceive(&bind, 4280).unwrap().0).unwrap();

        p.write(&share_enum_request(2, "\\\\h")).unwrap();
        let mut all = Vec::new();
        let mut fragments = 0;
        loop {
            let (msg, more) = p.read(4280).unwrap();
            assert!(!more && msg.len() <= 1432);
            if msg.is_empty() {
                break;
            }
            fragments += 1;
            all.extend_from_slice(&msg);
        }
        assert!(fragments > 3, "{fragments}");
        let whole = Reassembler::new(2).push(&all).unwrap().unwrap();
        let mut asm = Reassembler::new(2);
        let mut pieces = None;
        for c in all.chunks(1000) {
            assert!(pieces.is_none());
            pieces = asm.push(c).unwrap();
        }
        assert_eq!(pieces.as_ref(), Some(&whole));
        let got: Vec<String> = decode_share_enum(&whole).unwrap().into_iter().map(|s| s.name).collect();
        let mut want = many.clone();
        want.push("IPC$".into());
        assert_eq!(got, want);
    }

    /// A request before any bind: the server's nca_unk_if FAULT.
    #[test]
    fn fault_pdu() {
        let mut p = pipe(&names(&["data"]));
        let e = call(&mut p, &share_enum_request(5, "x"), 5, 4280).unwrap_err();
        assert_eq!(e, RpcError::Fault(dcerpc::fault::NCA_UNK_IF));
        assert!(e.to_string().contains("0x1c010003"), "{e}");
    }

    #[test]
    fn bind_refusals() {
        // srvsvc under another UUID: the server rejects the context.
        let mut p = pipe(&names(&["data"]));
        let mut bind = bind_pdu(1);
        bind[32] ^= 0xff;
        let (ack, _) = p.transceive(&bind, 4280).unwrap();
        let e = check_bind_ack(&ack).unwrap_err();
        assert_eq!(e, RpcError::ContextRejected { result: 2, reason: 1 });
        assert!(e.to_string().contains("abstract syntax not supported"), "{e}");
        // bind_nak: protocol version not supported.
        let nak = [5, 0, 13, 3, 0x10, 0, 0, 0, 18, 0, 0, 0, 1, 0, 0, 0, 4, 0];
        let e = check_bind_ack(&nak).unwrap_err();
        assert_eq!(e, RpcError::BindNak(4));
        assert!(e.to_string().contains("protocol version not supported"), "{e}");
        // Not a bind answer; truncated; a header promising more bytes.
        let mut p = pipe(&names(&["data"]));
        bound(&mut p);
        p.write(&share_enum_request(2, "x")).unwrap();
        let (resp, _) = p.read(4280).unwrap();
        assert_eq!(
            check_bind_ack(&resp),
            Err(RpcError::UnexpectedPdu { got: ptype::RESPONSE, expected: ptype::BIND_ACK })
        );
        let (ack, _) = pipe(&names(&["data"])).transceive(&bind_pdu(1), 4280).unwrap();
        for n in 0..ack.len() {
            assert!(check_bind_ack(&ack[..n]).is_err());
        }
        let mut short = ack.clone();
        short[8] = 100; // frag_len past the end
        assert_eq!(check_bind_ack(&short), Err(RpcError::Decode(DecodeError::Truncated)));
    }

    fn response(call_id: u32, flags: u8, stub: &[u8]) -> Vec<u8> {
        let mut pdu = Vec::new();
        Header { ptype: ptype::RESPONSE, flags, frag_len: 0, auth_len: 0, call_id }.encode(&mut pdu);
        pdu.extend_from_slice(&(stub.len() as u32).to_le_bytes());
        pdu.extend_from_slice(&[0, 0, 0, 0]);
        pdu.extend_from_slice(stub);
        set_frag_len(&mut pdu);
        pdu
    }

    #[test]
    fn reassembler_rules() {
        const BOTH: u8 = pfc::FIRST_FRAG | pfc::LAST_FRAG;
        let push = |id: u32, bytes: &[u8]| Reassembler::new(id).push(bytes);
        assert_eq!(push(1, &response(1, BOTH, b"abcd")), Ok(Some(b"abcd".to_vec())));
        assert_eq!(push(2, &response(1, BOTH, b"abcd")), Err(RpcError::Protocol("PDU for another call_id")));
        assert!(matches!(push(1, &response(1, pfc::LAST_FRAG, b"x")), Err(RpcError::Protocol(_))));
        let mut two = response(1, pfc::FIRST_FRAG, b"ab");
        two.extend_from_slice(&response(1, pfc::FIRST_FRAG | pfc::LAST_FRAG, b"cd"));
        assert!(matches!(push(1, &two), Err(RpcError::Protocol(_))));
        // Bytes after the last fragment; a push after the end.
        let mut extra = response(1, BOTH, b"ab");
        extra.push(5);
        assert_eq!(push(1, &extra), Err(RpcError::Protocol("bytes after the last fragment")));
        let mut asm = Reassembler::new(1);
        assert!(asm.push(&response(1, BOTH, b"ab")).unwrap().is_some());
        assert!(asm.push(&response(1, BOTH, b"ab")).is_err());
        // Not DCE/RPC at all.
        assert!(matches!(push(1, b"GET / HTTP/1.1\r\n\r\n"), Err(RpcError::Decode(_))));
        // Wrong PDU type.
        let mut bind = bind_pdu(1);
        assert_eq!(push(1, &bind), Err(RpcError::UnexpectedPdu { got: ptype::BIND, expected: ptype::RESPONSE }));
        bind[2] = ptype::RESPONSE;
        bind[20] = 1; // p_cont_id 1
        assert!(push(1, &bind).is_err());
        // Over MAX_RESPONSE in 4 KiB fragments: refused, not collected.
        let frag = vec![0u8; 4096];
        let mut asm = Reassembler::new(1);
        let mut r = asm.push(&response(1, pfc::FIRST_FRAG, &frag));
        let mut n = 1;
        while r == Ok(None) {
            r = asm.push(&response(1, 0, &frag));
            n += 1;
        }
        assert_eq!(r, Err(RpcError::TooLarge));
        assert_eq!(n, MAX_RESPONSE / 4096 + 1);
    }

    /// A level-1 answer built by hand: (entries, array count, fixed parts,
    /// strings) then total, resume handle, status.
    fn answer(count: u32, entries: &[(&str, u32, &str)], status: u32) -> ndr::Writer {
        let mut w = ndr::Writer::new();
        w.u32(1);
        w.u32(1);
        w.pointer();
        w.u32(count);
        w.pointer();
        w.u32(count);
        for (_, kind, _) in entries {
            w.pointer();
            w.u32(*kind);
            w.pointer();
        }
        for (name, _, comment) in entries {
            w.string(name);
            w.string(comment);
        }
        w.u32(entries.len() as u32);
        w.pointer();
        w.u32(0);
        w.u32(status);
        w
    }

    #[test]
    fn hostile_share_enum() {
        let ok = answer(2, &[("a", 0, "x"), ("p", 1, "")], 0).buf;
        assert_eq!(decode_share_enum(&ok).unwrap().len(), 2);
        // Every truncation fails cleanly.
        for n in 0..ok.len() {
            assert!(decode_share_enum(&ok[..n]).is_err(), "{n}");
        }
        // A count of 2^32 - 1 with nothing behind it: no allocation.
        let huge = answer(u32::MAX, &[], 0).buf;
        assert_eq!(decode_share_enum(&huge), Err(RpcError::Decode(DecodeError::Truncated)));
        // Array size differing from EntriesRead.
        let mut w = answer(1, &[("a", 0, "")], 0);
        w.buf[20..24].copy_from_slice(&2u32.to_le_bytes());
        assert!(matches!(decode_share_enum(&w.buf), Err(RpcError::Protocol(_))));
        // String counts: huge, past the end, offset nonzero.
        let strings_at = 24 + 12;
        let mut w = answer(1, &[("a", 0, "")], 0);
        w.buf[strings_at..strings_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        w.buf[strings_at + 8..strings_at + 12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode_share_enum(&w.buf), Err(RpcError::Decode(DecodeError::TooLong)));
        let mut w = answer(1, &[("a", 0, "")], 0);
        w.buf[strings_at..strings_at + 4].copy_from_slice(&1000u32.to_le_bytes());
        w.buf[strings_at + 8..strings_at + 12].copy_from_slice(&1000u32.to_le_bytes());
        assert_eq!(decode_share_enum(&w.buf), Err(RpcError::Decode(DecodeError::Truncated)));
        let mut w = answer(1, &[("a", 0, "")], 0);
        w.buf[strings_at + 4..strings_at + 8].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(decode_share_enum(&w.buf), Err(RpcError::Decode(DecodeError::Invalid)));
        // WERROR; trailing garbage; zero padding is fine.
        let w = answer(0, &[], WERR_INVALID_LEVEL);
        let e = decode_share_enum(&w.buf).unwrap_err();
        assert_eq!(e, RpcError::Werror(WERR_INVALID_LEVEL));
        assert!(e.to_string().contains("invalid level"), "{e}");
        let mut padded = ok.clone();
        padded.extend_from_slice(&[0; 4]);
        assert!(decode_share_enum(&padded).is_ok());
        padded.push(1);
        assert!(decode_share_enum(&padded).is_err());
        // Random bytes and random flips never panic.
        for i in 0..5000 {
            let mut b = ok.clone();
            if i % 2 == 0 {
                let at = rand::random::<u32>() as usize % b.len();
                b[at] = rand::random();
            } else {
                b = (0..rand::random::<u8>()).map(|_| rand::random()).collect();
            }
            let _ = decode_share_enum(&b);
            let _ = check_bind_ack(&b);
            let _ = Reassembler::new(1).push(&b);
        }
    }

    #[test]
    fn long_server_name_is_cut() {
        let req = share_enum_request(1, &"é".repeat(5000));
        assert!(req.len() <= MAX_FRAG as usize);
        let h = Header::decode(&req).unwrap();
        assert_eq!((h.ptype, h.frag_len as usize), (ptype::REQUEST, req.len()));
        let mut r = ndr::Reader::new(&req[24..]);
        assert!(r.pointer().unwrap());
        assert_eq!(r.string().unwrap().chars().count(), 1023);
    }

    #[test]
    fn kind_names() {
        assert_eq!(kind_name(0), "disk");
        assert_eq!(kind_name(1), "printer");
        assert_eq!(kind_name(2), "device");
        assert_eq!(kind_name(3), "ipc");
        assert_eq!(kind_name(0x8000_0000), "disk (special)");
        assert_eq!(kind_name(0x4000_0003), "ipc");
        assert_eq!(kind_name(9), "unknown");
    }
}
