// SPDX-License-Identifier: GPL-2.0

//! The admin queue: kernel-only, one command at a time, every wait bounded.
//!
//! The admin doorbells share the doorbell page that peers (GPUs) map, so
//! each SQ slot is zeroed once its command completes: a stray ring of the
//! admin doorbell then replays only a zero entry, which the controller
//! rejects (Delete I/O SQ 0 is an invalid queue), never a real command.

use kernel::{
    device::{Bound, Device},
    dma::Coherent,
    io::poll::read_poll_timeout,
    prelude::*,
    sync::barrier::{dma_mb, Read},
    time::Delta,
};

use crate::command::{Cqe, Sqe};
use crate::regs::Cap;

pub(crate) const ADMIN_DEPTH: u16 = 32;
/// Deadline of one admin command.
const ADMIN_TIMEOUT: Delta = Delta::from_secs(5);

pub(crate) struct AdminQueue {
    sq: Coherent<[Sqe]>,
    cq: Coherent<[Cqe]>,
    tail: u16,
    head: u16,
    phase: bool,
    cid: u16,
    /// A command timed out or completed out of order: the controller's view
    /// of this queue is unknown, so no further command is sent.
    broken: bool,
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
            broken: false,
        })
    }

    pub(crate) fn sq_dma(&self) -> u64 {
        self.sq.dma_address()
    }

    pub(crate) fn cq_dma(&self) -> u64 {
        self.cq.dma_address()
    }

    fn write_sqe(&self, slot: u16, sqe: Sqe) {
        debug_assert!(slot < ADMIN_DEPTH);
        // SAFETY: `slot` is within the allocation. The controller reads only
        // slots it was told about through the tail doorbell; this one is
        // either not yet published or already consumed (its CQE arrived).
        unsafe { core::ptr::write_volatile(self.sq.as_mut_ptr().cast::<Sqe>().add(slot.into()), sqe) }
    }

    fn read_cqe(&self, slot: u16) -> Cqe {
        // SAFETY: `slot` is within the allocation; a volatile read of memory
        // the controller writes is how completions are observed.
        unsafe { core::ptr::read_volatile(self.cq.as_ptr().cast::<Cqe>().add(slot.into())) }
    }

    /// Submit `sqe` and wait for its completion. `ring(offset, value)` writes
    /// a doorbell register in BAR0. A failed command is EIO and a log line.
    pub(crate) fn submit(
        &mut self,
        dev: &Device,
        cap: Cap,
        mut sqe: Sqe,
        ring: &dyn Fn(usize, u32) -> Result,
    ) -> Result<Cqe> {
        if self.broken {
            dev_err!(dev, "admin queue unusable after an earlier timeout\n");
            return Err(EIO);
        }
        self.cid = self.cid.wrapping_add(1);
        sqe.cid = self.cid;
        let slot = self.tail;
        self.write_sqe(slot, sqe);
        self.tail = (self.tail + 1) % ADMIN_DEPTH;
        // writel orders the SQE store before the doorbell reaches the device.
        ring(cap.sq_doorbell(0), self.tail.into())?;

        let (head, phase) = (self.head, self.phase);
        if read_poll_timeout(
            || Ok(self.read_cqe(head)),
            |c: &Cqe| c.phase() == phase,
            Delta::from_micros(20),
            ADMIN_TIMEOUT,
        )
        .is_err()
        {
            self.broken = true;
            dev_err!(dev, "admin command {:#04x} timed out after {} ms\n", sqe.opcode, ADMIN_TIMEOUT.as_millis());
            return Err(ETIMEDOUT);
        }
        // The phase bit was seen; read the rest of the entry after it.
        dma_mb(Read);
        let cqe = self.read_cqe(head);
        self.head = (head + 1) % ADMIN_DEPTH;
        if self.head == 0 {
            self.phase = !self.phase;
        }
        ring(cap.cq_doorbell(0), self.head.into())?;
        self.write_sqe(slot, Sqe::default());

        if cqe.cid != sqe.cid {
            self.broken = true;
            dev_err!(dev, "admin completion for cid {} while waiting for {}\n", cqe.cid, sqe.cid);
            return Err(EIO);
        }
        if !cqe.succeeded() {
            let (sct, sc) = cqe.status_code();
            dev_err!(dev, "admin command {:#04x} failed: SCT {:#x} SC {:#x}\n", sqe.opcode, sct, sc);
            return Err(EIO);
        }
        Ok(cqe)
    }
}
