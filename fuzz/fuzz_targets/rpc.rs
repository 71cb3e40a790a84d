//! The srvsvc named pipe (DCE/RPC connection-oriented PDUs, NDR stubs of
//! MS-SRVS) on arbitrary bytes: a sequence of operations on one pipe,
//! each `[op] [len u16 LE] [len bytes]`; op 0 writes, 1 reads up to len
//! bytes, 2 transceives (FSCTL_PIPE_TRANSCEIVE with MaxOutputResponse
//! len). Errors are fine; no panic; queued output stays bounded.
#![no_main]
use libfuzzer_sys::fuzz_target;
use smbq_auth::UserDb;
use smbq_server::rpc::Pipe;
use smbq_server::{Server, ServerConfig, ShareConfig};
use std::sync::{Arc, OnceLock};

fn server() -> &'static Server {
    static S: OnceLock<(Arc<Server>, tempfile::TempDir)> = OnceLock::new();
    &S.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut c = ServerConfig::default();
        c.shares.push(ShareConfig::new("share", dir.path()));
        (Arc::new(Server::new(c, UserDb::new()).expect("server")), dir)
    })
    .0
}

fuzz_target!(|data: &[u8]| {
    let s = server();
    let mut pipe = Pipe::open("srvsvc", &s.config.server_name, &s.shares(), "alice", 1).expect("srvsvc opens");
    let mut rest = data;
    while let [op, a, b, tail @ ..] = rest {
        let len = usize::from(u16::from_le_bytes([*a, *b])).min(tail.len());
        let (arg, next) = tail.split_at(len);
        rest = next;
        match op % 3 {
            0 => {
                let _ = pipe.write(arg);
            }
            1 => {
                let max = usize::from(u16::from_le_bytes([*a, *b]));
                if let Ok((out, _)) = pipe.read(max) {
                    assert!(out.len() <= max);
                }
                // A read consumes no input.
                rest = tail;
            }
            _ => {
                let max = arg.first().map_or(4280, |&m| usize::from(m) << 5);
                if let Ok((out, _)) = pipe.transceive(arg, max) {
                    assert!(out.len() <= max);
                }
            }
        }
    }
});
