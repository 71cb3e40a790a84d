//! Named pipes on IPC$ carrying DCE/RPC — to be implemented.

use crate::server::Server;
use smbq_wire::NtStatus;

/// State of one open named pipe.
pub struct Pipe {
    pub name: String,
}

impl Pipe {
    /// Open pipe `name` ("srvsvc", case-insensitive, with or without a
    /// leading `\`); unknown names are OBJECT_NAME_NOT_FOUND.
    pub fn open(name: &str, _server: &Server) -> Result<Pipe, NtStatus> {
        Err(NtStatus::OBJECT_NAME_NOT_FOUND).map(|()| Pipe { name: name.into() })
    }

    /// WRITE on the pipe: feed DCE/RPC bytes.
    pub fn write(&mut self, _data: &[u8]) -> Result<(), NtStatus> {
        Err(NtStatus::NOT_SUPPORTED)
    }

    /// READ on the pipe: up to `max` bytes of pending output, and whether
    /// more remains (then the caller answers STATUS_BUFFER_OVERFLOW).
    pub fn read(&mut self, _max: usize) -> Result<(Vec<u8>, bool), NtStatus> {
        Err(NtStatus::NOT_SUPPORTED)
    }

    /// FSCTL_PIPE_TRANSCEIVE: write `input`, then read up to `max_out`.
    pub fn transceive(&mut self, input: &[u8], max_out: usize) -> Result<(Vec<u8>, bool), NtStatus> {
        self.write(input)?;
        self.read(max_out)
    }
}
