// SPDX-License-Identifier: GPL-2.0-only

//! NVMe submission and completion entries (NVMe base spec 2.0, 4.2 and 4.6)
//! and the admin commands the module issues. Pure logic, KUnit-tested.

use kernel::transmute::{AsBytes, FromBytes};

/// A 64-byte submission queue entry.
#[repr(C)]
#[derive(
    Clone,
    Copy,
    Default,
    Debug,
    PartialEq,
    Eq,
    ::zerocopy_derive::FromBytes,
    ::zerocopy_derive::IntoBytes,
)]
pub(crate) struct Sqe {
    pub(crate) opcode: u8,
    pub(crate) flags: u8,
    pub(crate) cid: u16,
    pub(crate) nsid: u32,
    pub(crate) cdw2: u32,
    pub(crate) cdw3: u32,
    pub(crate) mptr: u64,
    pub(crate) prp1: u64,
    pub(crate) prp2: u64,
    pub(crate) cdw10: u32,
    pub(crate) cdw11: u32,
    pub(crate) cdw12: u32,
    pub(crate) cdw13: u32,
    pub(crate) cdw14: u32,
    pub(crate) cdw15: u32,
}

/// A 16-byte completion queue entry.
#[repr(C)]
#[derive(
    Clone, Copy, Default, Debug, ::zerocopy_derive::FromBytes, ::zerocopy_derive::IntoBytes,
)]
pub(crate) struct Cqe {
    pub(crate) result: u32,
    pub(crate) rsvd: u32,
    pub(crate) sq_head: u16,
    pub(crate) sq_id: u16,
    pub(crate) cid: u16,
    /// Bit 0: phase tag; bits 15:1: status field.
    pub(crate) status: u16,
}

// SAFETY: both are `repr(C)` integers with no implicit padding (64 and 16
// bytes, checked below); every bit pattern is valid.
unsafe impl FromBytes for Sqe {}
// SAFETY: see above.
unsafe impl AsBytes for Sqe {}
// SAFETY: see above.
unsafe impl FromBytes for Cqe {}
// SAFETY: see above.
unsafe impl AsBytes for Cqe {}

const _: () = assert!(core::mem::size_of::<Sqe>() == 64);
const _: () = assert!(core::mem::size_of::<Cqe>() == 16);

impl Cqe {
    pub(crate) fn phase(&self) -> bool {
        self.status & 1 == 1
    }

    /// Status code type and status code; (0, 0) is success.
    pub(crate) fn status_code(&self) -> (u8, u8) {
        (
            ((self.status >> 9) & 0x7) as u8,
            ((self.status >> 1) & 0xff) as u8,
        )
    }

    pub(crate) fn succeeded(&self) -> bool {
        self.status_code() == (0, 0)
    }
}

/// Admin command opcodes.
pub(crate) mod admin {
    pub(crate) const DELETE_IO_SQ: u8 = 0x00;
    pub(crate) const CREATE_IO_SQ: u8 = 0x01;
    pub(crate) const DELETE_IO_CQ: u8 = 0x04;
    pub(crate) const CREATE_IO_CQ: u8 = 0x05;
    pub(crate) const GET_LOG_PAGE: u8 = 0x02;
    pub(crate) const IDENTIFY: u8 = 0x06;
    pub(crate) const SET_FEATURES: u8 = 0x09;
    pub(crate) const ASYNC_EVENT_REQUEST: u8 = 0x0c;
}

/// Log page identifiers.
pub(crate) mod log_page {
    pub(crate) const CHANGED_NAMESPACES: u8 = 0x04;
}

/// Get Log Page `lid`, all namespaces, `bytes` (a multiple of 4, at most
/// 4 KiB: one PRP) into `buf`; reading it clears the event that named it.
pub(crate) fn get_log_page(lid: u8, bytes: u32, buf: u64) -> Sqe {
    let numd = bytes / 4 - 1;
    Sqe {
        opcode: admin::GET_LOG_PAGE,
        nsid: 0xffff_ffff,
        prp1: buf,
        cdw10: u32::from(lid) | ((numd & 0xffff) << 16),
        cdw11: numd >> 16,
        ..Default::default()
    }
}

/// Identify CNS values.
pub(crate) mod cns {
    pub(crate) const NAMESPACE: u32 = 0x00;
    pub(crate) const CONTROLLER: u32 = 0x01;
    pub(crate) const ACTIVE_NS_LIST: u32 = 0x02;
}

/// Feature ID: Number of Queues.
const FEAT_NUM_QUEUES: u32 = 0x07;

pub(crate) fn identify(cns: u32, nsid: u32, buf: u64) -> Sqe {
    Sqe {
        opcode: admin::IDENTIFY,
        nsid,
        prp1: buf,
        cdw10: cns,
        ..Default::default()
    }
}

/// Ask for `n` I/O SQs and `n` I/O CQs (both 0-based in the command).
pub(crate) fn set_num_queues(n: u16) -> Sqe {
    let n = u32::from(n.max(1) - 1);
    Sqe {
        opcode: admin::SET_FEATURES,
        cdw10: FEAT_NUM_QUEUES,
        cdw11: (n << 16) | n,
        ..Default::default()
    }
}

/// Feature ID: Asynchronous Event Configuration, and its Namespace
/// Attribute Notices bit (also that bit of Identify Controller's OAES).
const FEAT_ASYNC_EVENT_CONFIG: u32 = 0x0b;
pub(crate) const AEN_NS_ATTR: u32 = 1 << 8;

/// Have the controller report the asynchronous events in `events`.
pub(crate) fn set_async_events(events: u32) -> Sqe {
    Sqe {
        opcode: admin::SET_FEATURES,
        cdw10: FEAT_ASYNC_EVENT_CONFIG,
        cdw11: events,
        ..Default::default()
    }
}

/// Granted I/O queue pairs from a Number of Queues completion.
pub(crate) fn granted_queues(result: u32) -> u32 {
    (result & 0xffff).min(result >> 16) + 1
}

/// Physically contiguous CQ, interrupts off: the GPU or the CPU polls it.
/// `depth` is 2..=65536 (checked by the caller); the command holds it 0-based.
pub(crate) fn create_io_cq(qid: u16, depth: u32, base: u64) -> Sqe {
    Sqe {
        opcode: admin::CREATE_IO_CQ,
        prp1: base,
        cdw10: ((depth - 1) << 16) | u32::from(qid),
        cdw11: 1, // PC=1, IEN=0
        ..Default::default()
    }
}

/// Physically contiguous SQ bound to CQ `qid`, medium priority.
pub(crate) fn create_io_sq(qid: u16, depth: u32, base: u64) -> Sqe {
    Sqe {
        opcode: admin::CREATE_IO_SQ,
        prp1: base,
        cdw10: ((depth - 1) << 16) | u32::from(qid),
        cdw11: (u32::from(qid) << 16) | 1, // CQID, PC=1
        ..Default::default()
    }
}

pub(crate) fn delete_io_sq(qid: u16) -> Sqe {
    Sqe {
        opcode: admin::DELETE_IO_SQ,
        cdw10: u32::from(qid),
        ..Default::default()
    }
}

pub(crate) fn delete_io_cq(qid: u16) -> Sqe {
    Sqe {
        opcode: admin::DELETE_IO_CQ,
        cdw10: u32::from(qid),
        ..Default::default()
    }
}

#[kernel::prelude::kunit_tests(gpunvme_command)]
mod tests {
    use super::*;

    #[test]
    fn create_queue_dwords() {
        let cq = create_io_cq(3, 64, 0x1000);
        assert_eq!(
            (cq.opcode, cq.cdw10, cq.cdw11, cq.prp1),
            (0x05, (63 << 16) | 3, 1, 0x1000)
        );
        let sq = create_io_sq(3, 64, 0x2000);
        assert_eq!(
            (sq.opcode, sq.cdw10, sq.cdw11),
            (0x01, (63 << 16) | 3, (3 << 16) | 1)
        );
        assert_eq!(delete_io_sq(3).cdw10, 3);
        assert_eq!(delete_io_cq(3).opcode, 0x04);
        assert_eq!(create_io_cq(1, 65536, 0).cdw10, 0xffff_0001);
    }

    #[test]
    fn log_page_dwords() {
        // 4 KiB of the changed namespace list: NUMDL 1023, all namespaces.
        let c = get_log_page(log_page::CHANGED_NAMESPACES, 4096, 0x3000);
        assert_eq!(
            (c.opcode, c.nsid, c.cdw10, c.cdw11, c.prp1),
            (0x02, 0xffff_ffff, (1023 << 16) | 0x04, 0, 0x3000)
        );
        // Retain Asynchronous Event (bit 15) is clear: reading clears it.
        assert_eq!(c.cdw10 & (1 << 15), 0);
    }

    #[test]
    fn number_of_queues() {
        assert_eq!(set_num_queues(64).cdw11, (63 << 16) | 63);
        assert_eq!(set_num_queues(0).cdw11, 0);
        let aec = set_async_events(AEN_NS_ATTR);
        assert_eq!((aec.opcode, aec.cdw10, aec.cdw11), (0x09, 0x0b, 0x100));
        // NSQA 7, NCQA 3 (0-based): 4 usable pairs.
        assert_eq!(granted_queues((3 << 16) | 7), 4);
    }

    #[test]
    fn completion_status() {
        let ok = Cqe {
            status: 1,
            ..Default::default()
        };
        assert!(ok.phase() && ok.succeeded());
        // SCT 0, SC 0x80 (LBA out of range), phase 0.
        let oor = Cqe {
            status: 0x80 << 1,
            ..Default::default()
        };
        assert!(!oor.phase());
        assert_eq!(oor.status_code(), (0, 0x80));
        // SCT 1 (command specific), SC 0x01 (invalid queue identifier), DNR.
        let bad_q = Cqe {
            status: (1 << 15) | (1 << 9) | (1 << 1),
            ..Default::default()
        };
        assert_eq!(bad_q.status_code(), (1, 1));
    }
}
