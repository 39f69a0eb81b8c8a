//! Deterministic block contents from (seed, LBA), so any block written by
//! `gpunvme write --pattern SEED` can be checked later, by anyone.
//!
//! Block layout: bytes 0..8 the LBA (little endian), 8..16 the seed, the
//! rest a SplitMix64 stream seeded with `seed ^ (lba * 0x9E37_79B9_7F4A_7C15)`,
//! 8 bytes per step, little endian. A misplaced block is thereby
//! recognizable: its header names the LBA it was meant for.

/// Fills `block` with the pattern of `lba`.
pub fn fill_block(seed: u64, lba: u64, block: &mut [u8]) {
    let mut s = seed ^ lba.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut next = || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut head = [0u8; 16];
    head[..8].copy_from_slice(&lba.to_le_bytes());
    head[8..].copy_from_slice(&seed.to_le_bytes());
    let h = block.len().min(16);
    block[..h].copy_from_slice(&head[..h]);
    for chunk in block[h..].chunks_mut(8) {
        let v = next().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// Fills `buf` (a multiple of `lba_size`) with consecutive blocks from
/// `first_lba`.
pub fn fill(seed: u64, first_lba: u64, lba_size: usize, buf: &mut [u8]) {
    assert!(lba_size > 0 && buf.len() % lba_size == 0);
    for (i, b) in buf.chunks_mut(lba_size).enumerate() {
        fill_block(seed, first_lba + i as u64, b);
    }
}

/// The first byte that differs from the pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// LBA of the block holding it.
    pub lba: u64,
    /// Byte offset inside that block.
    pub offset: usize,
    /// What the pattern says.
    pub expected: u8,
    /// What was read.
    pub got: u8,
    /// Bad bytes in that block.
    pub bad_bytes: usize,
    /// The block's header (LBA, seed) as found, when it differs.
    pub header: (u64, u64),
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "LBA {} byte {}: expected 0x{:02x}, got 0x{:02x} ({} bad byte(s) in the block; its header says lba {} seed {})",
            self.lba, self.offset, self.expected, self.got, self.bad_bytes, self.header.0, self.header.1
        )
    }
}

/// Checks `data` (a multiple of `lba_size`) against the pattern.
pub fn first_mismatch(seed: u64, first_lba: u64, lba_size: usize, data: &[u8]) -> Option<Mismatch> {
    let mut want = vec![0u8; lba_size];
    for (i, b) in data.chunks(lba_size).enumerate() {
        let lba = first_lba + i as u64;
        fill_block(seed, lba, &mut want[..b.len()]);
        if let Some(off) = b.iter().zip(&want).position(|(g, w)| g != w) {
            let u = |r: std::ops::Range<usize>| {
                b.get(r)
                    .map_or(0, |s| u64::from_le_bytes(s.try_into().unwrap()))
            };
            return Some(Mismatch {
                lba,
                offset: off,
                expected: want[off],
                got: b[off],
                bad_bytes: b.iter().zip(&want).filter(|(g, w)| g != w).count(),
                header: (u(0..8), u(8..16)),
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_distinct() {
        let mut a = vec![0u8; 4096];
        let mut b = vec![0u8; 4096];
        fill(7, 100, 512, &mut a);
        fill(7, 100, 512, &mut b);
        assert_eq!(a, b);
        assert_eq!(&a[..8], &100u64.to_le_bytes());
        assert_eq!(&a[8..16], &7u64.to_le_bytes());
        assert_eq!(&a[512..520], &101u64.to_le_bytes());
        // Same LBA, any block size: the 512-byte block is a prefix.
        let mut big = vec![0u8; 4096];
        fill_block(7, 100, &mut big);
        assert_eq!(&big[..512], &a[..512]);
        fill(8, 100, 512, &mut b);
        assert_ne!(a[16..512], b[16..512]);
        assert_ne!(a[16..512], a[512 + 16..1024]);
        // Golden value: the format must not change under stored data.
        assert_eq!(
            &a[16..24],
            &[0x2e, 0xf8, 0xac, 0xe9, 0x6f, 0x4c, 0x83, 0x04][..],
            "{:02x?}",
            &a[16..24]
        );
    }

    #[test]
    fn reports_the_first_mismatch() {
        let mut a = vec![0u8; 2048];
        fill(1, 0, 512, &mut a);
        assert!(first_mismatch(1, 0, 512, &a).is_none());
        a[512 + 40] ^= 0xff;
        a[512 + 41] ^= 0x01;
        let m = first_mismatch(1, 0, 512, &a).unwrap();
        assert_eq!((m.lba, m.offset, m.bad_bytes, m.header), (1, 40, 2, (1, 1)));
        assert_eq!(m.got, m.expected ^ 0xff);
        assert!(m.to_string().starts_with("LBA 1 byte 40"), "{m}");
        assert!(first_mismatch(2, 0, 512, &a).unwrap().lba == 0);
    }
}
