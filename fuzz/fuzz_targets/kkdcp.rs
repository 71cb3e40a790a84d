//! MS-KKDCP KDC proxy messages on arbitrary bytes: errors, never panics.
//! A request that decodes re-encodes (in DER) to bytes that decode to the
//! same message; a decoded message re-encodes likewise; a KDC reply is
//! checked and wrapped as the proxy would.
#![no_main]
use libfuzzer_sys::fuzz_target;
use smbq_auth::kkdcp;

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = kkdcp::decode_request(data) {
        let _ = req.is_for("EXAMPLE.TEST");
        let again = kkdcp::encode_message(&req.message);
        let back = kkdcp::decode_request(&again).expect("a re-encoded request decodes");
        assert_eq!(back, req);
        assert_eq!(&req.framed()[4..], req.message.kerb_message);
    }
    if let Ok(msg) = kkdcp::decode_message(data, kkdcp::MAX_REPLY) {
        let again = kkdcp::encode_message(&msg);
        assert_eq!(kkdcp::decode_message(&again, usize::MAX), Ok(msg));
    }
    if let Some((prefix, reply)) = data.split_first_chunk::<4>() {
        if kkdcp::reply_len(*prefix) == Ok(reply.len()) && kkdcp::check_reply(reply).is_ok() {
            let wrapped = kkdcp::encode_reply(reply);
            let msg = kkdcp::decode_message(&wrapped, usize::MAX).expect("a wrapped reply decodes");
            assert_eq!(msg.kerb_message, reply);
        }
    }
});
