// SPDX-License-Identifier: GPL-2.0-only

//! The admin queue: kernel-only, one command at a time, every wait bounded.
//!
//! The admin doorbells share the doorbell page that an owner (and its GPU)
//! maps, so the queue is built to survive stray writes to them:
//! - every SQ slot but the one in flight is zero, so a stray tail ring
//!   only replays zero entries, which the controller rejects (Delete I/O
//!   SQ 0 is an invalid queue), never a real command;
//! - command ID 0 is never used, and a completion is taken as ours only
//!   when its SQ ID is 0 and its command ID is the one in flight; anything
//!   else is consumed (the CQ head doorbell is rung) and skipped;
//! - the CQ head doorbell is rewritten with the kernel's own head before
//!   each command and while waiting, so a stray head write that made the
//!   CQ look full to the controller is undone;
//! - one Asynchronous Event Request is kept outstanding under a command ID
//!   of its own (`AER_CID`); its completion, whenever it comes, is an
//!   event for the watch (`take_event`), not a stray completion;
//! - a command with no completion before the deadline is ETIMEDOUT, never
//!   EIO: it may still run, so callers keep what it references. The queue
//!   is then `unsure`; once no file holds a queue, the controller is
//!   disabled and re-initialised (`Shared::recover_if_idle`), which frees
//!   what was kept and resets the queue.

use kernel::{
    device::{Bound, Device},
    dma::Coherent,
    io::{io_project, poll::read_poll_timeout, Io},
    prelude::*,
    sync::barrier::{dma_mb, Read},
    time::Delta,
};

use crate::controller::regs::Cap;
use crate::queues::command::{Cqe, Sqe};

pub(crate) const ADMIN_DEPTH: u16 = 32;
/// Command ID of the Asynchronous Event Request; the kernel's own commands
/// take 1..AER_CID.
const AER_CID: u16 = u16::MAX;
/// Event requests the controller may fail before the queue stops asking
/// (until a reset): a controller that refuses them is not asked forever.
const AER_FAILURES: u8 = 3;
/// Deadline of one admin command.
const ADMIN_TIMEOUT: Delta = Delta::from_secs(5);

pub(crate) struct AdminQueue {
    sq: Coherent<[Sqe]>,
    cq: Coherent<[Cqe]>,
    tail: u16,
    head: u16,
    phase: bool,
    cid: u16,
    /// Completions consumed that were not the kernel's (for the log).
    foreign: u64,
    /// A command got no completion: the controller's view of this queue is
    /// unknown until it is reset.
    unsure: bool,
    /// An Asynchronous Event Request is outstanding.
    aer_armed: bool,
    /// Its SQ slot, zeroed once a later command completes (the controller
    /// fetches in order, so it has fetched the request by then).
    aer_slot: Option<u16>,
    /// Event requests that completed with an error since the last reset.
    aer_failures: u8,
    /// Dword 0 of an event completion not yet taken by the watch.
    event: Option<u32>,
}

impl AdminQueue {
    pub(crate) fn new(dev: &Device<Bound>) -> Result<Self> {
        Ok(Self {
            sq: Coherent::zeroed_slice(dev, ADMIN_DEPTH.into(), GFP_KERNEL)?,
            cq: Coherent::zeroed_slice(dev, ADMIN_DEPTH.into(), GFP_KERNEL)?,
            tail: 0,
            head: 0,
            phase: true,
            cid: 0,
            foreign: 0,
            unsure: false,
            aer_armed: false,
            aer_slot: None,
            aer_failures: 0,
            event: None,
        })
    }

    pub(crate) fn unsure(&self) -> bool {
        self.unsure
    }

    /// Empty rings and fresh pointers, for a controller that was disabled
    /// (so it no longer reads or writes them) and is about to be enabled.
    pub(crate) fn reset(&mut self) -> Result {
        for slot in 0..ADMIN_DEPTH {
            self.write_sqe(slot, Sqe::default())?;
            self.write_cqe(slot, Cqe::default())?;
        }
        self.tail = 0;
        self.head = 0;
        self.phase = true;
        self.unsure = false;
        // A disabled controller dropped its outstanding request.
        self.aer_armed = false;
        self.aer_slot = None;
        self.aer_failures = 0;
        self.event = None;
        Ok(())
    }

    pub(crate) fn sq_dma(&self) -> u64 {
        self.sq.dma_address()
    }

    pub(crate) fn cq_dma(&self) -> u64 {
        self.cq.dma_address()
    }

    /// SQ slot `slot` through a typed, bounds-checked view of the queue
    /// (ERANGE past its end). A volatile copy: the controller may read the
    /// slot at any time (a stray doorbell) and sees the old or the new
    /// entry, both harmless (zero, or the kernel's command).
    fn write_sqe(&self, slot: u16, sqe: Sqe) -> Result {
        io_project!(&self.sq, [try: usize::from(slot)]).copy_write(sqe);
        Ok(())
    }

    /// CQ slot `slot`: a volatile copy of memory the controller writes.
    fn read_cqe(&self, slot: u16) -> Result<Cqe> {
        Ok(io_project!(&self.cq, [try: usize::from(slot)]).copy_read())
    }

    fn write_cqe(&self, slot: u16, cqe: Cqe) -> Result {
        io_project!(&self.cq, [try: usize::from(slot)]).copy_write(cqe);
        Ok(())
    }

    /// Take the next posted completion, if any, and ring the CQ head.
    fn pop(&mut self, cap: Cap, ring: &dyn Fn(usize, u32) -> Result) -> Result<Option<Cqe>> {
        if self.read_cqe(self.head)?.phase() != self.phase {
            return Ok(None);
        }
        // The phase bit was seen; read the rest of the entry after it.
        dma_mb(Read);
        let cqe = self.read_cqe(self.head)?;
        self.consumed(self.head, self.phase, cap, ring)?;
        Ok(Some(cqe))
    }

    /// Slot `slot`, written in the lap of phase `phase`, was read: blank it
    /// (command ID 0, which the kernel never uses, and the same phase, so
    /// the next lap still sees it as old), move the head past it and tell
    /// the controller.
    fn consumed(
        &mut self,
        slot: u16,
        phase: bool,
        cap: Cap,
        ring: &dyn Fn(usize, u32) -> Result,
    ) -> Result {
        let blank = Cqe {
            sq_id: u16::MAX,
            status: u16::from(phase),
            ..Default::default()
        };
        // The controller writes a slot again only after the head has passed
        // it, which it learns from the doorbell below.
        self.write_cqe(slot, blank)?;
        self.head = (slot + 1) % ADMIN_DEPTH;
        self.phase = if self.head == 0 { !phase } else { phase };
        ring(cap.cq_doorbell(0), self.head.into())
    }

    /// Our completion by command ID anywhere in the CQ: after stray head
    /// writes the controller's tail may have lapped the kernel's head, so
    /// the entry may not be where the phase walk looks.
    fn find(
        &mut self,
        cid: u16,
        cap: Cap,
        ring: &dyn Fn(usize, u32) -> Result,
    ) -> Result<Option<Cqe>> {
        for slot in 0..ADMIN_DEPTH {
            let cqe = self.read_cqe(slot)?;
            if cqe.sq_id == 0 && cqe.cid == cid {
                dma_mb(Read);
                let cqe = self.read_cqe(slot)?;
                // Resynchronise on it: what follows it in the ring is newer.
                self.consumed(slot, cqe.phase(), cap, ring)?;
                return Ok(Some(cqe));
            }
        }
        Ok(None)
    }

    /// Is `cqe` the event request's completion? Then it is kept for the
    /// watch (or counted, if the controller failed the request).
    fn is_event(&mut self, dev: &Device, cqe: &Cqe) -> bool {
        if cqe.sq_id != 0 || cqe.cid != AER_CID {
            return false;
        }
        self.aer_armed = false;
        if cqe.succeeded() {
            self.event = Some(cqe.result);
        } else {
            let (sct, sc) = cqe.status_code();
            self.aer_failures = self.aer_failures.saturating_add(1);
            let then = if self.aer_failures >= AER_FAILURES {
                "; not asked again until a reset (namespace changes are then seen at a restart and at CREATE_QPAIR only)"
            } else {
                ""
            };
            dev_warn!(
                dev,
                "asynchronous event request failed: SCT {:#x} SC {:#x}{}\n",
                sct,
                sc,
                then
            );
        }
        true
    }

    /// Keep one Asynchronous Event Request outstanding. Not waited for: it
    /// completes when the controller has something to say.
    pub(crate) fn arm_event(&mut self, cap: Cap, ring: &dyn Fn(usize, u32) -> Result) -> Result {
        if self.aer_armed || self.aer_failures >= AER_FAILURES || self.unsure {
            return Ok(());
        }
        // The previous request's slot, if no command has cleared it yet,
        // was fetched before that request completed.
        if let Some(old) = self.aer_slot.take() {
            self.write_sqe(old, Sqe::default())?;
        }
        let slot = self.tail;
        let sqe = Sqe {
            opcode: crate::queues::command::admin::ASYNC_EVENT_REQUEST,
            cid: AER_CID,
            ..Default::default()
        };
        self.write_sqe(slot, sqe)?;
        self.tail = (self.tail + 1) % ADMIN_DEPTH;
        ring(cap.sq_doorbell(0), self.tail.into())?;
        self.aer_armed = true;
        self.aer_slot = Some(slot);
        Ok(())
    }

    /// The event that completed since the last call, if any (dword 0 of its
    /// completion: type in bits 2:0, information in 15:8, log page in
    /// 23:16). Other completions found on the way are skipped.
    pub(crate) fn take_event(
        &mut self,
        dev: &Device,
        cap: Cap,
        ring: &dyn Fn(usize, u32) -> Result,
    ) -> Result<Option<u32>> {
        while let Some(cqe) = self.pop(cap, ring)? {
            if !self.is_event(dev, &cqe) {
                self.skip(dev, &cqe);
            }
        }
        Ok(self.event.take())
    }

    fn skip(&mut self, dev: &Device, cqe: &Cqe) {
        self.foreign += 1;
        if self.foreign.is_power_of_two() {
            dev_warn!(
                dev,
                "admin completion not from the kernel (SQ {} cid {}): skipped ({} so far)\n",
                cqe.sq_id,
                cqe.cid,
                self.foreign
            );
        }
    }

    /// Submit `sqe` and wait for its completion. `ring(offset, value)` writes
    /// a doorbell register in BAR0. A command the controller failed is EIO
    /// (and a log line); one with no completion in time is ETIMEDOUT.
    pub(crate) fn submit(
        &mut self,
        dev: &Device,
        cap: Cap,
        mut sqe: Sqe,
        ring: &dyn Fn(usize, u32) -> Result,
    ) -> Result<Cqe> {
        // Completions posted since the last command (stray doorbell writes)
        // are not ours: consume them so the CQ has room, and tell the
        // controller the kernel's own head whatever was written there.
        while let Some(junk) = self.pop(cap, ring)? {
            if !self.is_event(dev, &junk) {
                self.skip(dev, &junk);
            }
        }
        ring(cap.cq_doorbell(0), self.head.into())?;
        self.cid = if self.cid >= AER_CID - 1 {
            1
        } else {
            self.cid + 1
        };
        sqe.cid = self.cid;
        let slot = self.tail;
        self.write_sqe(slot, sqe)?;
        self.tail = (self.tail + 1) % ADMIN_DEPTH;
        // writel orders the SQE store before the doorbell reaches the device.
        ring(cap.sq_doorbell(0), self.tail.into())?;

        let mut mine = None;
        let mut polls = 0u32;
        let waited = read_poll_timeout(
            || {
                while let Some(cqe) = self.pop(cap, ring)? {
                    if cqe.sq_id == 0 && cqe.cid == sqe.cid {
                        mine = Some(cqe);
                        break;
                    }
                    if !self.is_event(dev, &cqe) {
                        self.skip(dev, &cqe);
                    }
                }
                polls += 1;
                if mine.is_none() && polls % 64 == 0 {
                    mine = self.find(sqe.cid, cap, ring)?;
                    ring(cap.cq_doorbell(0), self.head.into())?;
                }
                Ok(mine.is_some())
            },
            |done: &bool| *done,
            Delta::from_micros(20),
            ADMIN_TIMEOUT,
        );
        // Done or not, the slot goes back to zero: if the controller has not
        // fetched it yet, a later ring replays nothing.
        let cleared = self.write_sqe(slot, Sqe::default());
        let cqe = match (waited, mine) {
            (Ok(_), Some(cqe)) => cqe,
            (Err(e), _) if e != ETIMEDOUT => return Err(e),
            _ => {
                self.unsure = true;
                dev_err!(dev, "admin command {:#04x} (cid {}) got no completion in {} ms; what it references is kept\n",
                         sqe.opcode, sqe.cid, ADMIN_TIMEOUT.as_millis());
                return Err(ETIMEDOUT);
            }
        };
        // The same slot was written above: in range.
        cleared?;
        // This command was fetched after the event request, so that one was
        // fetched too: its slot can go back to zero.
        if let Some(old) = self.aer_slot.take() {
            self.write_sqe(old, Sqe::default())?;
        }
        if !cqe.succeeded() {
            let (sct, sc) = cqe.status_code();
            dev_err!(
                dev,
                "admin command {:#04x} failed: SCT {:#x} SC {:#x}\n",
                sqe.opcode,
                sct,
                sc
            );
            return Err(EIO);
        }
        Ok(cqe)
    }
}
