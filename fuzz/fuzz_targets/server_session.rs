//! The server engine after logon: one connection with a session (real
//! NTLM logon), a tree on a temporary share and on IPC$, and open
//! handles on a file, a directory and the srvsvc pipe; the input is a
//! list of SMB2 requests (see engine/mod.rs for the record format) with
//! valid ids patched in. A fatal connection error is fine; a panic is a bug.
#![no_main]
use libfuzzer_sys::fuzz_target;

mod engine;

fuzz_target!(|data: &[u8]| {
    engine::fuzz(data, &[]);
});
