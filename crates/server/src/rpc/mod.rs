//! Named pipes on IPC$ carrying DCE/RPC (MS-SMB2 3.3.5.9 for the CREATE,
//! MS-RPCE 2.1.1.2 for RPC over SMB named pipes). The one pipe served is
//! `srvsvc` (MS-SRVS), enough for share listing (`smbclient -L`,
//! `NetShareEnum`).
//!
//! The pipe is in message mode: each DCE/RPC fragment written is consumed
//! whole (a fragment may arrive in several WRITEs), and each fragment of
//! the answer is one message a READ returns, with `more` set when the
//! READ was too short for it (the caller answers STATUS_BUFFER_OVERFLOW
//! and the rest stays for the next READ).

mod dcerpc;
mod srvsvc;
#[cfg(test)]
mod tests;

use crate::share::{Share, ShareKind};
use smbq_wire::dcerpc::{Header, HEADER_LEN};
use smbq_wire::NtStatus;
use srvsvc::{ShareInfo, Srvsvc};
use std::collections::VecDeque;
use std::sync::Arc;

/// Answers queued but not read past this many bytes fail further writes.
const MAX_OUTPUT: usize = 1024 * 1024;

/// State of one open named pipe.
pub struct Pipe {
    pub name: String,
    input: Vec<u8>,
    output: VecDeque<Vec<u8>>,
    assoc: dcerpc::Association,
    iface: Srvsvc,
}

impl Pipe {
    /// Open pipe `name` ("srvsvc", case-insensitive, with or without a
    /// leading `\`); unknown names are OBJECT_NAME_NOT_FOUND. Its share
    /// list is `shares` but those `user` may not connect to; `assoc` its
    /// association group.
    pub fn open(name: &str, server_name: &str, shares: &[Arc<Share>], user: &str, assoc: u32) -> Result<Pipe, NtStatus> {
        let shares = shares
            .iter()
            .filter(|s| s.for_user(user).is_some())
            .map(|s| match s.kind {
                ShareKind::Disk(_) => ShareInfo { name: s.name.clone(), kind: srvsvc::STYPE_DISKTREE, remark: String::new() },
                ShareKind::Ipc => {
                    ShareInfo { name: s.name.clone(), kind: srvsvc::STYPE_IPC_SPECIAL, remark: "IPC Service".into() }
                }
            })
            .collect();
        Pipe::with_shares(name, server_name, shares, assoc)
    }

    fn with_shares(name: &str, server_name: &str, shares: Vec<ShareInfo>, assoc: u32) -> Result<Pipe, NtStatus> {
        let bare = name.strip_prefix('\\').unwrap_or(name);
        if !bare.eq_ignore_ascii_case("srvsvc") {
            return Err(NtStatus::OBJECT_NAME_NOT_FOUND);
        }
        Ok(Pipe {
            name: "srvsvc".into(),
            input: Vec::new(),
            output: VecDeque::new(),
            assoc: dcerpc::Association::new(assoc),
            iface: Srvsvc { server_name: server_name.into(), shares },
        })
    }

    /// WRITE on the pipe: feed DCE/RPC bytes. Bytes that are not DCE/RPC
    /// are dropped with INVALID_PARAMETER (the association stays); too much
    /// unread output is INSUFFICIENT_RESOURCES.
    pub fn write(&mut self, data: &[u8]) -> Result<(), NtStatus> {
        if self.output.iter().map(Vec::len).sum::<usize>() > MAX_OUTPUT {
            return Err(NtStatus::INSUFFICIENT_RESOURCES);
        }
        self.input.extend_from_slice(data);
        loop {
            if self.input.len() < HEADER_LEN {
                return Ok(());
            }
            let len = match Header::decode(&self.input) {
                Ok(h) => h.frag_len as usize,
                Err(_) => {
                    self.input.clear();
                    return Err(NtStatus::INVALID_PARAMETER);
                }
            };
            if self.input.len() < len {
                return Ok(());
            }
            let rest = self.input.split_off(len);
            let pdu = std::mem::replace(&mut self.input, rest);
            let sec_addr = format!("\\PIPE\\{}", self.name);
            if self.assoc.pdu(&pdu, &sec_addr, &self.iface, &mut self.output).is_err() {
                self.input.clear();
                return Err(NtStatus::INVALID_PARAMETER);
            }
        }
    }

    /// READ on the pipe: up to `max` bytes of the next message, and whether
    /// more of it remains (then the caller answers STATUS_BUFFER_OVERFLOW).
    /// Nothing pending is an empty read.
    pub fn read(&mut self, max: usize) -> Result<(Vec<u8>, bool), NtStatus> {
        let Some(front) = self.output.front_mut() else { return Ok((Vec::new(), false)) };
        if front.len() <= max {
            let msg = self.output.pop_front().unwrap_or_default();
            return Ok((msg, false));
        }
        let rest = front.split_off(max);
        let head = std::mem::replace(front, rest);
        Ok((head, true))
    }

    /// FSCTL_PIPE_TRANSCEIVE: write `input`, then read up to `max_out`.
    pub fn transceive(&mut self, input: &[u8], max_out: usize) -> Result<(Vec<u8>, bool), NtStatus> {
        self.write(input)?;
        self.read(max_out)
    }
}
