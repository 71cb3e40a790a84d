//! The command sequence window (MS-SMB2 3.3.1.1, 3.3.5.2.3, 3.3.1.2).
//!
//! The client may use message ids in `[low, low + range)`; each id once.
//! `used` marks ids in that window already consumed out of order.

use std::collections::VecDeque;

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
}
