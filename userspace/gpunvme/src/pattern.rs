// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Deterministic disk contents from (seed, byte offset), so anything
//! written by `gpunvme write --pattern SEED` or by the GPU example kernels
//! (`gpunvme gpu-run --kernel write --pattern SEED`) can be checked later,
//! by either of them or by anyone.
//!
//! The pattern is the GPU examples' (`pattern(seed, off)` in
//! `kernels/examples/example.h`): the little-endian 64-bit word at byte
//! offset `off` of the namespace (a multiple of 8) is the SplitMix64
//! finalizer of `seed + (off / 8) * 0x9E37_79B9_7F4A_7C15`. It depends on
//! the byte offset only, not on the LBA size: LBA 1 of a 4096-byte format
//! holds what LBAs 8..16 of a 512-byte format hold. The finalizer is a
//! bijection, so a word read from the wrong place names where it belongs
//! ([`origin`]).

/// The golden-ratio increment of SplitMix64.
pub const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;
const M1: u64 = 0xBF58_476D_1CE4_E5B9;
const M2: u64 = 0x94D0_49BB_1331_11EB;

/// The inverse of an odd `a` modulo 2^64 (Newton's iteration).
const fn inverse(a: u64) -> u64 {
    let mut x = a; // right to 3 bits: a * a = 1 mod 8
    let mut i = 0;
    while i < 5 {
        x = x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)));
        i += 1;
    }
    x
}
const GOLDEN_INV: u64 = inverse(GOLDEN);
const M1_INV: u64 = inverse(M1);
const M2_INV: u64 = inverse(M2);

/// The pattern's 64-bit word at byte offset `off` (rounded down to 8).
pub fn word(seed: u64, off: u64) -> u64 {
    let mut z = seed.wrapping_add((off >> 3).wrapping_mul(GOLDEN));
    z = (z ^ (z >> 30)).wrapping_mul(M1);
    z = (z ^ (z >> 27)).wrapping_mul(M2);
    z ^ (z >> 31)
}

/// The byte offset whose word of `seed`'s pattern `w` is, if it is one
/// inside the first 2^53 bytes (else: not this seed's pattern).
pub fn origin(seed: u64, w: u64) -> Option<u64> {
    let mut z = w ^ (w >> 31) ^ (w >> 62);
    z = z.wrapping_mul(M2_INV);
    z = z ^ (z >> 27) ^ (z >> 54);
    z = z.wrapping_mul(M1_INV);
    z = z ^ (z >> 30) ^ (z >> 60);
    let idx = z.wrapping_sub(seed).wrapping_mul(GOLDEN_INV);
    (idx < 1 << 50).then_some(idx << 3)
}

/// Fills `buf` with the pattern's bytes from byte offset `off` (a
/// multiple of 8) on; a last partial word is truncated.
pub fn fill_at(seed: u64, off: u64, buf: &mut [u8]) {
    debug_assert!(off % 8 == 0);
    for (i, chunk) in buf.chunks_mut(8).enumerate() {
        let v = word(seed, off + 8 * i as u64).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// Fills `block` (one LBA of `block.len()` bytes) with the pattern of `lba`.
pub fn fill_block(seed: u64, lba: u64, block: &mut [u8]) {
    fill_at(seed, lba * block.len() as u64, block);
}

/// Fills `buf` (a multiple of `lba_size`) with consecutive blocks from
/// `first_lba`.
pub fn fill(seed: u64, first_lba: u64, lba_size: usize, buf: &mut [u8]) {
    assert!(lba_size > 0 && buf.len() % lba_size == 0);
    fill_at(seed, first_lba * lba_size as u64, buf);
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
    /// Where the 64-bit word holding the first bad byte belongs, if it is
    /// a word of this seed's pattern: the namespace byte offset it was
    /// written for (a misplaced block names its home).
    pub found_offset: Option<u64>,
    /// Bytes per LBA, to name the LBA of `found_offset`.
    pub lba_size: usize,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "LBA {} byte {}: expected 0x{:02x}, got 0x{:02x} ({} bad byte(s) in the block; ",
            self.lba, self.offset, self.expected, self.got, self.bad_bytes
        )?;
        match self.found_offset {
            Some(o) => write!(
                f,
                "the word read belongs to LBA {} byte {} of this pattern)",
                o / self.lba_size as u64,
                o % self.lba_size as u64
            ),
            None => write!(f, "the word read is not this seed's pattern)"),
        }
    }
}

/// Checks `data` (a multiple of `lba_size`) against the pattern.
pub fn first_mismatch(seed: u64, first_lba: u64, lba_size: usize, data: &[u8]) -> Option<Mismatch> {
    let mut want = vec![0u8; lba_size];
    for (i, b) in data.chunks(lba_size).enumerate() {
        let lba = first_lba + i as u64;
        fill_at(seed, lba * lba_size as u64, &mut want[..b.len()]);
        if let Some(off) = b.iter().zip(&want).position(|(g, w)| g != w) {
            let w = off & !7;
            let found = b
                .get(w..w + 8)
                .map(|s| u64::from_le_bytes(s.try_into().unwrap()))
                .and_then(|v| origin(seed, v))
                .map(|o| o + (off - w) as u64);
            return Some(Mismatch {
                lba,
                offset: off,
                expected: want[off],
                got: b[off],
                bad_bytes: b.iter().zip(&want).filter(|(g, w)| g != w).count(),
                found_offset: found,
                lba_size,
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pattern()` of kernels/examples/example.h, as written there.
    fn example_h(seed: u64, off: u64) -> u64 {
        let mut z = seed.wrapping_add((off >> 3).wrapping_mul(0x9e3779b97f4a7c15));
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    }

    #[test]
    fn deterministic_and_the_gpu_examples_words() {
        let mut a = vec![0u8; 4096];
        let mut b = vec![0u8; 4096];
        fill(7, 100, 512, &mut a);
        fill(7, 100, 512, &mut b);
        assert_eq!(a, b);
        for (j, w) in a.chunks(8).enumerate() {
            let off = 100 * 512 + 8 * j as u64;
            assert_eq!(u64::from_le_bytes(w.try_into().unwrap()), example_h(7, off));
        }
        // The byte offset decides, not the LBA size.
        let mut big = vec![0u8; 4096];
        fill_block(7, 1, &mut big);
        let mut small = vec![0u8; 4096];
        fill(7, 8, 512, &mut small);
        assert_eq!(big, small);
        fill(8, 100, 512, &mut b);
        assert_ne!(a, b);
        // Golden value: the format must not change under stored data.
        assert_eq!(word(1, 0), 0x5692_161d_100b_05e5, "{:x}", word(1, 0));
    }

    #[test]
    fn inverses_and_origin() {
        for m in [GOLDEN, M1, M2] {
            assert_eq!(m.wrapping_mul(inverse(m)), 1);
        }
        for (seed, off) in [(0, 0), (7, 4096), (u64::MAX, 1 << 40), (42, 8 * 12345)] {
            assert_eq!(origin(seed, word(seed, off)), Some(off));
        }
        assert_eq!(origin(7, 0x0123_4567_89ab_cdef), None);
    }

    #[test]
    fn reports_the_first_mismatch() {
        let mut a = vec![0u8; 2048];
        fill(1, 0, 512, &mut a);
        assert!(first_mismatch(1, 0, 512, &a).is_none());
        a[512 + 40] ^= 0xff;
        a[512 + 41] ^= 0x01;
        let m = first_mismatch(1, 0, 512, &a).unwrap();
        assert_eq!(
            (m.lba, m.offset, m.bad_bytes, m.found_offset),
            (1, 40, 2, None)
        );
        assert_eq!(m.got, m.expected ^ 0xff);
        assert!(m.to_string().starts_with("LBA 1 byte 40"), "{m}");
        assert!(first_mismatch(2, 0, 512, &a).unwrap().lba == 0);
        // A block written to the wrong LBA names the LBA it was meant for.
        let mut c = vec![0u8; 1024];
        fill(1, 5, 512, &mut c[..512]);
        fill(1, 1, 512, &mut c[512..]);
        let m = first_mismatch(1, 0, 512, &c).unwrap();
        assert_eq!((m.lba, m.offset, m.found_offset), (0, 0, Some(5 * 512)));
        assert!(m.to_string().contains("belongs to LBA 5 byte 0"), "{m}");
    }
}
