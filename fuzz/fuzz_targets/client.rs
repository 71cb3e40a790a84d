//! What the client decodes from a server, on arbitrary bytes: a response
//! frame handed to the client's core as the answer to a NEGOTIATE and then
//! as the answer to an ECHO (header, credits, requests in flight, compound
//! chain), a QUERY_DIRECTORY buffer, a srvsvc answer (fragments
//! reassembled, NetrShareEnum stub), and the same bytes as an smb:// URL.
//! Errors are fine; no panic, no allocation past the input's size.
#![no_main]
use libfuzzer_sys::fuzz_target;
use smbq_client::core::Core;
use smbq_client::{share, srvsvc, url};
use smbq_wire::Command;

fuzz_target!(|data: &[u8]| {
    let mut core = Core::new();
    let body = core.negotiate_body(true);
    let (_, m) = core.request(Command::NEGOTIATE, 1, &body);
    core.hash(&m);
    let _ = core.on_response(data, false).map(|_| core.on_negotiate(data));
    let (_, _) = core.request(Command::ECHO, 1, &[4, 0, 0, 0]);
    let _ = core.on_response(data, false);

    let mut entries = Vec::new();
    let _ = share::decode_id_both_entries(data, &mut entries);

    let mut re = srvsvc::Reassembler::new(2);
    if let Ok(Some(stub)) = re.push(data) {
        let _ = srvsvc::decode_share_enum(&stub);
    }
    let _ = srvsvc::decode_share_enum(data);
    let _ = srvsvc::check_bind_ack(data);

    if let Ok(s) = std::str::from_utf8(data) {
        let _ = url::SmbUrl::parse(s);
    }
});
