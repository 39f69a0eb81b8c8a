// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Decoding of the NVMe controller registers the module reports raw
//! (NVM Express Base Specification 2.0, section 3.1.4: CAP and VS).

use serde::Serialize;

/// Bits `hi..=lo` of `v`.
const fn bits(v: u64, hi: u32, lo: u32) -> u64 {
    (v >> lo) & ((1u64 << (hi - lo + 1)) - 1)
}

/// The Controller Capabilities register (CAP, offset 0x0), decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Cap {
    /// The raw register.
    pub raw: u64,
    /// Maximum Queue Entries Supported, 0's based (bits 15:0).
    pub mqes: u16,
    /// Contiguous Queues Required (bit 16).
    pub cqr: bool,
    /// Arbitration Mechanism Supported (bits 18:17): bit 0 weighted round
    /// robin with urgent, bit 1 vendor specific.
    pub ams: u8,
    /// Timeout (bits 31:24), in 500 ms units.
    pub to: u8,
    /// Doorbell Stride (bits 35:32): doorbells are `4 << dstrd` bytes apart.
    pub dstrd: u8,
    /// NVM Subsystem Reset Supported (bit 36).
    pub nssrs: bool,
    /// Command Sets Supported (bits 44:37): bit 0 NVM, bit 6 I/O command
    /// sets, bit 7 admin only.
    pub css: u8,
    /// Boot Partition Support (bit 45).
    pub bps: bool,
    /// Memory Page Size Minimum (bits 51:48): `2 ^ (12 + mpsmin)` bytes.
    pub mpsmin: u8,
    /// Memory Page Size Maximum (bits 55:52): `2 ^ (12 + mpsmax)` bytes.
    pub mpsmax: u8,
    /// Persistent Memory Region Supported (bit 56).
    pub pmrs: bool,
    /// Controller Memory Buffer Supported (bit 57).
    pub cmbs: bool,
}

impl Cap {
    /// Decodes a raw CAP value.
    pub const fn from_raw(raw: u64) -> Self {
        Cap {
            raw,
            mqes: bits(raw, 15, 0) as u16,
            cqr: bits(raw, 16, 16) != 0,
            ams: bits(raw, 18, 17) as u8,
            to: bits(raw, 31, 24) as u8,
            dstrd: bits(raw, 35, 32) as u8,
            nssrs: bits(raw, 36, 36) != 0,
            css: bits(raw, 44, 37) as u8,
            bps: bits(raw, 45, 45) != 0,
            mpsmin: bits(raw, 51, 48) as u8,
            mpsmax: bits(raw, 55, 52) as u8,
            pmrs: bits(raw, 56, 56) != 0,
            cmbs: bits(raw, 57, 57) != 0,
        }
    }

    /// The largest queue depth allowed (MQES + 1).
    pub const fn max_queue_entries(&self) -> u32 {
        self.mqes as u32 + 1
    }

    /// Bytes between consecutive doorbell registers.
    pub const fn doorbell_stride(&self) -> u32 {
        4u32 << self.dstrd
    }

    /// Worst-case time for CSTS.RDY to follow CC.EN, in milliseconds.
    pub const fn ready_timeout_ms(&self) -> u32 {
        self.to as u32 * 500
    }

    /// Smallest memory page size the controller supports, in bytes.
    pub const fn min_page_size(&self) -> u64 {
        1u64 << (12 + self.mpsmin as u32)
    }

    /// Largest memory page size the controller supports, in bytes.
    pub const fn max_page_size(&self) -> u64 {
        1u64 << (12 + self.mpsmax as u32)
    }

    /// Whether the NVM command set is supported (CSS bit 0).
    pub const fn supports_nvm_command_set(&self) -> bool {
        self.css & 1 != 0
    }

    /// Names of the command sets in CSS.
    pub fn command_sets(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.css & 1 != 0 {
            v.push("NVM");
        }
        if self.css & (1 << 6) != 0 {
            v.push("I/O command sets");
        }
        if self.css & (1 << 7) != 0 {
            v.push("admin only");
        }
        v
    }
}

/// The Version register (VS, offset 0x8), decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Version {
    /// The raw register.
    pub raw: u32,
    /// Major version (bits 31:16).
    pub major: u16,
    /// Minor version (bits 15:8).
    pub minor: u8,
    /// Tertiary version (bits 7:0).
    pub tertiary: u8,
}

impl Version {
    /// Decodes a raw VS value.
    pub const fn from_raw(raw: u32) -> Self {
        Version {
            raw,
            major: (raw >> 16) as u16,
            minor: (raw >> 8) as u8,
            tertiary: raw as u8,
        }
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.tertiary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// QEMU 7.2's emulated NVMe controller: MQES 2047, CQR, TO 15,
    /// DSTRD 0, NSSRS, CSS NVM + I/O command sets, MPSMAX 4, CMBS.
    const QEMU_CAP: u64 = (2047)
        | (1 << 16)
        | (0xf << 24)
        | (1 << 36)
        | ((0b0100_0001) << 37)
        | (4 << 52)
        | (1 << 57);

    #[test]
    fn decodes_qemu_cap() {
        let c = Cap::from_raw(QEMU_CAP);
        assert_eq!(c.mqes, 2047);
        assert_eq!(c.max_queue_entries(), 2048);
        assert!(c.cqr);
        assert_eq!(c.ams, 0);
        assert_eq!(c.to, 15);
        assert_eq!(c.ready_timeout_ms(), 7500);
        assert_eq!(c.dstrd, 0);
        assert_eq!(c.doorbell_stride(), 4);
        assert!(c.nssrs);
        assert_eq!(c.css, 0x41);
        assert_eq!(c.command_sets(), vec!["NVM", "I/O command sets"]);
        assert!(c.supports_nvm_command_set());
        assert_eq!(c.mpsmin, 0);
        assert_eq!(c.min_page_size(), 4096);
        assert_eq!(c.mpsmax, 4);
        assert_eq!(c.max_page_size(), 65536);
        assert!(c.cmbs);
        assert!(!c.pmrs);
        assert!(!c.bps);
    }

    #[test]
    fn every_field_is_isolated() {
        // Each field set to all-ones alone, nothing else must light up.
        let all = Cap::from_raw(u64::MAX);
        assert_eq!(all.mqes, u16::MAX);
        assert_eq!(all.ams, 3);
        assert_eq!(all.to, 0xff);
        assert_eq!(all.dstrd, 0xf);
        assert_eq!(all.css, 0xff);
        assert_eq!(all.mpsmin, 0xf);
        assert_eq!(all.mpsmax, 0xf);
        assert!(all.cqr && all.nssrs && all.cmbs && all.pmrs && all.bps);

        let c = Cap::from_raw(0b11 << 17);
        assert_eq!((c.ams, c.mqes, c.cqr, c.to), (3, 0, false, 0));
        let c = Cap::from_raw(0xf << 32);
        assert_eq!((c.dstrd, c.nssrs, c.to), (15, false, 0));
        assert_eq!(c.doorbell_stride(), 4 << 15);
        let c = Cap::from_raw(0xf << 48);
        assert_eq!((c.mpsmin, c.mpsmax, c.css), (15, 0, 0));
        let c = Cap::from_raw(1 << 57);
        assert!(c.cmbs && !c.pmrs);
        let c = Cap::from_raw(0xff << 37);
        assert_eq!(c.css, 0xff);
        assert!(!c.nssrs && !c.bps);
    }

    #[test]
    fn decodes_version() {
        let v = Version::from_raw(0x0001_0400);
        assert_eq!((v.major, v.minor, v.tertiary), (1, 4, 0));
        assert_eq!(v.to_string(), "1.4.0");
        let v = Version::from_raw(0x0002_0001);
        assert_eq!(v.to_string(), "2.0.1");
    }
}
