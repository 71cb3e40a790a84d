//! Connection-oriented DCE/RPC (C706 chapter 12, MS-RPCE 2.2.2) over a
//! named pipe: BIND/ALTER_CONTEXT with presentation context negotiation,
//! REQUEST reassembly, RESPONSE fragmentation, FAULT. No RPC-level
//! authentication: the SMB session already authenticated the caller.

use super::srvsvc::{self, Srvsvc};
use smbq_wire::dcerpc::{
    fault, pfc, provider_reason, ptype, result, set_frag_len, Header, HEADER_LEN, MAX_FRAG, MIN_FRAG, NDR,
};
use smbq_wire::reader::Reader;
use smbq_wire::DecodeError;
use std::collections::VecDeque;

/// First eight bytes of the bind time feature negotiation syntax
/// 6cb71c2c-9812-4540-xxxx-xxxxxxxxxxxx (MS-RPCE 3.3.1.5.3); the rest are
/// feature bits.
const BTFN_PREFIX: [u8; 8] = [0x2c, 0x1c, 0xb7, 0x6c, 0x12, 0x98, 0x40, 0x45];

/// Bound on a reassembled request's stub data.
pub const MAX_REQUEST: usize = 64 * 1024;
/// Bound on presentation contexts in one BIND and on those kept.
const MAX_CONTEXTS: usize = 16;

/// A request whose fragments are still arriving.
struct Partial {
    call_id: u32,
    ctx_id: u16,
    opnum: u16,
    stub: Vec<u8>,
}

/// One association: the presentation contexts accepted so far, the
/// fragment size agreed, and a request being reassembled.
pub struct Association {
    contexts: Vec<u16>,
    max_xmit: u16,
    assoc_group: u32,
    partial: Option<Partial>,
}

impl Association {
    pub fn new(assoc_group: u32) -> Association {
        Association { contexts: Vec::new(), max_xmit: MIN_FRAG, assoc_group, partial: None }
    }

    /// Handle one complete PDU (`pdu.len()` equals its frag_length);
    /// answers are appended to `out`, one message per fragment. An error
    /// means the peer does not speak DCE/RPC: the pipe drops the bytes.
    pub fn pdu(&mut self, pdu: &[u8], sec_addr: &str, iface: &Srvsvc, out: &mut VecDeque<Vec<u8>>) -> Result<(), DecodeError> {
        let h = Header::decode(pdu)?;
        if h.frag_len as usize != pdu.len() {
            return Err(DecodeError::Invalid);
        }
        let body = pdu.get(HEADER_LEN..).unwrap_or(&[]);
        match h.ptype {
            ptype::BIND => {
                out.push_back(self.bind(&h, body, sec_addr, ptype::BIND_ACK)?);
            }
            ptype::ALTER_CONTEXT => {
                out.push_back(self.bind(&h, body, "", ptype::ALTER_CONTEXT_RESP)?);
            }
            ptype::REQUEST => self.request(&h, body, iface, out),
            ptype::CO_CANCEL | ptype::ORPHANED => {
                if self.partial.as_ref().is_some_and(|p| p.call_id == h.call_id) {
                    self.partial = None;
                }
            }
            ptype::AUTH3 => {}
            _ => return Err(DecodeError::Invalid),
        }
        Ok(())
    }

    /// BIND → BIND_ACK, ALTER_CONTEXT → ALTER_CONTEXT_RESP (C706 12.6.4.3,
    /// 12.6.4.4; MS-RPCE 3.3.1.5.3 for bind time feature negotiation).
    fn bind(&mut self, h: &Header, body: &[u8], sec_addr: &str, reply: u8) -> Result<Vec<u8>, DecodeError> {
        let mut r = Reader::new(body);
        let _max_xmit = r.u16()?;
        let max_recv = r.u16()?;
        let assoc_group = r.u32()?;
        let n = r.u8()? as usize;
        r.skip(3)?;
        if n > MAX_CONTEXTS {
            return Err(DecodeError::TooLong);
        }
        let mut results = Vec::with_capacity(n);
        for _ in 0..n {
            let ctx_id = r.u16()?;
            let n_transfer = r.u8()? as usize;
            r.skip(1)?;
            let abstract_syntax = r.array::<20>()?;
            let mut transfers = Vec::with_capacity(n_transfer);
            for _ in 0..n_transfer {
                transfers.push(r.array::<20>()?);
            }
            let res = negotiate(&abstract_syntax, &transfers);
            if res.0 == result::ACCEPTANCE && !self.contexts.contains(&ctx_id) && self.contexts.len() < MAX_CONTEXTS {
                self.contexts.push(ctx_id);
            }
            results.push(res);
        }
        if reply == ptype::BIND_ACK {
            self.max_xmit = max_recv.clamp(MIN_FRAG, MAX_FRAG);
            if assoc_group != 0 {
                self.assoc_group = assoc_group;
            }
        }
        let mut out = Vec::with_capacity(128);
        Header { ptype: reply, flags: pfc::FIRST_FRAG | pfc::LAST_FRAG, frag_len: 0, auth_len: 0, call_id: h.call_id }
            .encode(&mut out);
        out.extend_from_slice(&self.max_xmit.to_le_bytes());
        out.extend_from_slice(&MAX_FRAG.to_le_bytes());
        out.extend_from_slice(&self.assoc_group.to_le_bytes());
        if sec_addr.is_empty() {
            out.extend_from_slice(&0u16.to_le_bytes());
        } else {
            out.extend_from_slice(&(sec_addr.len() as u16 + 1).to_le_bytes());
            out.extend_from_slice(sec_addr.as_bytes());
            out.push(0);
        }
        out.resize(out.len().div_ceil(4) * 4, 0);
        out.extend_from_slice(&[results.len() as u8, 0, 0, 0]);
        for (result, reason, syntax) in results {
            out.extend_from_slice(&result.to_le_bytes());
            out.extend_from_slice(&reason.to_le_bytes());
            out.extend_from_slice(&syntax);
        }
        set_frag_len(&mut out);
        Ok(out)
    }

    /// REQUEST fragments (C706 12.6.4.9): reassemble, run, answer.
    fn request(&mut self, h: &Header, body: &[u8], iface: &Srvsvc, out: &mut VecDeque<Vec<u8>>) {
        match self.reassemble(h, body) {
            Ok(None) => {}
            Ok(Some(p)) => self.execute(h.call_id, p, iface, out),
            Err((status, ctx_id)) => {
                self.partial = None;
                out.push_back(fault_pdu(h.call_id, ctx_id, status, false));
            }
        }
    }

    fn reassemble(&mut self, h: &Header, body: &[u8]) -> Result<Option<Partial>, (u32, u16)> {
        let mut r = Reader::new(body);
        let bad = (fault::NCA_PROTO_ERROR, 0);
        let _alloc_hint = r.u32().map_err(|_| bad)?;
        let ctx_id = r.u16().map_err(|_| bad)?;
        let opnum = r.u16().map_err(|_| bad)?;
        if h.flags & pfc::OBJECT_UUID != 0 {
            r.skip(16).map_err(|_| bad)?;
        }
        if h.auth_len != 0 {
            return Err((fault::ACCESS_DENIED, ctx_id));
        }
        let stub = r.rest();
        let mut p = if h.flags & pfc::FIRST_FRAG != 0 {
            if self.partial.is_some() {
                return Err((fault::NCA_PROTO_ERROR, ctx_id));
            }
            Partial { call_id: h.call_id, ctx_id, opnum, stub: Vec::new() }
        } else {
            match self.partial.take() {
                Some(p) if p.call_id == h.call_id && p.ctx_id == ctx_id && p.opnum == opnum => p,
                _ => return Err((fault::NCA_PROTO_ERROR, ctx_id)),
            }
        };
        if p.stub.len() + stub.len() > MAX_REQUEST {
            return Err((fault::NCA_PROTO_ERROR, ctx_id));
        }
        p.stub.extend_from_slice(stub);
        if h.flags & pfc::LAST_FRAG != 0 {
            Ok(Some(p))
        } else {
            self.partial = Some(p);
            Ok(None)
        }
    }

    fn execute(&mut self, call_id: u32, p: Partial, iface: &Srvsvc, out: &mut VecDeque<Vec<u8>>) {
        if !self.contexts.contains(&p.ctx_id) {
            out.push_back(fault_pdu(call_id, p.ctx_id, fault::NCA_UNK_IF, true));
            return;
        }
        match iface.call(p.opnum, &p.stub) {
            None => out.push_back(fault_pdu(call_id, p.ctx_id, fault::NCA_OP_RNG_ERROR, true)),
            Some(Err(_)) => out.push_back(fault_pdu(call_id, p.ctx_id, fault::RPC_X_BAD_STUB_DATA, true)),
            Some(Ok(stub)) => self.respond(call_id, p.ctx_id, &stub, out),
        }
    }

    /// RESPONSE fragments (C706 12.6.4.10) no longer than the agreed
    /// max_xmit_frag, stub split at 8-byte boundaries.
    fn respond(&self, call_id: u32, ctx_id: u16, stub: &[u8], out: &mut VecDeque<Vec<u8>>) {
        let chunk = (self.max_xmit as usize - HEADER_LEN - 8) & !7;
        let mut rest = stub;
        let mut flags = pfc::FIRST_FRAG;
        loop {
            let (this, next) = rest.split_at(chunk.min(rest.len()));
            if next.is_empty() {
                flags |= pfc::LAST_FRAG;
            }
            let mut pdu = Vec::with_capacity(HEADER_LEN + 8 + this.len());
            Header { ptype: ptype::RESPONSE, flags, frag_len: 0, auth_len: 0, call_id }.encode(&mut pdu);
            pdu.extend_from_slice(&(rest.len() as u32).to_le_bytes());
            pdu.extend_from_slice(&ctx_id.to_le_bytes());
            pdu.extend_from_slice(&[0, 0]);
            pdu.extend_from_slice(this);
            set_frag_len(&mut pdu);
            out.push_back(pdu);
            if next.is_empty() {
                break;
            }
            rest = next;
            flags = 0;
        }
    }
}

/// The result for one presentation context: accept srvsvc over NDR,
/// acknowledge bind time feature negotiation with no features, reject
/// anything else (NDR64 included) as the provider.
fn negotiate(abstract_syntax: &[u8; 20], transfers: &[[u8; 20]]) -> (u16, u16, [u8; 20]) {
    if transfers.iter().any(|t| t.starts_with(&BTFN_PREFIX)) {
        return (result::NEGOTIATE_ACK, 0, [0; 20]);
    }
    if *abstract_syntax != srvsvc::SYNTAX {
        return (result::PROVIDER_REJECTION, provider_reason::ABSTRACT_SYNTAX_NOT_SUPPORTED, [0; 20]);
    }
    if transfers.contains(&NDR) {
        return (result::ACCEPTANCE, 0, NDR);
    }
    (result::PROVIDER_REJECTION, provider_reason::TRANSFER_SYNTAXES_NOT_SUPPORTED, [0; 20])
}

/// FAULT PDU (C706 12.6.4.7, MS-RPCE 2.2.2.13).
pub fn fault_pdu(call_id: u32, ctx_id: u16, status: u32, did_not_execute: bool) -> Vec<u8> {
    let mut flags = pfc::FIRST_FRAG | pfc::LAST_FRAG;
    if did_not_execute {
        flags |= pfc::DID_NOT_EXECUTE;
    }
    let mut out = Vec::with_capacity(32);
    Header { ptype: ptype::FAULT, flags, frag_len: 32, auth_len: 0, call_id }.encode(&mut out);
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&ctx_id.to_le_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&status.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out
}
