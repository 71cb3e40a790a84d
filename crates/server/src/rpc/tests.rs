//! DCE/RPC and srvsvc tests: hand-built PDUs in, answers decoded back.
#![allow(clippy::unwrap_used)]

use smbq_wire::dcerpc::{fault, pfc, ptype, Header, NDR};
use smbq_wire::ndr::{Reader, Writer};
use super::srvsvc::{self, ShareInfo};
use super::Pipe;
use smbq_wire::NtStatus;

const NDR64: [u8; 20] = [
    0x33, 0x05, 0x71, 0x71, 0xba, 0xbe, 0x37, 0x49, 0x83, 0x19, 0xb5, 0xdb, 0xef, 0x9c, 0xcc, 0x36, 1, 0, 0, 0,
];
const BTFN: [u8; 20] = [
    0x2c, 0x1c, 0xb7, 0x6c, 0x12, 0x98, 0x40, 0x45, 0x03, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
];

fn shares() -> Vec<ShareInfo> {
    vec![
        ShareInfo { name: "data".into(), kind: srvsvc::STYPE_DISKTREE, remark: String::new() },
        ShareInfo { name: "IPC$".into(), kind: srvsvc::STYPE_IPC_SPECIAL, remark: "IPC Service".into() },
    ]
}

fn pipe_with(shares: Vec<ShareInfo>) -> Pipe {
    Pipe::with_shares("srvsvc", "SMBQ", shares, 1).unwrap()
}

fn pdu(ptype: u8, flags: u8, call_id: u32, body: &[u8]) -> Vec<u8> {
    let mut v = vec![5, 0, ptype, flags, 0x10, 0, 0, 0];
    v.extend_from_slice(&((16 + body.len()) as u16).to_le_bytes());
    v.extend_from_slice(&[0, 0]);
    v.extend_from_slice(&call_id.to_le_bytes());
    v.extend_from_slice(body);
    v
}

/// BIND body with one context per (context id, abstract, transfers).
/// (context id, abstract syntax, transfer syntaxes).
type Context<'a> = (u16, [u8; 20], &'a [[u8; 20]]);

fn bind_body(max_recv: u16, assoc_group: u32, contexts: &[Context<'_>]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&4280u16.to_le_bytes());
    b.extend_from_slice(&max_recv.to_le_bytes());
    b.extend_from_slice(&assoc_group.to_le_bytes());
    b.extend_from_slice(&[contexts.len() as u8, 0, 0, 0]);
    for (id, abs, transfers) in contexts {
        b.extend_from_slice(&id.to_le_bytes());
        b.extend_from_slice(&[transfers.len() as u8, 0]);
        b.extend_from_slice(abs);
        for t in *transfers {
            b.extend_from_slice(t);
        }
    }
    b
}

fn request(call_id: u32, ctx_id: u16, opnum: u16, stub: &[u8], flags: u8) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&(stub.len() as u32).to_le_bytes());
    b.extend_from_slice(&ctx_id.to_le_bytes());
    b.extend_from_slice(&opnum.to_le_bytes());
    b.extend_from_slice(stub);
    pdu(ptype::REQUEST, flags, call_id, &b)
}

fn bind(p: &mut Pipe, max_recv: u16) {
    let b = bind_body(max_recv, 0, &[(0, srvsvc::SYNTAX, &[NDR])]);
    let (ack, more) = p.transceive(&pdu(ptype::BIND, 3, 1, &b), 4280).unwrap();
    assert!(!more);
    assert_eq!(ack[2], ptype::BIND_ACK);
}

/// Read every response fragment of one call; returns the stub and the
/// fragment lengths.
fn read_response(p: &mut Pipe, first: (Vec<u8>, bool)) -> (Vec<u8>, Vec<usize>) {
    let mut stub = Vec::new();
    let mut lens = Vec::new();
    let mut msg = first;
    loop {
        let (mut frag, mut more) = msg;
        // A short READ leaves the rest of the message for the next one.
        while more {
            let (rest, m) = p.read(10).unwrap();
            frag.extend_from_slice(&rest);
            more = m;
        }
        let h = Header::decode(&frag).unwrap();
        assert_eq!(h.ptype, ptype::RESPONSE, "{frag:02x?}");
        assert_eq!(h.frag_len as usize, frag.len());
        assert_eq!(h.flags & pfc::FIRST_FRAG != 0, lens.is_empty());
        lens.push(frag.len());
        stub.extend_from_slice(&frag[24..]);
        if h.flags & pfc::LAST_FRAG != 0 {
            break;
        }
        msg = p.read(4280).unwrap();
    }
    (stub, lens)
}

fn share_enum_stub(level: u32, resume: Option<u32>) -> Vec<u8> {
    let mut w = Writer::new();
    w.pointer();
    w.string("\\\\127.0.0.1");
    w.u32(level);
    w.u32(level);
    w.pointer();
    w.u32(0);
    w.null();
    w.u32(u32::MAX);
    match resume {
        Some(v) => {
            w.pointer();
            w.u32(v);
        }
        None => w.null(),
    }
    w.buf
}

/// Decode a NetrShareEnum level 0/1 answer: entries, total, status.
fn decode_share_enum(stub: &[u8]) -> (u32, Vec<ShareInfo>, u32, u32) {
    let mut r = Reader::new(stub);
    let level = r.u32().unwrap();
    assert_eq!(r.u32().unwrap(), level);
    let mut shares = Vec::new();
    if r.pointer().unwrap() {
        let n = r.u32().unwrap();
        if r.pointer().unwrap() {
            assert_eq!(r.u32().unwrap(), n);
            let mut kinds = Vec::new();
            for _ in 0..n {
                assert!(r.pointer().unwrap());
                if level == 1 {
                    kinds.push(r.u32().unwrap());
                    assert!(r.pointer().unwrap());
                } else {
                    kinds.push(0);
                }
            }
            for kind in kinds {
                let name = r.string().unwrap();
                let remark = if level == 1 { r.string().unwrap() } else { String::new() };
                shares.push(ShareInfo { name, kind, remark });
            }
        }
    }
    let total = r.u32().unwrap();
    if r.pointer().unwrap() {
        assert_eq!(r.u32().unwrap(), 0);
    }
    let status = r.u32().unwrap();
    assert!(r.is_empty());
    (level, shares, total, status)
}

fn fault_status(frag: &[u8]) -> u32 {
    let h = Header::decode(frag).unwrap();
    assert_eq!(h.ptype, ptype::FAULT);
    assert_eq!(frag.len(), 32);
    u32::from_le_bytes(frag[24..28].try_into().unwrap())
}

#[test]
fn pipe_names() {
    assert!(Pipe::with_shares("srvsvc", "SMBQ", shares(), 1).is_ok());
    assert!(Pipe::with_shares("\\SRVSVC", "SMBQ", shares(), 1).is_ok());
    assert_eq!(Pipe::with_shares("lsarpc", "SMBQ", shares(), 1).err(), Some(NtStatus::OBJECT_NAME_NOT_FOUND));
    assert_eq!(Pipe::with_shares("srvsvc\\x", "SMBQ", shares(), 1).err(), Some(NtStatus::OBJECT_NAME_NOT_FOUND));
}

/// The bind smbclient and impacket send, and the exact BIND_ACK.
#[test]
fn bind_ack_bytes() {
    let mut p = pipe_with(shares());
    let b = bind_body(4280, 0x0000_53f0, &[(0, srvsvc::SYNTAX, &[NDR])]);
    let req = pdu(ptype::BIND, 3, 1, &b);
    assert_eq!(req.len(), 72);
    let (ack, more) = p.transceive(&req, 4280).unwrap();
    assert!(!more);
    let mut want = vec![5, 0, 12, 3, 0x10, 0, 0, 0, 68, 0, 0, 0, 1, 0, 0, 0];
    want.extend_from_slice(&[0xb8, 0x10, 0xb8, 0x10, 0xf0, 0x53, 0, 0]);
    want.extend_from_slice(&[13, 0]);
    want.extend_from_slice(b"\\PIPE\\srvsvc\0");
    want.push(0); // pad to 4
    want.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
    want.extend_from_slice(&NDR);
    assert_eq!(ack, want);
}

/// What Windows clients offer: NDR, NDR64, bind time feature negotiation;
/// plus an unknown interface.
#[test]
fn bind_results() {
    let mut p = pipe_with(shares());
    let other = [7u8; 20];
    let b = bind_body(
        4280,
        0,
        &[(0, srvsvc::SYNTAX, &[NDR]), (1, srvsvc::SYNTAX, &[NDR64]), (2, srvsvc::SYNTAX, &[BTFN]), (3, other, &[NDR])],
    );
    let (ack, _) = p.transceive(&pdu(ptype::BIND, 3, 5, &b), 4280).unwrap();
    let group = u32::from_le_bytes(ack[20..24].try_into().unwrap());
    assert_ne!(group, 0);
    let results = &ack[40..];
    assert_eq!(results[0], 4);
    let res = |i: usize| {
        let e = &results[4 + i * 24..4 + (i + 1) * 24];
        (u16::from_le_bytes([e[0], e[1]]), u16::from_le_bytes([e[2], e[3]]), e[4..24].to_vec())
    };
    assert_eq!(res(0), (0, 0, NDR.to_vec()));
    assert_eq!(res(1), (2, 2, vec![0; 20]));
    assert_eq!(res(2), (3, 0, vec![0; 20]));
    assert_eq!(res(3), (2, 1, vec![0; 20]));
    // Only context 0 can carry calls.
    let (f, _) = p.transceive(&request(2, 1, 15, &share_enum_stub(1, None), 3), 4280).unwrap();
    assert_eq!(fault_status(&f), fault::NCA_UNK_IF);
    let (r, _) = p.transceive(&request(3, 0, 15, &share_enum_stub(1, None), 3), 4280).unwrap();
    assert_eq!(Header::decode(&r).unwrap().ptype, ptype::RESPONSE);
}

#[test]
fn share_enum_level_1() {
    let mut p = pipe_with(shares());
    bind(&mut p, 4280);
    let first = p.transceive(&request(2, 0, 15, &share_enum_stub(1, Some(0)), 3), 4280).unwrap();
    let (stub, lens) = read_response(&mut p, first);
    assert_eq!(lens.len(), 1);
    let (level, got, total, status) = decode_share_enum(&stub);
    assert_eq!((level, total, status), (1, 2, srvsvc::WERR_OK));
    assert_eq!(got, shares());
    // Nothing else is pending.
    assert_eq!(p.read(100).unwrap(), (Vec::new(), false));
}

/// NetrShareEnumSticky leaves IPC$ out; a resume handle skips entries.
#[test]
fn share_enum_sticky_and_resume() {
    let mut p = pipe_with(shares());
    bind(&mut p, 4280);
    let first = p.transceive(&request(2, 0, 36, &share_enum_stub(1, None), 3), 4280).unwrap();
    let (stub, _) = read_response(&mut p, first);
    let (_, got, total, status) = decode_share_enum(&stub);
    assert_eq!((total, status), (1, 0));
    assert_eq!(got, shares()[..1]);
    let first = p.transceive(&request(3, 0, 15, &share_enum_stub(1, Some(1)), 3), 4280).unwrap();
    let (stub, _) = read_response(&mut p, first);
    let (_, got, total, _) = decode_share_enum(&stub);
    assert_eq!(total, 2);
    assert_eq!(got, shares()[1..]);
    let first = p.transceive(&request(4, 0, 15, &share_enum_stub(1, Some(9)), 3), 4280).unwrap();
    let (stub, _) = read_response(&mut p, first);
    assert!(decode_share_enum(&stub).1.is_empty());
}

#[test]
fn share_enum_level_0_and_bad_level() {
    let mut p = pipe_with(shares());
    bind(&mut p, 4280);
    let first = p.transceive(&request(2, 0, 15, &share_enum_stub(0, None), 3), 4280).unwrap();
    let (stub, _) = read_response(&mut p, first);
    let (level, got, total, status) = decode_share_enum(&stub);
    assert_eq!((level, total, status), (0, 2, 0));
    let names: Vec<_> = got.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["data", "IPC$"]);

    let first = p.transceive(&request(3, 0, 15, &share_enum_stub(2, None), 3), 4280).unwrap();
    let (stub, _) = read_response(&mut p, first);
    let (_, got, _, status) = decode_share_enum(&stub);
    assert!(got.is_empty());
    assert_eq!(status, srvsvc::WERR_INVALID_LEVEL);
}

fn get_info(p: &mut Pipe, name: &str, level: u32) -> Vec<u8> {
    let mut w = Writer::new();
    w.null();
    w.string(name);
    w.u32(level);
    let first = p.transceive(&request(9, 0, 16, &w.buf, 3), 4280).unwrap();
    read_response(p, first).0
}

#[test]
fn share_get_info() {
    let mut p = pipe_with(shares());
    bind(&mut p, 4280);
    let stub = get_info(&mut p, "ipc$", 1);
    let mut r = Reader::new(&stub);
    assert_eq!(r.u32().unwrap(), 1);
    assert!(r.pointer().unwrap());
    assert!(r.pointer().unwrap());
    assert_eq!(r.u32().unwrap(), srvsvc::STYPE_IPC_SPECIAL);
    assert!(r.pointer().unwrap());
    assert_eq!(r.string().unwrap(), "IPC$");
    assert_eq!(r.string().unwrap(), "IPC Service");
    assert_eq!(r.u32().unwrap(), 0);
    assert!(r.is_empty());

    let stub = get_info(&mut p, "nope", 1);
    let mut r = Reader::new(&stub);
    assert_eq!(r.u32().unwrap(), 1);
    assert!(!r.pointer().unwrap());
    assert_eq!(r.u32().unwrap(), srvsvc::WERR_NET_NAME_NOT_FOUND);
}

#[test]
fn server_get_info_101() {
    let mut p = pipe_with(shares());
    bind(&mut p, 4280);
    let mut w = Writer::new();
    w.pointer();
    w.string("\\\\host");
    w.u32(101);
    let first = p.transceive(&request(4, 0, 21, &w.buf, 3), 4280).unwrap();
    let (stub, _) = read_response(&mut p, first);
    let mut r = Reader::new(&stub);
    assert_eq!(r.u32().unwrap(), 101);
    assert!(r.pointer().unwrap());
    assert_eq!(r.u32().unwrap(), 500);
    assert!(r.pointer().unwrap());
    assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (10, 0));
    assert_eq!(r.u32().unwrap() & 0x3, 0x3);
    assert!(r.pointer().unwrap());
    assert_eq!(r.string().unwrap(), "SMBQ");
    assert_eq!(r.string().unwrap(), "");
    assert_eq!(r.u32().unwrap(), 0);
    assert!(r.is_empty());
}

/// 200 shares do not fit one 1432-byte fragment: the answer is split,
/// each fragment within the agreed size, and reassembles.
#[test]
fn response_fragmentation() {
    let many: Vec<ShareInfo> = (0..200)
        .map(|i| ShareInfo { name: format!("share-number-{i:03}"), kind: 0, remark: String::new() })
        .collect();
    let mut p = pipe_with(many.clone());
    bind(&mut p, 1000); // below the minimum: 1432 is used
    let first = p.transceive(&request(2, 0, 15, &share_enum_stub(1, None), 3), 1432).unwrap();
    let (stub, lens) = read_response(&mut p, first);
    assert!(lens.len() > 5, "{lens:?}");
    assert!(lens.iter().all(|&l| l <= 1432));
    let (_, got, total, status) = decode_share_enum(&stub);
    assert_eq!((total, status), (200, 0));
    assert_eq!(got, many);
}

/// A request in two fragments, the second written in two pieces.
#[test]
fn request_reassembly() {
    let mut p = pipe_with(shares());
    bind(&mut p, 4280);
    let stub = share_enum_stub(1, None);
    let (a, b) = stub.split_at(16);
    p.write(&request(7, 0, 15, a, pfc::FIRST_FRAG)).unwrap();
    assert_eq!(p.read(4280).unwrap(), (Vec::new(), false));
    let second = request(7, 0, 15, b, pfc::LAST_FRAG);
    p.write(&second[..10]).unwrap();
    p.write(&second[10..]).unwrap();
    let first = p.read(4280).unwrap();
    let (stub, _) = read_response(&mut p, first);
    assert_eq!(decode_share_enum(&stub).1, shares());

    // A middle fragment of another call is a protocol error.
    let (f, _) = p.transceive(&request(8, 0, 15, b, pfc::LAST_FRAG), 4280).unwrap();
    assert_eq!(fault_status(&f), fault::NCA_PROTO_ERROR);
}

#[test]
fn faults() {
    let mut p = pipe_with(shares());
    // Before any bind, no context exists.
    let (f, _) = p.transceive(&request(1, 0, 15, &share_enum_stub(1, None), 3), 4280).unwrap();
    assert_eq!(fault_status(&f), fault::NCA_UNK_IF);
    bind(&mut p, 4280);
    let (f, _) = p.transceive(&request(2, 0, 99, &[], 3), 4280).unwrap();
    assert_eq!(fault_status(&f), fault::NCA_OP_RNG_ERROR);
    assert_eq!(f[3], pfc::FIRST_FRAG | pfc::LAST_FRAG | pfc::DID_NOT_EXECUTE);
    assert_eq!(&f[12..16], &2u32.to_le_bytes());
    // Truncated stub data.
    let (f, _) = p.transceive(&request(3, 0, 15, &[0, 0, 2, 0, 5], 3), 4280).unwrap();
    assert_eq!(fault_status(&f), fault::RPC_X_BAD_STUB_DATA);
    // RPC-level authentication is not offered.
    let mut auth = request(4, 0, 15, &share_enum_stub(1, None), 3);
    auth[10] = 8;
    let (f, _) = p.transceive(&auth, 4280).unwrap();
    assert_eq!(fault_status(&f), fault::ACCESS_DENIED);
}

#[test]
fn garbage_is_an_error() {
    let mut p = pipe_with(shares());
    assert_eq!(p.write(b"GET / HTTP/1.1\r\n\r\n").err(), Some(NtStatus::INVALID_PARAMETER));
    // frag_len shorter than a header.
    assert_eq!(p.write(&[5, 0, 0, 3, 0x10, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0]).err(), Some(NtStatus::INVALID_PARAMETER));
    // Big-endian data representation is not served.
    let mut be = pdu(ptype::BIND, 3, 1, &bind_body(4280, 0, &[(0, srvsvc::SYNTAX, &[NDR])]));
    be[4] = 0x00;
    assert_eq!(p.write(&be).err(), Some(NtStatus::INVALID_PARAMETER));
    // A truncated BIND body, an unknown PDU type.
    assert_eq!(p.write(&pdu(ptype::BIND, 3, 1, &[0xb8, 0x10])).err(), Some(NtStatus::INVALID_PARAMETER));
    assert_eq!(p.write(&pdu(42, 3, 1, &[])).err(), Some(NtStatus::INVALID_PARAMETER));
    // The pipe still works afterwards.
    bind(&mut p, 4280);

    // Random bodies behind valid headers never panic.
    for i in 0..2000u32 {
        let len = (rand::random::<u8>() % 96) as usize;
        let body: Vec<u8> = (0..len).map(|_| rand::random()).collect();
        let kind = [ptype::BIND, ptype::ALTER_CONTEXT, ptype::REQUEST][i as usize % 3];
        let _ = p.write(&pdu(kind, rand::random(), i, &body));
        while !p.read(4280).unwrap().0.is_empty() {}
    }
}

#[test]
fn unread_output_is_bounded() {
    let mut p = pipe_with(shares());
    bind(&mut p, 4280);
    let req = request(2, 0, 15, &share_enum_stub(1, None), 3);
    let mut refused = false;
    for _ in 0..20_000 {
        if p.write(&req).is_err() {
            refused = true;
            break;
        }
    }
    assert!(refused);
}
