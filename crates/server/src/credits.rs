//! The command sequence window (MS-SMB2 3.3.1.1, 3.3.5.2.3, 3.3.1.2) and
//! what a request is charged against it (3.3.5.2.5).
//!
//! The client may use message ids in `[low, low + range)`; each id once.
//! `used` marks ids in that window already consumed out of order.
//!
//! Whether a request may cost more than one credit depends on the dialect:
//! SMB 2.0.2 has no CreditCharge, so every request costs one credit and
//! carries at most [`CREDIT_PAYLOAD`]; from 2.1 on the server offers
//! multi-credit requests with SMB2_GLOBAL_CAP_LARGE_MTU.

use crate::conn_state::Negotiated;
use smbq_wire::negotiate::caps;
use smbq_wire::{Dialect, NtStatus};
use std::collections::VecDeque;

/// The payload one credit pays for: 64 KiB (MS-SMB2 3.1.5.2).
pub const CREDIT_PAYLOAD: u32 = 65536;

//= MS-SMB2 3.3.5.4
//# SMB2_GLOBAL_CAP_LARGE_MTU if Connection.Dialect belongs to the SMB 2.1
//# or 3.x dialect family and Connection.SupportsMultiCredit is TRUE.
/// Whether smbq takes multi-credit requests at `dialect`: from 2.1 on, over
/// every transport it serves (TCP port 445 and QUIC); never at 2.0.2.
pub fn supports_multi_credit(dialect: Dialect) -> bool {
    dialect != Dialect::SMB202
}

/// Connection.SupportsMultiCredit (MS-SMB2 3.3.1.7) of a negotiated
/// connection: what the NEGOTIATE response said with
/// SMB2_GLOBAL_CAP_LARGE_MTU, which is what the client goes by
/// (3.2.5.2). False before NEGOTIATE and after an SMB1 one answered with
/// dialect 2.0.2.
pub fn multi_credit(neg: Option<&Negotiated>) -> bool {
    neg.is_some_and(|n| n.server_capabilities & caps::LARGE_MTU != 0)
}

/// The credits a request takes from the window (MS-SMB2 3.3.5.2.3): its
/// CreditCharge where multi-credit requests are supported (0 counts as 1,
/// [`Credits::consume`]); else one.
pub fn charged(multi_credit: bool, credit_charge: u16) -> u16 {
    //= MS-SMB2 2.2.1.2
    //# CreditCharge: In the SMB 2.0.2 dialect, this field MUST NOT be used
    //# and MUST be reserved. The sender MUST set this to 0, and the receiver
    //# MUST ignore it.
    if multi_credit {
        credit_charge
    } else {
        1
    }
}

/// Whether a READ, WRITE, IOCTL or QUERY_DIRECTORY moving `payload` bytes
/// (the larger of what it sends and what it may receive) is charged enough.
pub fn check_charge(multi_credit: bool, credit_charge: u16, payload: u32) -> Result<(), NtStatus> {
    if !multi_credit {
        //= MS-SMB2 3.2.4.1.5
        //# Otherwise, the CreditCharge field MUST be set to 0 and the
        //# payload size of a request or the maximum size of a response MUST
        //# be a maximum of 65536.
        // (The command's own check against MaxReadSize, MaxWriteSize or
        // MaxTransactSize, 64 KiB here, refuses it first.)
        return if payload > CREDIT_PAYLOAD { Err(NtStatus::INVALID_PARAMETER) } else { Ok(()) };
    }
    //= MS-SMB2 3.3.5.2.5
    //# If CreditCharge is zero and the payload size of the request or the
    //# maximum response size is greater than 64 kilobytes, the server MUST
    //# fail the request with the error code STATUS_INVALID_PARAMETER.
    //# If CreditCharge is greater than zero, the server MUST calculate the
    //# expected CreditCharge for the current operation using the formula
    //# specified in section 3.1.5.2. If the calculated credit number is
    //# greater than the CreditCharge, the server MUST fail the request with
    //# the error code STATUS_INVALID_PARAMETER.
    let needed = payload.max(1).div_ceil(CREDIT_PAYLOAD);
    if u32::from(credit_charge.max(1)) < needed {
        return Err(NtStatus::INVALID_PARAMETER);
    }
    Ok(())
}

#[derive(Debug)]
pub struct Credits {
    low: u64,
    used: VecDeque<bool>,
    max: u16,
}

impl Credits {
    /// A new connection may send message id 0 (NEGOTIATE) only.
    pub fn new(max: u16) -> Credits {
        let mut used = VecDeque::new();
        used.push_back(false);
        Credits { low: 0, used, max: max.max(1) }
    }

    /// Consume ids `[id, id + charge)`; false if any is outside the window or reused.
    pub fn consume(&mut self, id: u64, charge: u16) -> bool {
        let charge = u64::from(charge.max(1));
        let Some(start) = id.checked_sub(self.low) else { return false };
        let Some(end) = start.checked_add(charge) else { return false };
        if end > self.used.len() as u64 {
            return false;
        }
        let (start, end) = (start as usize, end as usize);
        if self.used.range(start..end).any(|u| *u) {
            return false;
        }
        for u in self.used.range_mut(start..end) {
            *u = true;
        }
        while self.used.front() == Some(&true) {
            self.used.pop_front();
            self.low += 1;
        }
        true
    }

    /// Credits held by the client now (window size).
    pub fn outstanding(&self) -> usize {
        self.used.len()
    }

    /// Grant up to `requested` (at least 1 when the client would otherwise
    /// be left with none), never letting the window exceed the maximum.
    pub fn grant(&mut self, requested: u16) -> u16 {
        let room = (self.max as usize).saturating_sub(self.used.len());
        let mut want = requested as usize;
        if want == 0 && self.used.is_empty() {
            want = 1;
        }
        let g = want.min(room);
        for _ in 0..g {
            self.used.push_back(false);
        }
        g as u16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_rules() {
        let mut c = Credits::new(8);
        assert!(!c.consume(1, 1));
        assert!(c.consume(0, 1));
        assert!(!c.consume(0, 1), "reuse");
        assert_eq!(c.grant(4), 4); // ids 1..5
        assert!(c.consume(2, 2)); // out of order, multi-credit
        assert!(!c.consume(3, 1));
        assert!(!c.consume(4, 2), "past the window");
        assert!(c.consume(1, 1));
        assert!(c.consume(4, 1));
        assert_eq!(c.outstanding(), 0);
        assert_eq!(c.grant(100), 8, "capped at the maximum");
        assert!(!c.consume(u64::MAX, 3));
    }

    #[test]
    fn zero_request_keeps_one() {
        let mut c = Credits::new(8);
        assert!(c.consume(0, 1));
        assert_eq!(c.grant(0), 1);
        assert!(c.consume(1, 0), "charge 0 counts as 1");
    }

    //= MS-SMB2 2.2.1.2
    //= type=test
    #[test]
    fn charge_per_dialect() {
        assert!(!supports_multi_credit(Dialect::SMB202));
        assert!(supports_multi_credit(Dialect::SMB210) && supports_multi_credit(Dialect::SMB311));
        // 2.0.2: the field is ignored, one credit a request, 64 KiB at most.
        assert_eq!(charged(false, 0), 1);
        assert_eq!(charged(false, 5), 1);
        assert_eq!(check_charge(false, 0, 65536), Ok(()));
        assert_eq!(check_charge(false, 0, 65537), Err(NtStatus::INVALID_PARAMETER));
        assert_eq!(check_charge(false, 2, 65537), Err(NtStatus::INVALID_PARAMETER), "a charge buys nothing at 2.0.2");
        // 2.1 and later with LARGE_MTU: 0 is one credit, 64 KiB a credit.
        assert_eq!(charged(true, 0), 0);
        assert_eq!(charged(true, 3), 3);
        assert_eq!(check_charge(true, 0, 65536), Ok(()));
        assert_eq!(check_charge(true, 0, 65537), Err(NtStatus::INVALID_PARAMETER));
        assert_eq!(check_charge(true, 1, 0), Ok(()));
        assert_eq!(check_charge(true, 2, 131_072), Ok(()));
        assert_eq!(check_charge(true, 2, 131_073), Err(NtStatus::INVALID_PARAMETER));
        assert_eq!(check_charge(true, 128, 8 << 20), Ok(()));
        assert_eq!(check_charge(true, 1, u32::MAX), Err(NtStatus::INVALID_PARAMETER));
    }
}
