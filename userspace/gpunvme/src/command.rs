// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! NVM command set submission entries (64 bytes) and completion entries
//! (16 bytes), byte-exact as NVMe 1.4 section 4.2/4.6 lays them out, and
//! the PRPs that say where a command's data is.
//!
//! PRP lists (transfers touching more than two memory pages) must be
//! where the controller, or in shared mode the module, reads them: a shared
//! pair's lists go in its PRP pool ([`crate::PrpPool::list_slot`]; the
//! module reads and checks them there and rejects a PRP2 elsewhere), a raw
//! pair's anywhere the controller can DMA from, e.g. a
//! [`crate::DmaBuffer`] ([`crate::DmaBuffer::list_pages`]). [`build_prps`]
//! writes them into either.

use std::marker::PhantomData;

use crate::status::Status;

/// Bytes of one submission queue entry.
pub const SQE_SIZE: usize = 64;
/// Bytes of one completion queue entry.
pub const CQE_SIZE: usize = 16;

/// NVM command set opcodes this crate builds.
pub mod opcode {
    /// Flush.
    pub const FLUSH: u8 = 0x00;
    /// Write.
    pub const WRITE: u8 = 0x01;
    /// Read.
    pub const READ: u8 = 0x02;
    /// Write Zeroes.
    pub const WRITE_ZEROES: u8 = 0x08;

    /// Name of an NVM I/O opcode, for messages.
    pub fn name(op: u8) -> &'static str {
        match op {
            FLUSH => "Flush",
            WRITE => "Write",
            READ => "Read",
            0x04 => "Write Uncorrectable",
            0x05 => "Compare",
            WRITE_ZEROES => "Write Zeroes",
            0x09 => "Dataset Management",
            _ => "command",
        }
    }
}

/// Where the data of a command is: PRP Entry 1 and 2 (SQE bytes 24 and 32).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Prp {
    /// PRP1: DMA address of the first byte (dword aligned).
    pub prp1: u64,
    /// PRP2: 0, the second page, or the DMA address of a PRP list.
    pub prp2: u64,
}

/// One submission queue entry as 16 little-endian dwords.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sqe {
    /// CDW0..CDW15 (CDW0: opcode 7:0, fuse 9:8, PSDT 15:14, CID 31:16;
    /// CDW1 NSID; CDW4-5 MPTR; CDW6-7 PRP1; CDW8-9 PRP2).
    pub dw: [u32; 16],
}

impl Sqe {
    /// An all-zero entry with `opcode` and `nsid`.
    pub fn new(opcode: u8, nsid: u32) -> Self {
        let mut dw = [0u32; 16];
        dw[0] = opcode as u32;
        dw[1] = nsid;
        Sqe { dw }
    }

    fn rw(opcode: u8, nsid: u32, slba: u64, nlb: u32, prp: Prp) -> Self {
        assert!(
            (1..=65536).contains(&nlb),
            "NVMe read/write moves 1..=65536 blocks, not {nlb}"
        );
        let mut s = Sqe::new(opcode, nsid);
        s.set_prp(prp);
        s.dw[10] = slba as u32;
        s.dw[11] = (slba >> 32) as u32;
        s.dw[12] = nlb - 1; // NLB is 0-based
        s
    }

    /// Read `nlb` (1-based count, 1..=65536) blocks at `slba`.
    pub fn read(nsid: u32, slba: u64, nlb: u32, prp: Prp) -> Self {
        Self::rw(opcode::READ, nsid, slba, nlb, prp)
    }

    /// Write `nlb` (1..=65536) blocks at `slba`.
    pub fn write(nsid: u32, slba: u64, nlb: u32, prp: Prp) -> Self {
        Self::rw(opcode::WRITE, nsid, slba, nlb, prp)
    }

    /// Write Zeroes of `nlb` (1..=65536) blocks at `slba`: no data pointer.
    pub fn write_zeroes(nsid: u32, slba: u64, nlb: u32) -> Self {
        Self::rw(opcode::WRITE_ZEROES, nsid, slba, nlb, Prp::default())
    }

    /// Flush of the namespace's volatile write cache.
    pub fn flush(nsid: u32) -> Self {
        Sqe::new(opcode::FLUSH, nsid)
    }

    /// Opcode (CDW0 7:0).
    pub fn opcode(&self) -> u8 {
        self.dw[0] as u8
    }

    /// Command identifier (CDW0 31:16, SQE bytes 2-3).
    pub fn cid(&self) -> u16 {
        (self.dw[0] >> 16) as u16
    }

    /// Sets the command identifier; [`crate::QueuePair`] does this on submit.
    pub fn set_cid(&mut self, cid: u16) {
        self.dw[0] = (self.dw[0] & 0xffff) | ((cid as u32) << 16);
    }

    /// Namespace ID.
    pub fn nsid(&self) -> u32 {
        self.dw[1]
    }

    /// Sets PRP1 and PRP2.
    pub fn set_prp(&mut self, p: Prp) {
        self.dw[6] = p.prp1 as u32;
        self.dw[7] = (p.prp1 >> 32) as u32;
        self.dw[8] = p.prp2 as u32;
        self.dw[9] = (p.prp2 >> 32) as u32;
    }

    /// Whether the controller moves no data for this entry: a Flush or
    /// Write Zeroes with no fuse or SGL bits, and PRP1, PRP2 and MPTR zero.
    /// What [`crate::QueuePair::submit_no_data`] accepts.
    ///
    /// ```
    /// use gpunvme::{Prp, Sqe};
    ///
    /// assert!(Sqe::flush(1).moves_no_data());
    /// assert!(Sqe::write_zeroes(1, 0, 8).moves_no_data());
    /// let read = Sqe::read(1, 0, 8, Prp { prp1: 0x1000, prp2: 0 });
    /// assert!(!read.moves_no_data());
    /// let mut flush = Sqe::flush(1);
    /// flush.set_prp(Prp { prp1: 0x1000, prp2: 0 });
    /// assert!(!flush.moves_no_data());
    /// ```
    pub fn moves_no_data(&self) -> bool {
        matches!(self.opcode(), opcode::FLUSH | opcode::WRITE_ZEROES)
            && self.dw[0] & 0xff00 == 0
            && self.dw[4..10].iter().all(|&d| d == 0)
    }

    /// PRP1 and PRP2.
    pub fn prp(&self) -> Prp {
        Prp {
            prp1: self.dw[6] as u64 | (self.dw[7] as u64) << 32,
            prp2: self.dw[8] as u64 | (self.dw[9] as u64) << 32,
        }
    }

    /// Starting LBA (CDW10-11) of a read/write/write zeroes.
    pub fn slba(&self) -> u64 {
        self.dw[10] as u64 | (self.dw[11] as u64) << 32
    }

    /// Number of blocks (1-based, from CDW12 15:0) of a read/write/write zeroes.
    pub fn nlb(&self) -> u32 {
        (self.dw[12] & 0xffff) + 1
    }

    /// The 64 bytes as the controller reads them.
    pub fn to_bytes(&self) -> [u8; SQE_SIZE] {
        let mut b = [0u8; SQE_SIZE];
        for (i, d) in self.dw.iter().enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&d.to_le_bytes());
        }
        b
    }

    /// One line for messages, e.g. `Read of 8 block(s) at LBA 16 (nsid 1)`.
    pub fn describe(&self) -> String {
        let op = self.opcode();
        match op {
            opcode::READ | opcode::WRITE | opcode::WRITE_ZEROES | 0x04 | 0x05 => format!(
                "{} of {} block(s) at LBA {} (nsid {})",
                opcode::name(op),
                self.nlb(),
                self.slba(),
                self.nsid()
            ),
            _ => format!(
                "{} (opcode 0x{op:02x}, nsid {})",
                opcode::name(op),
                self.nsid()
            ),
        }
    }
}

/// A decoded completion queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cqe {
    /// DW0, command specific.
    pub dw0: u32,
    /// SQ head pointer at completion time.
    pub sq_head: u16,
    /// SQ identifier.
    pub sq_id: u16,
    /// Command identifier.
    pub cid: u16,
    /// Phase tag.
    pub phase: bool,
    /// Status.
    pub status: Status,
}

impl Cqe {
    /// Decodes the four dwords of a CQE.
    pub fn from_dwords(dw: [u32; 4]) -> Self {
        Cqe {
            dw0: dw[0],
            sq_head: dw[2] as u16,
            sq_id: (dw[2] >> 16) as u16,
            cid: dw[3] as u16,
            phase: dw[3] & (1 << 16) != 0,
            status: Status::from_cqe_field((dw[3] >> 16) as u16),
        }
    }
}

/// PRP entries per 4 KiB list page.
pub const PRP_ENTRIES_PER_PAGE: usize = 4096 / 8;

/// Memory pages touched by `len` bytes starting `offset` bytes into a page.
pub fn pages_spanned(offset: usize, len: usize) -> usize {
    (offset % 4096 + len).div_ceil(4096)
}

/// PRP list pages needed for `len` bytes starting `offset` bytes into a
/// page: 0 when PRP1/PRP2 suffice, else one page per 511 entries (the
/// last entry of a full list page chains to the next), the last page
/// holding up to 512.
pub fn prp_list_pages(offset: usize, len: usize) -> usize {
    let n = pages_spanned(offset, len);
    if n <= 2 {
        return 0;
    }
    let entries = n - 1;
    if entries <= PRP_ENTRIES_PER_PAGE {
        1
    } else {
        (entries - 1).div_ceil(PRP_ENTRIES_PER_PAGE - 1)
    }
}

/// PRP1/PRP2 and the contents of each PRP list page, before they are
/// written to memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrpPlan {
    /// What goes into the SQE.
    pub prp: Prp,
    /// Entries of each list page, in `list_pages` order (a chained page's
    /// last entry is the next list page's address).
    pub lists: Vec<Vec<u64>>,
}

/// Builds the PRPs for `len` bytes (> 0) starting `offset` bytes into the
/// memory page whose DMA address is `pages[0]`; `pages` holds the DMA
/// address of every 4 KiB page of the transfer in order, `list_pages` the
/// DMA addresses of at least [`prp_list_pages`] pages for the lists.
pub fn prp_plan(
    pages: &[u64],
    offset: usize,
    len: usize,
    list_pages: &[u64],
) -> Result<PrpPlan, String> {
    if len == 0 {
        return Err("a PRP transfer needs at least one byte".into());
    }
    if offset >= 4096 || offset % 4 != 0 {
        return Err(format!(
            "PRP1 offset {offset} must be dword aligned and inside the first page"
        ));
    }
    let n = pages_spanned(offset, len);
    if pages.len() < n {
        return Err(format!(
            "{len} bytes at page offset {offset} span {n} pages, only {} given",
            pages.len()
        ));
    }
    if let Some(p) = pages[..n].iter().find(|p| *p % 4096 != 0) {
        return Err(format!("DMA address 0x{p:x} is not 4 KiB aligned"));
    }
    let need = prp_list_pages(offset, len);
    if list_pages.len() < need {
        return Err(format!(
            "{n} data pages need {need} PRP list page(s), {} given",
            list_pages.len()
        ));
    }
    let prp1 = pages[0] + offset as u64;
    let (prp2, lists) = match n {
        1 => (0, Vec::new()),
        2 => (pages[1], Vec::new()),
        _ => {
            let mut rest = &pages[1..n];
            let mut lists = Vec::with_capacity(need);
            for i in 0..need {
                if rest.len() <= PRP_ENTRIES_PER_PAGE {
                    lists.push(rest.to_vec());
                    rest = &[];
                } else {
                    let take = PRP_ENTRIES_PER_PAGE - 1;
                    let mut l = rest[..take].to_vec();
                    l.push(list_pages[i + 1]);
                    lists.push(l);
                    rest = &rest[take..];
                }
            }
            debug_assert!(rest.is_empty());
            (list_pages[0], lists)
        }
    };
    Ok(PrpPlan {
        prp: Prp { prp1, prp2 },
        lists,
    })
}

/// Memory where PRP lists are written: one or more regions, writable
/// here, each named by an address (the PRP2 or chain entry that points at
/// it) and holding up to [`entries`](Self::entries) 8-byte entries. Whole
/// 4 KiB pages (512 entries; a full list page chains to the next region)
/// from [`crate::DmaBuffer::list_pages`] (a raw pair), one slot of a
/// shared pair's pool from [`crate::PrpPool::list_slot`], or any memory
/// with [`PrpListMem::from_slice`].
#[derive(Debug)]
pub struct PrpListMem<'a> {
    ptr: *mut u8,
    dma: &'a [u64],
    entries: usize,
    _mem: PhantomData<&'a mut [u8]>,
}

impl<'a> PrpListMem<'a> {
    /// `mem` holds (at least) one 4 KiB page per entry of `dma`, which
    /// names those pages in order (each 4 KiB aligned).
    pub fn from_slice(mem: &'a mut [u8], dma: &'a [u64]) -> Result<Self, String> {
        if mem.len() < dma.len() * 4096 {
            return Err(format!(
                "{} PRP list page(s) need {} bytes, {} given",
                dma.len(),
                dma.len() * 4096,
                mem.len()
            ));
        }
        if mem.as_ptr() as usize % 8 != 0 {
            return Err("PRP list memory is not 8-byte aligned".into());
        }
        // SAFETY: `mem` is exclusively borrowed for 'a and long enough.
        Ok(unsafe { Self::from_raw(mem.as_mut_ptr(), dma, PRP_ENTRIES_PER_PAGE) })
    }

    /// # Safety
    /// `ptr` is 8-byte aligned and valid for writes of `dma.len()` regions
    /// of `entries` * 8 bytes each, back to back, for `'a`, and nothing
    /// else reads or writes them through a Rust reference meanwhile.
    /// A region of fewer than 512 entries must not cross a 4 KiB boundary
    /// of the address space its `dma` address is in.
    pub(crate) unsafe fn from_raw(ptr: *mut u8, dma: &'a [u64], entries: usize) -> Self {
        debug_assert!((1..=PRP_ENTRIES_PER_PAGE).contains(&entries));
        PrpListMem {
            ptr,
            dma,
            entries,
            _mem: PhantomData,
        }
    }

    /// Number of regions (list pages).
    pub fn pages(&self) -> usize {
        self.dma.len()
    }

    /// Entries each region holds: 512 for whole pages.
    pub fn entries(&self) -> usize {
        self.entries
    }

    /// The address of each region, as a PRP entry names it.
    pub fn dma_addrs(&self) -> &[u64] {
        self.dma
    }

    /// Writes `plan`'s list pages into the first `plan.lists.len()`
    /// regions. Regions of fewer than 512 entries take one unchained list
    /// each (a list only chains at the end of a whole page).
    pub fn write(&mut self, plan: &PrpPlan) -> Result<(), String> {
        if plan.lists.len() > self.pages() {
            return Err(format!(
                "{} PRP list page(s) to write into {}",
                plan.lists.len(),
                self.pages()
            ));
        }
        if self.entries < PRP_ENTRIES_PER_PAGE && plan.lists.len() > 1 {
            return Err(format!(
                "a chained PRP list ({} pages) does not fit slots of {} entries",
                plan.lists.len(),
                self.entries
            ));
        }
        for (i, list) in plan.lists.iter().enumerate() {
            if list.len() > self.entries {
                return Err(format!(
                    "a PRP list of {} entries does not fit a slot of {}",
                    list.len(),
                    self.entries
                ));
            }
            for (j, e) in list.iter().enumerate() {
                // SAFETY: region i < pages(), entry j < entries: inside the
                // memory `from_raw`'s contract covers; 8-byte aligned.
                unsafe {
                    self.ptr
                        .add((i * self.entries + j) * 8)
                        .cast::<u64>()
                        .write(e.to_le());
                }
            }
        }
        Ok(())
    }
}

/// PRP1/PRP2 for `len` bytes (> 0) starting `offset` bytes into the page
/// whose address is `pages[0]` (`pages`: every 4 KiB page of the data, in
/// order), with the PRP list, when more than two data pages need one,
/// written into `lists` (see [`prp_plan`]). That memory must stay
/// untouched until the command completes.
pub fn build_prps(
    pages: &[u64],
    offset: usize,
    len: usize,
    lists: Option<PrpListMem<'_>>,
) -> Result<Prp, String> {
    let plan = prp_plan(
        pages,
        offset,
        len,
        lists.as_ref().map_or(&[], |l| l.dma_addrs()),
    )?;
    if let Some(mut l) = lists {
        l.write(&plan)?;
    }
    Ok(plan.prp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u64_at(b: &[u8], off: usize) -> u64 {
        u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
    }
    fn u32_at(b: &[u8], off: usize) -> u32 {
        u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
    }

    #[test]
    fn read_sqe_is_byte_exact() {
        let mut s = Sqe::read(
            1,
            0x1_2345_6789,
            8,
            Prp {
                prp1: 0xdead_b000,
                prp2: 0x1_cafe_0000,
            },
        );
        s.set_cid(0xbeef);
        let b = s.to_bytes();
        assert_eq!(b[0], 0x02, "opcode");
        assert_eq!(b[1], 0, "fuse/psdt: PRPs");
        assert_eq!(u16::from_le_bytes([b[2], b[3]]), 0xbeef, "CID at 2");
        assert_eq!(u32_at(&b, 4), 1, "NSID at 4");
        assert_eq!(u64_at(&b, 16), 0, "MPTR");
        assert_eq!(u64_at(&b, 24), 0xdead_b000, "PRP1 at 24");
        assert_eq!(u64_at(&b, 32), 0x1_cafe_0000, "PRP2 at 32");
        assert_eq!(u32_at(&b, 40), 0x2345_6789, "CDW10 = SLBA low");
        assert_eq!(u32_at(&b, 44), 0x1, "CDW11 = SLBA high");
        assert_eq!(u32_at(&b, 48), 7, "CDW12 = NLB, 0-based");
        assert!(b[52..].iter().all(|&x| x == 0));
        assert_eq!((s.cid(), s.slba(), s.nlb()), (0xbeef, 0x1_2345_6789, 8));
        assert_eq!(
            s.describe(),
            "Read of 8 block(s) at LBA 4886718345 (nsid 1)"
        );
    }

    #[test]
    fn other_opcodes() {
        assert_eq!(Sqe::write(2, 0, 1, Prp::default()).to_bytes()[0], 0x01);
        let f = Sqe::flush(3).to_bytes();
        assert_eq!((f[0], u32_at(&f, 4)), (0x00, 3));
        assert!(f[8..].iter().all(|&x| x == 0));
        let z = Sqe::write_zeroes(1, 100, 65536).to_bytes();
        assert_eq!(z[0], 0x08);
        assert_eq!((u64_at(&z, 24), u64_at(&z, 32)), (0, 0));
        assert_eq!((u32_at(&z, 40), u32_at(&z, 48)), (100, 0xffff));
    }

    #[test]
    #[should_panic]
    fn zero_blocks_is_a_bug() {
        Sqe::read(1, 0, 0, Prp::default());
    }

    #[test]
    fn cqe_decodes() {
        let c = Cqe::from_dwords([7, 0, 0x0001_0005, (0x8101 << 16) | 42]);
        assert_eq!((c.dw0, c.sq_head, c.sq_id, c.cid), (7, 5, 1, 42));
        assert!(c.phase);
        assert_eq!(c.status.sc, 0x80);
        assert!(c.status.dnr);
    }

    const P: u64 = 0x10_0000;
    fn pages(n: usize) -> Vec<u64> {
        (0..n as u64).map(|i| P + i * 0x3000).collect()
    }

    #[test]
    fn prp_one_and_two_pages() {
        let p = prp_plan(&pages(1), 0, 4096, &[]).unwrap();
        assert_eq!(p.prp, Prp { prp1: P, prp2: 0 });
        assert!(p.lists.is_empty());
        // 512 bytes at offset 3584 stay in one page.
        let p = prp_plan(&pages(1), 3584, 512, &[]).unwrap();
        assert_eq!(
            p.prp,
            Prp {
                prp1: P + 3584,
                prp2: 0
            }
        );
        // ...1024 bytes there cross into a second page: PRP2 is that page.
        let p = prp_plan(&pages(2), 3584, 1024, &[]).unwrap();
        assert_eq!(
            p.prp,
            Prp {
                prp1: P + 3584,
                prp2: P + 0x3000
            }
        );
        let p = prp_plan(&pages(2), 0, 8192, &[]).unwrap();
        assert_eq!(p.prp.prp2, P + 0x3000);
        assert_eq!(prp_list_pages(0, 8192), 0);
    }

    #[test]
    fn prp_list_for_three_or_more_pages() {
        let l = 0x7000_0000;
        let p = prp_plan(&pages(3), 0, 3 * 4096, &[l]).unwrap();
        assert_eq!(p.prp, Prp { prp1: P, prp2: l });
        assert_eq!(p.lists, vec![vec![P + 0x3000, P + 0x6000]]);
        // offset: 2 pages of data at offset 512 span 3 pages.
        assert_eq!(prp_list_pages(512, 8192), 1);
        let p = prp_plan(&pages(3), 512, 8192, &[l]).unwrap();
        assert_eq!(p.prp.prp1, P + 512);
        assert_eq!(p.lists[0].len(), 2);
        // 513 pages: 512 list entries, exactly one full list page.
        assert_eq!(prp_list_pages(0, 513 * 4096), 1);
        let p = prp_plan(&pages(513), 0, 513 * 4096, &[l]).unwrap();
        assert_eq!(p.lists.len(), 1);
        assert_eq!(p.lists[0].len(), 512);
        assert_eq!(p.lists[0][511], pages(513)[512]);
    }

    #[test]
    fn prp_list_chains_past_512_entries() {
        let (l0, l1, l2) = (0x7000_0000, 0x7100_0000, 0x7200_0000);
        // 514 pages: 513 entries: 511 + chain, then 2.
        assert_eq!(prp_list_pages(0, 514 * 4096), 2);
        let pg = pages(514);
        let p = prp_plan(&pg, 0, 514 * 4096, &[l0, l1]).unwrap();
        assert_eq!(p.prp.prp2, l0);
        assert_eq!(p.lists[0].len(), 512);
        assert_eq!(&p.lists[0][..511], &pg[1..512]);
        assert_eq!(p.lists[0][511], l1, "last entry chains");
        assert_eq!(p.lists[1], pg[512..].to_vec());
        // 1024 entries: 511 + 511 + 2.
        assert_eq!(prp_list_pages(0, 1025 * 4096), 3);
        let pg = pages(1025);
        let p = prp_plan(&pg, 0, 1025 * 4096, &[l0, l1, l2]).unwrap();
        assert_eq!(p.lists[1][511], l2);
        assert_eq!(p.lists[2].len(), 2);
        let all: Vec<u64> = p
            .lists
            .iter()
            .enumerate()
            .flat_map(|(i, l)| {
                if i + 1 < p.lists.len() {
                    l[..511].to_vec()
                } else {
                    l.clone()
                }
            })
            .collect();
        assert_eq!(all, pg[1..].to_vec());
    }

    #[test]
    fn build_prps_writes_the_lists_little_endian() {
        // (A slot smaller than a page is tested with the pool in qpair.rs.)
        let map = crate::map::Mapping::anonymous(2 * 4096).unwrap();
        // SAFETY: the mapping is live, 2 pages long and only used here.
        let mem = unsafe { std::slice::from_raw_parts_mut(map.ptr(), map.len()) };
        let (l0, l1) = (0x7000_0000u64, 0x7000_1000u64);
        let dma = [l0, l1];
        let lists = PrpListMem::from_slice(mem, &dma).unwrap();
        assert_eq!(lists.pages(), 2);
        let pg = pages(4);
        let p = build_prps(&pg, 0, 4 * 4096, Some(lists)).unwrap();
        assert_eq!(p, Prp { prp1: P, prp2: l0 });
        for (i, want) in pg[1..].iter().enumerate() {
            assert_eq!(u64_at(mem, i * 8), *want);
        }
        assert!(mem[24..].iter().all(|&b| b == 0), "nothing past the list");
        // Two pages need no list memory at all.
        assert_eq!(
            build_prps(&pg, 0, 8192, None).unwrap(),
            Prp {
                prp1: P,
                prp2: pg[1]
            }
        );
        assert!(build_prps(&pg, 0, 3 * 4096, None)
            .unwrap_err()
            .contains("list page"));
        let mut small = vec![0u8; 4096];
        assert!(PrpListMem::from_slice(&mut small, &dma)
            .unwrap_err()
            .contains("8192"));
    }

    #[test]
    fn prp_rejects_bad_input() {
        assert!(prp_plan(&pages(1), 2, 4, &[])
            .unwrap_err()
            .contains("dword"));
        assert!(prp_plan(&pages(2), 0, 3 * 4096, &[1 << 20])
            .unwrap_err()
            .contains("span 3"));
        assert!(prp_plan(&pages(3), 0, 3 * 4096, &[])
            .unwrap_err()
            .contains("list page"));
        assert!(prp_plan(&[0x1200], 0, 4, &[])
            .unwrap_err()
            .contains("aligned"));
        assert!(prp_plan(&pages(1), 0, 0, &[]).is_err());
    }
}
