// SPDX-License-Identifier: GPL-2.0-only

//! NVMe controller registers (NVMe base specification 2.0, section 3.1),
//! declared with the kernel's `register!` macro: offsets and field layouts
//! in one place, typed accessors instead of hand shifts. KUnit-tested.
//!
//! The 64-bit registers (CAP, ASQ, ACQ) are moved as two 32-bit halves, low
//! half first, as the spec allows (the BAR mapping only guarantees 32-bit
//! alignment); their types give the layout, `halves`/`from_halves` the
//! access.

use kernel::io::register;
use kernel::io::register::Register;

register! {
    /// Controller Capabilities.
    pub(crate) CAP(u64) @ 0x00 {
        /// Memory Page Size Minimum: 2 ^ (12 + MPSMIN) bytes.
        51:48 mpsmin;
        /// Command Sets Supported, bit 0: the NVM command set.
        37:37 css_nvm => bool;
        /// Doorbell Stride: 4 << DSTRD bytes between doorbells.
        35:32 dstrd;
        /// Timeout: worst-case time to become ready, in 500 ms units.
        31:24 to;
        /// Maximum Queue Entries Supported, 0-based.
        15:0 mqes;
    }

    /// Version.
    pub(crate) VS(u32) @ 0x08 {
        31:16 mjr;
        15:8 mnr;
        7:0 ter;
    }

    /// Controller Configuration.
    pub(crate) CC(u32) @ 0x14 {
        /// I/O CQ entry size, 2 ^ n bytes.
        23:20 iocqes;
        /// I/O SQ entry size, 2 ^ n bytes.
        19:16 iosqes;
        /// Shutdown Notification (01b: normal).
        15:14 shn;
        /// Arbitration Mechanism (0: round robin).
        13:11 ams;
        /// Memory Page Size: 2 ^ (12 + MPS) bytes.
        10:7 mps;
        /// I/O Command Set (0: NVM).
        6:4 css;
        /// Enable.
        0:0 en => bool;
    }

    /// Controller Status.
    pub(crate) CSTS(u32) @ 0x1c {
        /// Shutdown Status (10b: complete).
        3:2 shst;
        /// Controller Fatal Status.
        1:1 cfs => bool;
        /// Ready.
        0:0 rdy => bool;
    }

    /// Admin Queue Attributes: queue sizes, 0-based.
    pub(crate) AQA(u32) @ 0x24 {
        27:16 acqs;
        11:0 asqs;
    }

    /// Admin Submission Queue base address (4 KiB aligned).
    pub(crate) ASQ(u64) @ 0x28 {
        63:12 asqb;
    }

    /// Admin Completion Queue base address (4 KiB aligned).
    pub(crate) ACQ(u64) @ 0x30 {
        63:12 acqb;
    }
}

/// Offset of register `R` in BAR0.
pub(crate) const fn offset<R: Register>() -> usize {
    R::OFFSET
}

/// The first doorbell (admin SQ tail); doorbells follow at `4 << CAP.DSTRD`.
pub(crate) const DOORBELL_BASE: usize = 0x1000;

/// CC.SHN: normal shutdown.
pub(crate) const SHN_NORMAL: u32 = 0b01;
/// CSTS.SHST: shutdown processing complete.
pub(crate) const SHST_COMPLETE: u32 = 0b10;

/// Memory page size used with the controller (CC.MPS = 0).
pub(crate) const PAGE_SIZE: usize = 4096;

/// CC value that enables the controller: NVM command set, 4 KiB pages,
/// round-robin arbitration, 64-byte SQEs and 16-byte CQEs.
pub(crate) fn cc_enable() -> CC {
    CC::from_raw(0)
        .with_const_iocqes::<4>()
        .with_const_iosqes::<6>()
        .with_const_mps::<0>()
        .with_const_css::<0>()
        .with_en(true)
}

/// AQA for admin queues of `depth` entries (2..=4096).
pub(crate) fn aqa(depth: u16) -> Option<AQA> {
    let d = u32::from(depth).checked_sub(1)?;
    AQA::from_raw(0)
        .try_with_acqs(d)
        .ok()?
        .try_with_asqs(d)
        .ok()
}

/// A 64-bit register as (low, high) 32-bit halves, written low first.
pub(crate) fn halves(v: u64) -> (u32, u32) {
    (v as u32, (v >> 32) as u32)
}

/// Decoded CAP register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cap(pub(crate) u64);

impl Cap {
    /// CAP from its two halves, as read low first.
    pub(crate) fn from_halves(lo: u32, hi: u32) -> Self {
        Self(u64::from(lo) | (u64::from(hi) << 32))
    }

    fn reg(self) -> CAP {
        CAP::from_raw(self.0)
    }

    /// Maximum queue entries supported (MQES is 0-based).
    pub(crate) fn max_queue_entries(self) -> u32 {
        self.reg().mqes().get() as u32 + 1
    }

    /// Worst-case time to become ready (CAP.TO, in units of 500 ms).
    pub(crate) fn ready_timeout_ms(self) -> u32 {
        self.reg().to().get() as u32 * 500
    }

    /// Bytes between consecutive doorbell registers.
    pub(crate) fn doorbell_stride(self) -> u32 {
        4u32 << self.reg().dstrd().get()
    }

    /// Offset in BAR0 of the SQ tail doorbell of queue `qid`.
    pub(crate) fn sq_doorbell(self, qid: u16) -> usize {
        DOORBELL_BASE + (2 * qid as usize) * self.doorbell_stride() as usize
    }

    /// Offset in BAR0 of the CQ head doorbell of queue `qid`.
    pub(crate) fn cq_doorbell(self, qid: u16) -> usize {
        DOORBELL_BASE + (2 * qid as usize + 1) * self.doorbell_stride() as usize
    }

    /// Smallest memory page size the controller supports, in bytes.
    pub(crate) fn min_page_size(self) -> u64 {
        1u64 << (12 + self.reg().mpsmin().get())
    }

    /// Whether the NVM command set is supported (CAP.CSS bit 0).
    pub(crate) fn supports_nvm_command_set(self) -> bool {
        self.reg().css_nvm()
    }
}

/// Decoded VS register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Version(pub(crate) u32);

impl Version {
    fn reg(self) -> VS {
        VS::from_raw(self.0)
    }
    pub(crate) fn major(self) -> u32 {
        self.reg().mjr().get()
    }
    pub(crate) fn minor(self) -> u32 {
        self.reg().mnr().get()
    }
    pub(crate) fn tertiary(self) -> u32 {
        self.reg().ter().get()
    }
}

#[kernel::prelude::kunit_tests(gpunvme_regs)]
mod tests {
    use super::*;

    // CAP of QEMU's emulated controller (hw/nvme/ctrl.c): MQES 0x7ff, CQR,
    // TO 0xf, DSTRD 0, CSS NVM+I/O sets, MPSMAX 4.
    const QEMU_CAP: u64 = 0x0040_0030_0f01_07ff | (1 << 37);

    #[test]
    fn cap_fields() {
        let cap = Cap(QEMU_CAP);
        assert_eq!(cap.max_queue_entries(), 2048);
        assert_eq!(cap.ready_timeout_ms(), 7500);
        assert_eq!(cap.doorbell_stride(), 4);
        assert_eq!(cap.min_page_size(), 4096);
        assert!(cap.supports_nvm_command_set());
    }

    #[test]
    fn doorbell_offsets_follow_stride() {
        let cap = Cap(QEMU_CAP);
        assert_eq!(cap.sq_doorbell(0), 0x1000);
        assert_eq!(cap.cq_doorbell(0), 0x1004);
        assert_eq!(cap.sq_doorbell(3), 0x1018);
        // DSTRD = 2: 16-byte stride.
        let wide = Cap(2u64 << 32);
        assert_eq!(wide.doorbell_stride(), 16);
        assert_eq!(wide.cq_doorbell(1), 0x1000 + 3 * 16);
        assert_eq!(wide.max_queue_entries(), 1);
    }

    #[test]
    fn enable_and_admin_attributes() {
        assert_eq!(cc_enable().into_raw(), 0x0046_0001);
        assert_eq!(aqa(32).map(AQA::into_raw), Some(0x001f_001f));
        assert_eq!(aqa(0), None);
        assert_eq!(aqa(4096).map(AQA::into_raw), Some(0x0fff_0fff));
        // CC.SHN and CSTS.SHST where the spec puts them.
        assert_eq!(
            CC::from_raw(0)
                .try_with_shn(SHN_NORMAL)
                .ok()
                .map(CC::into_raw),
            Some(1 << 14)
        );
        assert_eq!(CSTS::from_raw(2 << 2).shst().get(), SHST_COMPLETE);
        assert!(CSTS::from_raw(0b11).cfs() && CSTS::from_raw(0b01).rdy());
    }

    #[test]
    fn register_offsets_are_the_specs() {
        assert_eq!(
            [
                offset::<CAP>(),
                offset::<VS>(),
                offset::<CC>(),
                offset::<CSTS>()
            ],
            [0x00, 0x08, 0x14, 0x1c]
        );
        assert_eq!(
            [offset::<AQA>(), offset::<ASQ>(), offset::<ACQ>()],
            [0x24, 0x28, 0x30]
        );
    }

    #[test]
    fn version_fields() {
        let vs = Version(0x0001_0400);
        assert_eq!((vs.major(), vs.minor(), vs.tertiary()), (1, 4, 0));
        let vs = Version(0x0002_0103);
        assert_eq!((vs.major(), vs.minor(), vs.tertiary()), (2, 1, 3));
    }
}
