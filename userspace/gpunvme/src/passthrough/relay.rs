// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! One shadow pair's relay: the module's shared-mode algorithm
//! (`Relay` in `rust/bridge.rs`) with io_uring in place of the real queues.
//!
//! Each pass ([`Relay::step`]) reads the shadow CQ head and SQ tail cells
//! (out-of-range values are counted, once per distinct value, and never
//! used), takes each new shadow SQE (copied once; only the copy is used),
//! checks it ([`super::check`]) and either pushes it to the submitter
//! under a tag of its own or posts its error completion in the CQ mirror.
//! Completions come back by tag ([`Relay::complete`]) and are mirrored
//! under the GPU's own command ID with the shadow SQ head, the pair's SQ
//! ID and the mirror's phase, the dword holding the phase written last.
//!
//! Flow control, as in the module: a command is taken only while fewer
//! than depth - 1 are in flight and the mirror has room for its
//! completion and every one still owed, so the mirror cannot overflow
//! whatever the GPU does; a pass spends at most [`BUDGET`] page checks on
//! the pair, so a flood of long lists cannot hold back the other pairs of
//! its relay thread.

use std::sync::atomic::{fence, AtomicU64, Ordering};

use super::check::{Checked, Data, Reject, Scratch};
use super::submit::{errno_status, Done, Submit, Via};

/// Page checks one pass spends on a pair at most (the module's `BUDGET`).
pub(crate) const BUDGET: u32 = 256;

/// What the relay reads and writes of a shadow pair; the real one is the
/// pair's shared memory, the unit tests' a model.
pub(crate) trait Port {
    fn shadow_sq_tail(&self) -> u32;
    fn shadow_cq_head(&self) -> u32;
    /// A copy of shadow SQ slot `slot` (read once).
    fn shadow_sqe(&self, slot: u32) -> [u32; 16];
    /// Writes mirror slot `slot`: dwords 0-2, a release fence, then dword 3
    /// (command ID, status, phase).
    fn mirror_cqe(&self, slot: u32, dw: [u32; 4]);
}

/// Counters of one pair (the module's debugfs set, and what io_uring adds).
#[derive(Debug, Default)]
pub struct Counters {
    /// Relay passes over the pair, idle ones included.
    pub polls: AtomicU64,
    /// SQEs that passed the checks and went to the kernel.
    pub sqes_accepted: AtomicU64,
    /// SQEs refused (completed with an error status in the mirror).
    pub sqes_rejected: AtomicU64,
    /// Completions written to the mirror for accepted commands.
    pub cqes_mirrored: AtomicU64,
    /// Distinct out-of-range shadow tail or head values seen and not used.
    pub bad_doorbell_values: AtomicU64,
    /// Accepted commands the kernel failed without a controller status
    /// (a negative errno: no live path, a cancelled request); the last
    /// such errno is in `last_errno`.
    pub transport_errors: AtomicU64,
    /// The last errno of `transport_errors` (positive), 0 if none.
    pub last_errno: AtomicU64,
    /// Accepted commands that went through an io_uring fixed buffer.
    pub fixed_buffer_commands: AtomicU64,
    /// Accepted commands whose data was several ranges (NVME_URING_CMD_IO_VEC).
    pub vectored_commands: AtomicU64,
    /// Nanoseconds the relay thread spent in this pair's passes.
    pub relay_ns: AtomicU64,
}

impl Counters {
    /// `(name, value)` of every counter, in the module's order first.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        vec![
            ("polls", r(&self.polls)),
            ("sqes_accepted", r(&self.sqes_accepted)),
            ("sqes_rejected", r(&self.sqes_rejected)),
            ("cqes_mirrored", r(&self.cqes_mirrored)),
            ("bad_doorbell_values", r(&self.bad_doorbell_values)),
            ("transport_errors", r(&self.transport_errors)),
            ("last_errno", r(&self.last_errno)),
            ("fixed_buffer_commands", r(&self.fixed_buffer_commands)),
            ("vectored_commands", r(&self.vectored_commands)),
            ("relay_ns", r(&self.relay_ns)),
        ]
    }

    /// One counter by name.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.snapshot()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
    }
}

fn bump(a: &AtomicU64) {
    // One writer (the pair's relay thread): no read-modify-write needed.
    a.store(a.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

/// A command in flight: the GPU's command ID and its scratch (the iovecs
/// the kernel may still read).
struct Slot {
    user_cid: Option<u16>,
    scratch: Scratch,
}

/// Relay state of one pair, for its whole life.
pub(crate) struct Relay {
    qid: u16,
    depth: u32,
    budget: u32,
    /// Next shadow SQ slot to take; the last in-range tail the GPU wrote.
    sq_head: u32,
    tail: u32,
    /// Next mirror slot and its phase; the GPU's last in-range head.
    cq_tail: u32,
    cq_phase: bool,
    user_head: u32,
    slots: Vec<Slot>,
    in_flight: u32,
    next_tag: u32,
    last_bad_tail: u32,
    last_bad_head: u32,
    /// Completions that found the mirror full (never, by the flow control;
    /// kept rather than dropped should it happen).
    pending: std::collections::VecDeque<(u16, u64, u16)>,
}

/// A tag: the relay thread's index of the pair (upper 32 bits) and the
/// slot (lower 16).
pub(crate) fn tag(pair: u32, slot: u32) -> u64 {
    (u64::from(pair) << 32) | u64::from(slot)
}

/// The pair index and slot of a tag.
pub(crate) fn untag(t: u64) -> (u32, u32) {
    ((t >> 32) as u32, (t & 0xffff) as u32)
}

impl Relay {
    pub(crate) fn new(qid: u16, depth: u32) -> Self {
        Relay {
            qid,
            depth,
            budget: BUDGET,
            sq_head: 0,
            tail: 0,
            cq_tail: 0,
            cq_phase: true,
            user_head: 0,
            slots: (0..depth)
                .map(|_| Slot {
                    user_cid: None,
                    scratch: Scratch::default(),
                })
                .collect(),
            in_flight: 0,
            next_tag: 0,
            last_bad_tail: u32::MAX,
            last_bad_head: u32::MAX,
            pending: std::collections::VecDeque::new(),
        }
    }

    /// Commands handed to the submitter and not yet back.
    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight
    }

    fn next(&self, i: u32) -> u32 {
        if i + 1 == self.depth {
            0
        } else {
            i + 1
        }
    }

    /// Free entries of the mirror, as the GPU's head says.
    fn cq_room(&self) -> u32 {
        let used = (self.cq_tail + self.depth - self.user_head) % self.depth;
        self.depth - 1 - used
    }

    fn read_head(&mut self, port: &impl Port, c: &Counters) {
        let head = port.shadow_cq_head();
        if head < self.depth {
            self.user_head = head;
        } else if head != self.last_bad_head {
            bump(&c.bad_doorbell_values);
            self.last_bad_head = head;
        }
    }

    /// Writes one mirror entry (status: the 15-bit field).
    fn post(&mut self, port: &impl Port, cid: u16, result: u64, status: u16) {
        let dw3 =
            u32::from(cid) | (u32::from(self.cq_phase) << 16) | (u32::from(status & 0x7fff) << 17);
        let sq = (self.sq_head & 0xffff) | (u32::from(self.qid) << 16);
        port.mirror_cqe(
            self.cq_tail,
            [result as u32, (result >> 32) as u32, sq, dw3],
        );
        self.cq_tail = self.next(self.cq_tail);
        if self.cq_tail == 0 {
            self.cq_phase = !self.cq_phase;
        }
    }

    fn post_or_keep(&mut self, port: &impl Port, cid: u16, result: u64, status: u16) {
        if self.pending.is_empty() && self.cq_room() > 0 {
            self.post(port, cid, result, status);
        } else {
            self.pending.push_back((cid, result, status));
        }
    }

    fn alloc(&mut self) -> Option<u32> {
        for _ in 0..self.depth {
            let t = self.next_tag;
            self.next_tag = self.next(t);
            if self.slots[t as usize].user_cid.is_none() {
                return Some(t);
            }
        }
        None
    }

    /// A command of this pair came back (`slot` from its tag). A slot not
    /// in flight (a stale tag) is ignored. True when it was mirrored.
    pub(crate) fn complete(&mut self, port: &impl Port, slot: u32, d: &Done, c: &Counters) -> bool {
        let Some(user_cid) = self
            .slots
            .get_mut(slot as usize)
            .and_then(|s| s.user_cid.take())
        else {
            return false;
        };
        self.in_flight -= 1;
        let status = if d.res >= 0 {
            (d.res & 0x7fff) as u16
        } else {
            bump(&c.transport_errors);
            c.last_errno
                .store(u64::from(d.res.unsigned_abs()), Ordering::Relaxed);
            errno_status(-d.res)
        };
        self.post_or_keep(port, user_cid, d.result, status);
        bump(&c.cqes_mirrored);
        true
    }

    /// One pass: take new SQEs, check them with `check`, push what passes
    /// to `sub` under tags of relay-thread pair index `pair`. True when
    /// anything moved. `check(sqe, scratch)` may be called once per SQE.
    pub(crate) fn step<S: Submit + ?Sized>(
        &mut self,
        port: &impl Port,
        pair: u32,
        sub: &mut S,
        c: &Counters,
        mut check: impl FnMut(&[u32; 16], &mut Scratch) -> (Result<Checked, Reject>, u32),
    ) -> bool {
        let mut progress = false;
        bump(&c.polls);
        self.read_head(port, c);
        while !self.pending.is_empty() && self.cq_room() > 0 {
            let (cid, result, status) = self.pending.pop_front().expect("not empty");
            self.post(port, cid, result, status);
            progress = true;
        }
        let tail = port.shadow_sq_tail();
        if tail < self.depth {
            self.tail = tail;
        } else if tail != self.last_bad_tail {
            bump(&c.bad_doorbell_values);
            self.last_bad_tail = tail;
        }
        if self.tail != self.sq_head {
            // The SQEs up to the tail were written before it.
            fence(Ordering::Acquire);
        }
        let mut spent = 0u32;
        while self.tail != self.sq_head
            && self.pending.is_empty()
            && self.in_flight < self.cq_room()
            && spent < self.budget
            && sub.room() > 0
        {
            let Some(t) = self.alloc() else { break };
            let sqe = port.shadow_sqe(self.sq_head);
            self.sq_head = self.next(self.sq_head);
            progress = true;
            let user_cid = (sqe[0] >> 16) as u16;
            let slot = &mut self.slots[t as usize];
            let (verdict, cost) = check(&sqe, &mut slot.scratch);
            spent = spent.saturating_add(cost);
            match verdict {
                Ok(cmd) => {
                    let iov = match cmd.data {
                        Data::Vectored { n } => &slot.scratch.iov[..n],
                        _ => &[],
                    };
                    match sub.push(tag(pair, t), &cmd, iov) {
                        Via::Fixed => bump(&c.fixed_buffer_commands),
                        Via::Vectored => bump(&c.vectored_commands),
                        Via::Plain => {}
                    }
                    slot.user_cid = Some(user_cid);
                    self.in_flight += 1;
                    bump(&c.sqes_accepted);
                }
                Err(why) => {
                    self.post(port, user_cid, 0, why.status());
                    bump(&c.sqes_rejected);
                }
            }
        }
        progress
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passthrough::check::Window;
    use std::cell::{Cell, RefCell};

    const D: usize = 4;

    /// The shadow memory; opcode 0x7f is "invalid".
    struct Model {
        tail: Cell<u32>,
        head: Cell<u32>,
        sq: RefCell<[[u32; 16]; D]>,
        cq: RefCell<[[u32; 4]; D]>,
    }

    impl Port for Model {
        fn shadow_sq_tail(&self) -> u32 {
            self.tail.get()
        }
        fn shadow_cq_head(&self) -> u32 {
            self.head.get()
        }
        fn shadow_sqe(&self, s: u32) -> [u32; 16] {
            self.sq.borrow()[s as usize]
        }
        fn mirror_cqe(&self, s: u32, dw: [u32; 4]) {
            self.cq.borrow_mut()[s as usize] = dw;
        }
    }

    /// Records what is pushed; completes on demand.
    #[derive(Default)]
    struct Sub {
        pushed: Vec<(u64, Checked)>,
        flushes: u32,
        room: usize,
    }

    impl Submit for Sub {
        fn room(&mut self) -> usize {
            self.room - self.pushed.len()
        }
        fn push(&mut self, tag: u64, cmd: &Checked, _iov: &[libc::iovec]) -> Via {
            self.pushed.push((tag, *cmd));
            Via::Plain
        }
        fn flush(&mut self, _waiting: bool) -> std::io::Result<()> {
            self.flushes += 1;
            Ok(())
        }
        fn reap(&mut self, _out: &mut Vec<Done>) {}
    }

    fn model() -> Model {
        Model {
            tail: Cell::new(0),
            head: Cell::new(0),
            sq: RefCell::new([[0; 16]; D]),
            cq: RefCell::new([[0; 4]; D]),
        }
    }

    fn submit(m: &Model, slot: usize, opcode: u8, cid: u16) {
        let mut dw = [0u32; 16];
        dw[0] = u32::from(opcode) | (u32::from(cid) << 16);
        m.sq.borrow_mut()[slot] = dw;
    }

    /// Accepts every opcode but 0x7f (a flush-like command), at cost 1.
    fn checker(sqe: &[u32; 16], _s: &mut Scratch) -> (Result<Checked, Reject>, u32) {
        let op = sqe[0] as u8;
        if op == 0x7f {
            return (Err(Reject::Opcode), 1);
        }
        let w = Window {
            start: 0,
            blocks: 1,
        };
        (
            Ok(Checked {
                opcode: op,
                nsid: 1,
                slba: w.start,
                cdw12: 0,
                cdw13: 0,
                data_len: 0,
                data: Data::None,
            }),
            1,
        )
    }

    fn done(tag: u64, res: i32) -> Done {
        Done {
            tag,
            res,
            result: 0xabc,
        }
    }

    #[test]
    fn accepted_commands_come_back_under_the_gpus_ids_with_phase_and_sq_head() {
        let (m, mut r, c) = (model(), Relay::new(7, D as u32), Counters::default());
        let mut s = Sub {
            room: 64,
            ..Default::default()
        };
        submit(&m, 0, 0x02, 0x1234);
        submit(&m, 1, 0x01, 0x5678);
        m.tail.set(2);
        assert!(r.step(&m, 3, &mut s, &c, checker));
        assert_eq!((s.pushed.len(), r.in_flight()), (2, 2));
        let (t0, t1) = (s.pushed[0].0, s.pushed[1].0);
        assert_eq!((untag(t0).0, untag(t1).0), (3, 3));
        assert_ne!(t0, t1);
        // Out of order.
        assert!(r.complete(&m, untag(t1).1, &done(t1, 0), &c));
        assert!(r.complete(&m, untag(t0).1, &done(t0, 0), &c));
        assert!(!r.complete(&m, untag(t0).1, &done(t0, 0), &c), "twice");
        let cq = m.cq.borrow();
        assert_eq!(cq[0][3] & 0xffff, 0x5678);
        assert_eq!(cq[0][3] >> 16 & 1, 1, "phase 1 on the first lap");
        assert_eq!(cq[0][2], 2 | (7 << 16), "SQ head 2, SQ ID 7");
        assert_eq!(cq[0][0], 0xabc);
        assert_eq!(cq[1][3] & 0xffff, 0x1234);
        assert_eq!(r.in_flight(), 0);
        assert_eq!(c.get("sqes_accepted"), Some(2));
        assert_eq!(c.get("cqes_mirrored"), Some(2));
    }

    #[test]
    fn rejected_commands_never_reach_the_submitter() {
        let (m, mut r, c) = (model(), Relay::new(1, D as u32), Counters::default());
        let mut s = Sub {
            room: 64,
            ..Default::default()
        };
        submit(&m, 0, 0x7f, 42);
        m.tail.set(1);
        r.step(&m, 0, &mut s, &c, checker);
        assert!(s.pushed.is_empty());
        let dw3 = m.cq.borrow()[0][3];
        assert_eq!(dw3 & 0xffff, 42);
        let status = (dw3 >> 17) as u16;
        assert_eq!((status & 0xff, status >> 14 & 1), (0x01, 1), "SC 01h, DNR");
        assert_eq!(c.get("sqes_rejected"), Some(1));
    }

    #[test]
    fn transport_errors_become_path_errors_and_are_counted() {
        let (m, mut r, c) = (model(), Relay::new(1, D as u32), Counters::default());
        let mut s = Sub {
            room: 64,
            ..Default::default()
        };
        submit(&m, 0, 0x02, 9);
        m.tail.set(1);
        r.step(&m, 0, &mut s, &c, checker);
        let t = s.pushed[0].0;
        r.complete(&m, untag(t).1, &done(t, -libc::ENOTCONN), &c);
        let status = (m.cq.borrow()[0][3] >> 17) as u16;
        assert_eq!(status, 0x370, "SCT 3 SC 70h Host Pathing Error");
        assert_eq!(c.get("transport_errors"), Some(1));
        assert_eq!(c.get("last_errno"), Some(libc::ENOTCONN as u64));
        // An NVMe status from the kernel is passed on as it is.
        submit(&m, 1, 0x02, 10);
        m.tail.set(2);
        r.step(&m, 0, &mut s, &c, checker);
        let t = s.pushed[1].0;
        r.complete(&m, untag(t).1, &done(t, 0x4080), &c);
        assert_eq!((m.cq.borrow()[1][3] >> 17) as u16, 0x4080);
    }

    #[test]
    fn a_full_mirror_holds_back_new_commands() {
        let (m, mut r, c) = (model(), Relay::new(1, D as u32), Counters::default());
        let mut s = Sub {
            room: 64,
            ..Default::default()
        };
        // Three rejections fill the mirror (depth 4 holds 3).
        for i in 0..3 {
            submit(&m, i, 0x7f, i as u16);
        }
        m.tail.set(3);
        r.step(&m, 0, &mut s, &c, checker);
        submit(&m, 3, 0x02, 9);
        m.tail.set(0);
        r.step(&m, 0, &mut s, &c, checker);
        assert!(s.pushed.is_empty(), "no room in the mirror");
        m.head.set(3);
        r.step(&m, 0, &mut s, &c, checker);
        assert_eq!(s.pushed.len(), 1);
    }

    #[test]
    fn in_flight_never_exceeds_what_the_mirror_can_take() {
        let (m, mut r, c) = (model(), Relay::new(1, D as u32), Counters::default());
        let mut s = Sub {
            room: 64,
            ..Default::default()
        };
        for i in 0..3 {
            submit(&m, i, 0x02, i as u16);
        }
        m.tail.set(3);
        r.step(&m, 0, &mut s, &c, checker);
        assert_eq!(r.in_flight(), 3, "depth - 1");
        // Completions wrap the mirror and flip its phase.
        for (t, _) in s.pushed.clone() {
            r.complete(&m, untag(t).1, &done(t, 0), &c);
        }
        m.head.set(3);
        submit(&m, 3, 0x02, 7);
        m.tail.set(0);
        r.step(&m, 0, &mut s, &c, checker);
        let t = s.pushed[3].0;
        r.complete(&m, untag(t).1, &done(t, 0), &c);
        let dw3 = m.cq.borrow()[3][3];
        assert_eq!((dw3 & 0xffff, dw3 >> 16 & 1), (7, 1));
        submit(&m, 0, 0x02, 8);
        m.tail.set(1);
        m.head.set(0);
        r.step(&m, 0, &mut s, &c, checker);
        let t = s.pushed[4].0;
        r.complete(&m, untag(t).1, &done(t, 0), &c);
        let dw3 = m.cq.borrow()[0][3];
        assert_eq!((dw3 & 0xffff, dw3 >> 16 & 1), (8, 0), "phase 0 on lap two");
    }

    #[test]
    fn out_of_range_cells_are_counted_once_and_not_used() {
        let (m, mut r, c) = (model(), Relay::new(1, D as u32), Counters::default());
        let mut s = Sub {
            room: 64,
            ..Default::default()
        };
        m.tail.set(9);
        m.head.set(7);
        r.step(&m, 0, &mut s, &c, checker);
        r.step(&m, 0, &mut s, &c, checker);
        assert_eq!((s.pushed.len(), c.get("bad_doorbell_values")), (0, Some(2)));
        submit(&m, 0, 0x02, 5);
        m.tail.set(1);
        m.head.set(0);
        r.step(&m, 0, &mut s, &c, checker);
        assert_eq!(s.pushed.len(), 1);
    }

    #[test]
    fn a_pass_spends_at_most_its_budget_and_the_submitters_room() {
        let (m, mut r, c) = (model(), Relay::new(1, D as u32), Counters::default());
        let mut s = Sub {
            room: 64,
            ..Default::default()
        };
        r.budget = 2;
        for i in 0..3 {
            submit(&m, i, 0x02, i as u16);
        }
        m.tail.set(3);
        r.step(&m, 0, &mut s, &c, checker);
        assert_eq!(s.pushed.len(), 2);
        r.step(&m, 0, &mut s, &c, checker);
        assert_eq!(s.pushed.len(), 3);
        let (m, mut r) = (model(), Relay::new(1, D as u32));
        let mut s = Sub {
            room: 1,
            ..Default::default()
        };
        for i in 0..3 {
            submit(&m, i, 0x02, i as u16);
        }
        m.tail.set(3);
        r.step(&m, 0, &mut s, &c, checker);
        assert_eq!(s.pushed.len(), 1, "the submission ring is full");
    }
}
