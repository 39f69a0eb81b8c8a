// SPDX-License-Identifier: GPL-2.0

//! NVMe controller registers (NVMe base specification 2.0, section 3.1):
//! offsets and the decoding of CAP and VS. Pure logic, KUnit-tested.

/// Controller Capabilities, 64-bit.
pub(crate) const CAP: usize = 0x00;
/// Version, 32-bit.
pub(crate) const VS: usize = 0x08;
/// Controller Configuration, 32-bit.
pub(crate) const CC: usize = 0x14;
/// Controller Status, 32-bit.
pub(crate) const CSTS: usize = 0x1c;
/// Admin Queue Attributes, 32-bit.
pub(crate) const AQA: usize = 0x24;
/// Admin SQ base address, 64-bit (written as two 32-bit halves).
pub(crate) const ASQ: usize = 0x28;
/// Admin CQ base address, 64-bit.
pub(crate) const ACQ: usize = 0x30;
/// The first doorbell (admin SQ tail); doorbells follow at `4 << CAP.DSTRD`.
pub(crate) const DOORBELL_BASE: usize = 0x1000;

/// CC.EN.
pub(crate) const CC_ENABLE: u32 = 1 << 0;
/// CC.SHN (bits 15:14) and its normal-shutdown value.
pub(crate) const CC_SHN_MASK: u32 = 3 << 14;
pub(crate) const CC_SHN_NORMAL: u32 = 1 << 14;
/// CSTS.SHST (bits 3:2) and its "shutdown complete" value.
pub(crate) const CSTS_SHST_MASK: u32 = 3 << 2;
pub(crate) const CSTS_SHST_COMPLETE: u32 = 2 << 2;
/// CSTS.RDY.
pub(crate) const CSTS_READY: u32 = 1 << 0;
/// CSTS.CFS: controller fatal status.
pub(crate) const CSTS_FATAL: u32 = 1 << 1;

/// Memory page size used with the controller (CC.MPS = 0).
pub(crate) const PAGE_SIZE: usize = 4096;

/// CC value that enables the controller: NVM command set, 4 KiB pages,
/// round-robin arbitration, 64-byte SQEs and 16-byte CQEs.
pub(crate) const fn cc_enable() -> u32 {
    (6 << 16) | (4 << 20) | CC_ENABLE
}

/// AQA for admin queues of `depth` entries (both 0-based).
pub(crate) const fn aqa(depth: u16) -> u32 {
    let d = depth as u32 - 1;
    (d << 16) | d
}

/// Decoded CAP register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cap(pub(crate) u64);

impl Cap {
    fn bits(self, lo: u32, width: u32) -> u64 {
        (self.0 >> lo) & ((1u64 << width) - 1)
    }

    /// Maximum queue entries supported (MQES is 0-based).
    pub(crate) fn max_queue_entries(self) -> u32 {
        self.bits(0, 16) as u32 + 1
    }

    /// Worst-case time to become ready (CAP.TO, in units of 500 ms).
    pub(crate) fn ready_timeout_ms(self) -> u32 {
        self.bits(24, 8) as u32 * 500
    }

    /// Bytes between consecutive doorbell registers.
    pub(crate) fn doorbell_stride(self) -> u32 {
        4u32 << self.bits(32, 4)
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
        1u64 << (12 + self.bits(48, 4))
    }

    /// Whether the NVM command set is supported (CAP.CSS bit 0).
    pub(crate) fn supports_nvm_command_set(self) -> bool {
        self.bits(37, 1) == 1
    }
}

/// Decoded VS register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Version(pub(crate) u32);

impl Version {
    pub(crate) fn major(self) -> u32 {
        self.0 >> 16
    }
    pub(crate) fn minor(self) -> u32 {
        (self.0 >> 8) & 0xff
    }
    pub(crate) fn tertiary(self) -> u32 {
        self.0 & 0xff
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
        assert_eq!(cc_enable(), 0x0046_0001);
        assert_eq!(aqa(32), 0x001f_001f);
    }

    #[test]
    fn version_fields() {
        let vs = Version(0x0001_0400);
        assert_eq!((vs.major(), vs.minor(), vs.tertiary()), (1, 4, 0));
        let vs = Version(0x0002_0103);
        assert_eq!((vs.major(), vs.minor(), vs.tertiary()), (2, 1, 3));
    }
}
