//! The engine's asynchronous paths (CHANGE_NOTIFY, blocking LOCK, CANCEL,
//! CLOSE of a watched handle, and compounds of them), after the same
//! prologue as `server_session`: records as in engine/mod.rs, the
//! command chosen among those only.
#![no_main]
use libfuzzer_sys::fuzz_target;
use smbq_wire::Command;

mod engine;

const COMMANDS: [Command; 6] =
    [Command::CHANGE_NOTIFY, Command::CANCEL, Command::LOCK, Command::CLOSE, Command::CREATE, Command::ECHO];

fuzz_target!(|data: &[u8]| {
    engine::fuzz(data, &COMMANDS);
});
