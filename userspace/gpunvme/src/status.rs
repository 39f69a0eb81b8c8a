// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! NVMe completion status (CQE DW3 bits 31:17): SCT, SC, CRD, More, DNR.

use std::fmt;

/// The status field of a completion queue entry, without the phase tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// Status Code Type (0 generic, 1 command specific, 2 media and data
    /// integrity, 3 path related, 7 vendor specific).
    pub sct: u8,
    /// Status Code.
    pub sc: u8,
    /// Command Retry Delay index.
    pub crd: u8,
    /// More information in the Error Information log page.
    pub more: bool,
    /// Do Not Retry.
    pub dnr: bool,
}

impl Status {
    /// Decodes CQE DW3 bits 31:16 (the phase tag in bit 0 is ignored).
    pub fn from_cqe_field(f: u16) -> Self {
        Status {
            sc: ((f >> 1) & 0xff) as u8,
            sct: ((f >> 9) & 0x7) as u8,
            crd: ((f >> 12) & 0x3) as u8,
            more: f & (1 << 14) != 0,
            dnr: f & (1 << 15) != 0,
        }
    }

    /// The field this decodes from (phase tag 0).
    pub fn to_cqe_field(self) -> u16 {
        ((self.sc as u16) << 1)
            | (((self.sct & 7) as u16) << 9)
            | (((self.crd & 3) as u16) << 12)
            | ((self.more as u16) << 14)
            | ((self.dnr as u16) << 15)
    }

    /// Successful Completion.
    pub fn is_success(self) -> bool {
        self.sct == 0 && self.sc == 0
    }

    /// The spec's name of the status code, for the common ones.
    pub fn name(self) -> Option<&'static str> {
        Some(match (self.sct, self.sc) {
            (0, 0x00) => "Successful Completion",
            (0, 0x01) => "Invalid Command Opcode",
            (0, 0x02) => "Invalid Field in Command",
            (0, 0x03) => "Command ID Conflict",
            (0, 0x04) => "Data Transfer Error",
            (0, 0x05) => "Commands Aborted due to Power Loss Notification",
            (0, 0x06) => "Internal Error",
            (0, 0x07) => "Command Abort Requested",
            (0, 0x08) => "Command Aborted due to SQ Deletion",
            (0, 0x09) => "Command Aborted due to Failed Fused Command",
            (0, 0x0a) => "Command Aborted due to Missing Fused Command",
            (0, 0x0b) => "Invalid Namespace or Format",
            (0, 0x0c) => "Command Sequence Error",
            (0, 0x0d) => "Invalid SGL Segment Descriptor",
            (0, 0x0e) => "Invalid Number of SGL Descriptors",
            (0, 0x0f) => "Data SGL Length Invalid",
            (0, 0x12) => "Invalid Use of Controller Memory Buffer",
            (0, 0x13) => "PRP Offset Invalid",
            (0, 0x15) => "Operation Denied",
            (0, 0x1d) => "Sanitize In Progress",
            (0, 0x20) => "Namespace is Write Protected",
            (0, 0x21) => "Command Interrupted",
            (0, 0x22) => "Transient Transport Error",
            (0, 0x80) => "LBA Out of Range",
            (0, 0x81) => "Capacity Exceeded",
            (0, 0x82) => "Namespace Not Ready",
            (0, 0x83) => "Reservation Conflict",
            (0, 0x84) => "Format In Progress",
            (1, 0x00) => "Completion Queue Invalid",
            (1, 0x01) => "Invalid Queue Identifier",
            (1, 0x02) => "Invalid Queue Size",
            (1, 0x80) => "Conflicting Attributes",
            (1, 0x81) => "Invalid Protection Information",
            (1, 0x82) => "Attempted Write to Read Only Range",
            (2, 0x80) => "Write Fault",
            (2, 0x81) => "Unrecovered Read Error",
            (2, 0x82) => "End-to-end Guard Check Error",
            (2, 0x83) => "End-to-end Application Tag Check Error",
            (2, 0x84) => "End-to-end Reference Tag Check Error",
            (2, 0x85) => "Compare Failure",
            (2, 0x86) => "Access Denied",
            (2, 0x87) => "Deallocated or Unwritten Logical Block",
            (3, 0x00) => "Internal Path Error",
            (3, 0x01) => "Asymmetric Access Persistent Loss",
            (3, 0x02) => "Asymmetric Access Inaccessible",
            (3, 0x03) => "Asymmetric Access Transition",
            (3, 0x60) => "Controller Pathing Error",
            // What the kernel (and the passthrough relay) answers for a
            // command it could not deliver, or cancelled: no live path, a
            // fabrics controller reconnecting.
            (3, 0x70) => "Host Pathing Error",
            (3, 0x71) => "Command Aborted By Host",
            _ => return None,
        })
    }
}

impl fmt::Display for Status {
    /// e.g. `LBA Out of Range (SCT 0x0, SC 0x80, DNR)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name().unwrap_or("unknown status"))?;
        write!(f, " (SCT 0x{:x}, SC 0x{:02x}", self.sct, self.sc)?;
        if self.dnr {
            write!(f, ", DNR")?;
        }
        if self.more {
            write!(f, ", More")?;
        }
        write!(f, ")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_lba_out_of_range_with_dnr() {
        // SC 0x80 in bits 8:1, DNR bit 15, phase bit set.
        let s = Status::from_cqe_field((0x80 << 1) | (1 << 15) | 1);
        assert_eq!((s.sct, s.sc, s.dnr, s.more), (0, 0x80, true, false));
        assert!(!s.is_success());
        assert_eq!(s.to_string(), "LBA Out of Range (SCT 0x0, SC 0x80, DNR)");
        assert_eq!(s.to_cqe_field(), (0x80 << 1) | (1 << 15));
    }

    #[test]
    fn decodes_sct_and_success() {
        assert!(Status::from_cqe_field(1).is_success());
        let s = Status::from_cqe_field((2 << 9) | (0x81 << 1) | (1 << 14) | (3 << 12));
        assert_eq!((s.sct, s.sc, s.crd, s.more), (2, 0x81, 3, true));
        assert_eq!(s.name(), Some("Unrecovered Read Error"));
        let u = Status::from_cqe_field((7 << 9) | (0xc3 << 1));
        assert_eq!(u.to_string(), "unknown status (SCT 0x7, SC 0xc3)");
        for f in [0u16, 0x1fe, 0xfffe, 0x8100] {
            assert_eq!(Status::from_cqe_field(f).to_cqe_field(), f & !1);
        }
    }
}
