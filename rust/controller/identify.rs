// SPDX-License-Identifier: GPL-2.0-only

//! Decoding of Identify data structures (NVMe base spec 2.0, 5.17.2).
//! Pure logic over 4 KiB buffers, KUnit-tested.

use crate::controller::geometry::NsState;

pub(crate) const IDENTIFY_LEN: usize = 4096;

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from(le32(b, at)) | (u64::from(le32(b, at + 4)) << 32)
}

/// Copy a space-padded ASCII field into a NUL-terminated one, trimmed.
pub(crate) fn ascii_field(src: &[u8], dst: &mut [u8]) {
    let end = src
        .iter()
        .rposition(|&c| c != b' ' && c != 0)
        .map_or(0, |i| i + 1);
    let n = end.min(dst.len() - 1);
    dst[..n].copy_from_slice(&src[..n]);
    dst[n..].fill(0);
}

/// The parts of Identify Controller the module uses.
pub(crate) struct ControllerId<'a> {
    pub(crate) serial: &'a [u8],
    pub(crate) model: &'a [u8],
    pub(crate) firmware: &'a [u8],
    /// MDTS: max transfer is (memory page size << mdts); 0 = no limit.
    pub(crate) mdts: u8,
    /// Number of namespaces (largest NSID).
    pub(crate) nn: u32,
    /// Optional Asynchronous Events Supported.
    pub(crate) oaes: u32,
}

pub(crate) fn controller(b: &[u8]) -> ControllerId<'_> {
    ControllerId {
        serial: &b[4..24],
        model: &b[24..64],
        firmware: &b[64..72],
        mdts: b[77],
        nn: le32(b, 516),
        oaes: le32(b, 92),
    }
}

/// Bytes of the largest single transfer, for a controller page of `page`.
pub(crate) fn mdts_bytes(mdts: u8, page: usize) -> u32 {
    if mdts == 0 {
        return 0;
    }
    (page as u64)
        .checked_shl(u32::from(mdts))
        .map_or(u32::MAX, |v| v.min(u64::from(u32::MAX)) as u32)
}

/// Size and format of a namespace.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Namespace {
    pub(crate) capacity_lbas: u64,
    pub(crate) lba_size: u32,
}

/// `None` for an inactive namespace (all-zero data) or an unusable format:
/// an LBA size outside 512 B..=64 KiB, or metadata (LBAF.MS), which the
/// module does not carry (no metadata pointers, no extended LBAs).
pub(crate) fn namespace(b: &[u8]) -> Option<Namespace> {
    let nsze = le64(b, 0);
    let flbas = b[26];
    let nlbaf = b[25] as usize + 1;
    // FLBAS bits 3:0 are the format index, bits 6:5 its upper bits.
    let idx = (flbas & 0xf) as usize | (((flbas >> 5) & 0x3) as usize) << 4;
    if nsze == 0 || idx >= nlbaf.max(1) || idx >= 64 {
        return None;
    }
    let lbads = b[128 + 4 * idx + 2];
    let ms = u16::from_le_bytes([b[128 + 4 * idx], b[128 + 4 * idx + 1]]);
    if !(9..=16).contains(&lbads) || ms != 0 {
        return None;
    }
    Some(Namespace {
        capacity_lbas: nsze,
        lba_size: 1 << lbads,
    })
}

/// Active namespace IDs from a CNS 02h list: ascending, zero-terminated.
pub(crate) fn active_nsids(b: &[u8]) -> impl Iterator<Item = u32> + '_ {
    (0..IDENTIFY_LEN / 4)
        .map(move |i| le32(b, i * 4))
        .take_while(|&id| id != 0)
}

/// Why a controller identified again (`now`) cannot go on serving its
/// files: a smaller transfer limit or fewer I/O queues than at bind
/// (`then`), which pairs and PRP lists were sized by. `None` if it can.
/// Namespace sizes and formats are not compared: they are taken as they
/// are now (`state_in`, into `Geometry`).
pub(crate) fn shrank_since_bind(
    then: &crate::uapi::Info,
    now: &crate::uapi::Info,
) -> Option<&'static str> {
    if now.mdts_bytes < then.mdts_bytes {
        return Some("its maximum transfer size shrank");
    }
    if now.io_queues < then.io_queues {
        return Some("fewer I/O queues were granted");
    }
    None
}

/// What namespace `nsid` is in `now`'s usable namespaces: gone, detached
/// or unusable (not listed) is refused.
pub(crate) fn state_in(now: &crate::uapi::Info, nsid: u32) -> NsState {
    now.ns[..now.num_namespaces as usize]
        .iter()
        .find(|n| n.nsid == nsid)
        .map_or(NsState::Refused, |n| NsState::Usable {
            lba_shift: n.lba_size.trailing_zeros(),
            capacity: n.capacity_lbas,
        })
}

#[kernel::prelude::kunit_tests(gpunvme_identify)]
mod tests {
    use super::*;

    #[test]
    fn changes_since_bind() {
        let mut ns = [crate::uapi::NsInfo::default(); crate::uapi::MAX_NS];
        ns[0] = crate::uapi::NsInfo {
            nsid: 1,
            lba_size: 512,
            capacity_lbas: 1000,
        };
        ns[1] = crate::uapi::NsInfo {
            nsid: 2,
            lba_size: 4096,
            capacity_lbas: 50,
        };
        let then = crate::uapi::Info {
            num_namespaces: 2,
            ns,
            mdts_bytes: 1 << 20,
            io_queues: 8,
            ..Default::default()
        };
        let mut now = then;
        assert_eq!(shrank_since_bind(&then, &now), None);
        now.io_queues = 4;
        assert!(shrank_since_bind(&then, &now).is_some());
        now = then;
        now.mdts_bytes = 1 << 19;
        assert!(shrank_since_bind(&then, &now).is_some());
        // More is not a change the validator must fear.
        now = then;
        now.io_queues = 16;
        now.mdts_bytes = 1 << 21;
        assert_eq!(shrank_since_bind(&then, &now), None);
        // Reformatted, resized, gone: each namespace as it is now.
        now = then;
        now.ns[1].lba_size = 512;
        now.ns[1].capacity_lbas = 400;
        assert_eq!(
            state_in(&now, 2),
            NsState::Usable {
                lba_shift: 9,
                capacity: 400
            }
        );
        now.num_namespaces = 1;
        assert_eq!(state_in(&now, 2), NsState::Refused);
        assert_eq!(
            state_in(&now, 1),
            NsState::Usable {
                lba_shift: 9,
                capacity: 1000
            }
        );
        assert_eq!(state_in(&now, 3), NsState::Refused);
    }

    #[test]
    fn ascii_trimmed_and_terminated() {
        let mut out = [0xffu8; 8];
        ascii_field(b"QEMU  ", &mut out);
        assert_eq!(&out, b"QEMU\0\0\0\0");
        let mut short = [0u8; 4];
        ascii_field(b"ABCDEFG", &mut short);
        assert_eq!(&short, b"ABC\0");
    }

    #[test]
    fn namespace_format() {
        let mut b = [0u8; IDENTIFY_LEN];
        assert_eq!(namespace(&b), None);
        b[0..8].copy_from_slice(&131072u64.to_le_bytes());
        b[25] = 1; // two formats
        b[26] = 1; // using format 1
        b[128 + 2] = 9;
        b[132 + 2] = 12;
        assert_eq!(
            namespace(&b),
            Some(Namespace {
                capacity_lbas: 131072,
                lba_size: 4096
            })
        );
        b[26] = 0;
        assert_eq!(namespace(&b).map(|n| n.lba_size), Some(512));
        // 8 bytes of metadata per block: refused, not silently mis-sized.
        b[128] = 8;
        assert_eq!(namespace(&b), None);
        b[128] = 0;
        b[26] = 5; // beyond NLBAF
        assert_eq!(namespace(&b), None);
    }

    #[test]
    fn controller_fields_and_mdts() {
        let mut b = [0u8; IDENTIFY_LEN];
        b[77] = 7;
        b[516..520].copy_from_slice(&2u32.to_le_bytes());
        b[92..96].copy_from_slice(&0x100u32.to_le_bytes());
        let c = controller(&b);
        assert_eq!((c.mdts, c.nn, c.oaes), (7, 2, 0x100));
        assert_eq!(mdts_bytes(7, 4096), 512 * 1024);
        assert_eq!(mdts_bytes(0, 4096), 0);
        assert_eq!(mdts_bytes(40, 4096), u32::MAX);
    }

    #[test]
    fn active_list() {
        let mut b = [0u8; IDENTIFY_LEN];
        b[0..4].copy_from_slice(&1u32.to_le_bytes());
        b[4..8].copy_from_slice(&3u32.to_le_bytes());
        let mut it = active_nsids(&b);
        assert_eq!((it.next(), it.next(), it.next()), (Some(1), Some(3), None));
    }
}
