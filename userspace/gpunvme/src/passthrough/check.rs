// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The passthrough relay's gate: every SQE of a shadow SQ is checked here
//! before io_uring sees it, with the module's rules (`rust/bridge/validate.rs`)
//! plus an LBA window, and its PRPs are turned into this process's
//! addresses of the registered buffers.
//!
//! What passes: Flush, Write, Read and Write Zeroes, on the one namespace
//! the back end serves, inside the window (LBAs are window-relative: LBA 0
//! is the window's first block, as on a partition's block device), with
//! PRPs only (no SGL, no metadata pointer, no fused pair, no protection
//! information), and with PRP1, PRP2 and every PRP-list entry on a page of
//! a registered payload buffer. A PRP list is read from the pair's PRP pool
//! once (walked as the module walks it, a chain pointer in a pool page's
//! last entry included) and only the copy is used. What goes to the kernel
//! is built field by field from the checked values; nothing else of the
//! SQE is passed on.

use super::addr::Table;

/// NVM command set opcodes allowed.
pub(crate) mod opcode {
    pub(crate) const FLUSH: u8 = 0x00;
    pub(crate) const WRITE: u8 = 0x01;
    pub(crate) const READ: u8 = 0x02;
    pub(crate) const WRITE_ZEROES: u8 = 0x08;
}

/// Why an SQE was refused: the generic status code (SCT 0) it completes
/// with, DNR set, as the module completes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reject {
    /// Invalid Command Opcode.
    Opcode = 0x01,
    /// Invalid Field in Command (PRPs, SGL, metadata, fused, reserved bits,
    /// transfer size).
    Field = 0x02,
    /// Invalid Namespace or Format.
    Namespace = 0x0b,
    /// LBA Out of Range (outside the window).
    LbaRange = 0x80,
}

impl Reject {
    /// The 15-bit status field: SCT 0, this SC, DNR.
    pub fn status(self) -> u16 {
        (1 << 14) | self as u16
    }
}

/// The LBA window: `blocks` logical blocks from `start` (absolute LBAs of
/// the namespace). Commands name window-relative LBAs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// First LBA of the namespace in the window.
    pub start: u64,
    /// Logical blocks in the window.
    pub blocks: u64,
}

/// What a pair's submissions are checked against; fixed for its life.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) nsid: u32,
    /// log2 of the logical block size.
    pub(crate) lba_shift: u32,
    pub(crate) window: Window,
    /// Largest transfer of one command, bytes (at most one list page's
    /// worth, 2 MiB, as the module caps it).
    pub(crate) max_transfer: u64,
    /// The pair whose PRP pool lists must be in.
    pub(crate) qid: u16,
}

/// Where a checked command's data is, in this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Data {
    /// No data (Flush, Write Zeroes).
    None,
    /// One contiguous range at `addr`, all of it in payload region
    /// `region` (an io_uring fixed buffer at that index).
    Contig { addr: u64, region: usize },
    /// Several ranges: the first `n` iovecs of the caller's scratch.
    Vectored { n: usize },
}

/// A checked command, in absolute LBAs, ready to be put in an NVMe
/// passthrough command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Checked {
    pub(crate) opcode: u8,
    pub(crate) nsid: u32,
    /// Absolute first LBA (window start added).
    pub(crate) slba: u64,
    /// NLB (0-based) and the allowed flag bits (LR, FUA, DEAC).
    pub(crate) cdw12: u32,
    /// Dataset management hints only.
    pub(crate) cdw13: u32,
    /// Bytes moved (0 without data).
    pub(crate) data_len: u32,
    pub(crate) data: Data,
}

const PAGE: u64 = 4096;
/// Largest PRP list one command may name: one page of entries.
pub(crate) const LIST_ENTRIES: usize = (PAGE / 8) as usize;

/// CDW12 bits a Read or Write may set besides NLB: LR (31) and FUA (30).
const RW_CDW12_ALLOWED: u32 = (1 << 31) | (1 << 30) | 0xffff;
/// Write Zeroes may also set DEAC (25).
const WZ_CDW12_ALLOWED: u32 = RW_CDW12_ALLOWED | (1 << 25);

/// The memory a check reads besides the SQE.
pub(crate) trait Memory {
    /// Is the 4 KiB page at `page` (aligned) payload memory?
    fn owns_page(&self, page: u64) -> bool;
    /// The list entry at `addr` in this pair's pool (read once), or `None`
    /// when it is not an aligned address inside the pool.
    fn pool_entry(&self, addr: u64) -> Option<u64>;
    /// This process's address of `len` bytes at `iova` (inside one page of
    /// a payload region), and the region.
    fn translate(&self, iova: u64, len: u64) -> Option<(u64, usize)>;
}

/// A region table, for the pair `qid`.
pub(crate) struct Reach<'a> {
    pub(crate) table: &'a Table,
    pub(crate) qid: u16,
}

impl Memory for Reach<'_> {
    #[inline]
    fn owns_page(&self, page: u64) -> bool {
        self.table.owns_page(page)
    }
    #[inline]
    fn pool_entry(&self, addr: u64) -> Option<u64> {
        self.table.pool_entry(self.qid, addr)
    }
    #[inline]
    fn translate(&self, iova: u64, len: u64) -> Option<(u64, usize)> {
        self.table.translate(iova, len)
    }
}

/// Scratch a check fills: the copied list and the iovecs of a transfer
/// that is not contiguous in this process. Kept per command (the kernel
/// may read the iovecs until the command completes).
pub(crate) struct Scratch {
    pub(crate) list: Vec<u64>,
    pub(crate) iov: Vec<libc::iovec>,
}

// SAFETY: the iovecs are plain addresses of registered memory; a Scratch
// belongs to one relay thread's pair state.
unsafe impl Send for Scratch {}

impl Default for Scratch {
    fn default() -> Self {
        Scratch {
            list: vec![0; LIST_ENTRIES],
            iov: Vec::new(),
        }
    }
}

/// The dwords of an SQE, little-endian as the GPU wrote them.
#[inline]
fn field64(dw: &[u32; 16], i: usize) -> u64 {
    u64::from(dw[i]) | (u64::from(dw[i + 1]) << 32)
}

/// Checks `dw` (an SQE copied out of the shadow SQ); on success the
/// command to submit.
pub(crate) fn check(
    dw: &[u32; 16],
    lim: &Limits,
    mem: &impl Memory,
    s: &mut Scratch,
) -> Result<Checked, Reject> {
    let op = dw[0] as u8;
    // Fused (bits 1:0), reserved (5:2) and PSDT (7:6, anything but PRPs).
    if (dw[0] >> 8) & 0xff != 0 {
        return Err(Reject::Field);
    }
    let allowed = match op {
        opcode::FLUSH => None,
        opcode::READ | opcode::WRITE => Some(RW_CDW12_ALLOWED),
        opcode::WRITE_ZEROES => Some(WZ_CDW12_ALLOWED),
        _ => return Err(Reject::Opcode),
    };
    if dw[1] != lim.nsid {
        return Err(Reject::Namespace);
    }
    let mut out = Checked {
        opcode: op,
        nsid: lim.nsid,
        slba: 0,
        cdw12: 0,
        cdw13: 0,
        data_len: 0,
        data: Data::None,
    };
    let Some(allowed) = allowed else {
        return Ok(out);
    };
    let (mptr, cdw12) = (field64(dw, 4), dw[12]);
    if mptr != 0 || dw[14] != 0 || dw[15] != 0 || cdw12 & !allowed != 0 {
        return Err(Reject::Field);
    }
    let slba = field64(dw, 10);
    let nlb = u64::from(cdw12 & 0xffff) + 1;
    match slba.checked_add(nlb) {
        Some(end) if end <= lim.window.blocks => {}
        _ => return Err(Reject::LbaRange),
    }
    out.slba = lim.window.start + slba;
    out.cdw12 = cdw12;
    if op == opcode::WRITE_ZEROES {
        return Ok(out);
    }
    out.cdw13 = dw[13] & 0xff;
    let len = nlb << lim.lba_shift;
    if len > lim.max_transfer {
        return Err(Reject::Field);
    }
    out.data_len = len as u32;
    out.data = data_of(field64(dw, 6), field64(dw, 8), len, mem, s)?;
    Ok(out)
}

/// Builds the data ranges of a transfer as it goes: consecutive pieces
/// that are consecutive in this process merge into one.
struct Ranges<'s> {
    iov: &'s mut Vec<libc::iovec>,
    cur: (u64, u64),
    region: Option<usize>,
}

impl Ranges<'_> {
    #[inline]
    fn add(&mut self, addr: u64, len: u64, region: usize) {
        if self.cur.1 == 0 {
            self.cur = (addr, len);
            self.region = Some(region);
            return;
        }
        if self.cur.0 + self.cur.1 == addr {
            self.cur.1 += len;
            if self.region != Some(region) {
                self.region = None;
            }
            return;
        }
        self.spill();
        self.cur = (addr, len);
    }

    fn spill(&mut self) {
        self.iov.push(libc::iovec {
            iov_base: self.cur.0 as *mut libc::c_void,
            iov_len: self.cur.1 as usize,
        });
    }

    fn finish(mut self) -> Data {
        if self.iov.is_empty() {
            return match self.region {
                Some(region) => Data::Contig {
                    addr: self.cur.0,
                    region,
                },
                // Contiguous here but over two registrations: no single
                // fixed buffer holds it.
                None => {
                    self.spill();
                    Data::Vectored { n: 1 }
                }
            };
        }
        self.spill();
        Data::Vectored { n: self.iov.len() }
    }
}

/// PRP1/PRP2 for a transfer of `len` bytes (NVMe base spec 2.0, 4.1.1),
/// checked as the module checks them, translated.
fn data_of(
    prp1: u64,
    prp2: u64,
    len: u64,
    mem: &impl Memory,
    s: &mut Scratch,
) -> Result<Data, Reject> {
    if prp1 & 3 != 0 || !mem.owns_page(prp1 & !(PAGE - 1)) {
        return Err(Reject::Field);
    }
    s.iov.clear();
    let mut r = Ranges {
        iov: &mut s.iov,
        cur: (0, 0),
        region: None,
    };
    let first = PAGE - (prp1 & (PAGE - 1));
    let piece = |iova: u64, n: u64, r: &mut Ranges<'_>| -> Result<(), Reject> {
        let (addr, region) = mem.translate(iova, n).ok_or(Reject::Field)?;
        r.add(addr, n, region);
        Ok(())
    };
    if len <= first {
        piece(prp1, len, &mut r)?;
        return Ok(r.finish());
    }
    piece(prp1, first, &mut r)?;
    let rest = len - first;
    if rest <= PAGE {
        if prp2 & (PAGE - 1) != 0 || !mem.owns_page(prp2) {
            return Err(Reject::Field);
        }
        piece(prp2, rest, &mut r)?;
        return Ok(r.finish());
    }
    // A list: PRP2 points at it (8-byte aligned, in the pool); the last
    // entry of a pool page points at the next page when more entries
    // follow. Every entry is read once into the copy, then checked.
    let n = rest.div_ceil(PAGE) as usize;
    if n > s.list.len() {
        return Err(Reject::Field);
    }
    let mut at = prp2;
    for i in 0..n {
        if at % PAGE == PAGE - 8 && n - i > 1 {
            let next = mem.pool_entry(at).ok_or(Reject::Field)?;
            if next % PAGE != 0 {
                return Err(Reject::Field);
            }
            at = next;
        }
        let entry = mem.pool_entry(at).ok_or(Reject::Field)?;
        if entry % PAGE != 0 || !mem.owns_page(entry) {
            return Err(Reject::Field);
        }
        s.list[i] = entry;
        at += 8;
    }
    let mut left = rest;
    for i in 0..n {
        let k = left.min(PAGE);
        piece(s.list[i], k, &mut r)?;
        left -= k;
    }
    Ok(r.finish())
}

/// What checking `dw` costs at most, in page checks (the module's
/// `check_cost`): one, plus one per page a Read or Write may name. A pass
/// spends a bounded number of them on a pair, so a pair full of long
/// lists cannot hold its relay thread's other pairs back.
pub(crate) fn check_cost(dw: &[u32; 16], lim: &Limits) -> u32 {
    let op = dw[0] as u8;
    if (op != opcode::READ && op != opcode::WRITE) || dw[1] != lim.nsid {
        return 1;
    }
    let len = (u64::from(dw[12] & 0xffff) + 1) << lim.lba_shift;
    1 + (len.min(lim.max_transfer) / PAGE + 1) as u32
}

/// The largest transfer of one command: the kernel's limit for the
/// namespace (`max_hw_sectors_kb`), capped so one list page covers it.
pub(crate) fn max_transfer(kernel_limit: u64) -> u64 {
    let cap = LIST_ENTRIES as u64 * PAGE;
    if kernel_limit == 0 {
        cap
    } else {
        kernel_limit.min(cap) / PAGE * PAGE
    }
}

/// Entries a pair's PRP pool holds per command for `max_transfer` bytes.
pub(crate) fn list_entries(max_transfer: u64) -> u64 {
    max_transfer.div_ceil(PAGE).clamp(1, LIST_ENTRIES as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Payload pages 0x10000..0x20000 at host 0x7f00_0000_0000 + the same
    /// address, except page 0x1f000, which sits elsewhere in this process
    /// (region 1); the pool is 0x80000..0x82000.
    struct Model {
        pool: [u64; 1024],
    }

    impl Memory for Model {
        fn owns_page(&self, page: u64) -> bool {
            (0x10000..0x20000).contains(&page)
        }
        fn pool_entry(&self, addr: u64) -> Option<u64> {
            if addr % 8 != 0 || !(0x80000..0x82000).contains(&addr) {
                return None;
            }
            Some(self.pool[((addr - 0x80000) / 8) as usize])
        }
        fn translate(&self, iova: u64, len: u64) -> Option<(u64, usize)> {
            let page = iova & !(PAGE - 1);
            if !self.owns_page(page) || (iova % PAGE) + len > PAGE {
                return None;
            }
            if page == 0x1f000 {
                return Some((0x6000_0000 + iova % PAGE, 1));
            }
            Some((0x7f00_0000_0000 + iova, 0))
        }
    }

    fn limits() -> Limits {
        Limits {
            nsid: 1,
            lba_shift: 9,
            window: Window {
                start: 5000,
                blocks: 1000,
            },
            max_transfer: 512 * 1024,
            qid: 1,
        }
    }

    fn sqe(opcode: u8, slba: u64, blocks: u32, prp1: u64, prp2: u64) -> [u32; 16] {
        let mut dw = [0u32; 16];
        dw[0] = u32::from(opcode) | (0x1234 << 16);
        dw[1] = 1;
        dw[6] = prp1 as u32;
        dw[7] = (prp1 >> 32) as u32;
        dw[8] = prp2 as u32;
        dw[9] = (prp2 >> 32) as u32;
        dw[10] = slba as u32;
        dw[11] = (slba >> 32) as u32;
        dw[12] = blocks - 1;
        dw
    }

    fn read(slba: u64, blocks: u32, prp1: u64, prp2: u64) -> [u32; 16] {
        sqe(opcode::READ, slba, blocks, prp1, prp2)
    }

    fn run(dw: &[u32; 16], m: &Model) -> Result<Checked, Reject> {
        check(dw, &limits(), m, &mut Scratch::default())
    }

    #[test]
    fn only_the_four_io_opcodes_pass() {
        let m = Model { pool: [0; 1024] };
        assert!(run(&read(0, 8, 0x10000, 0), &m).is_ok());
        // Compare, Dataset Management, Reservation, admin-looking and
        // vendor opcodes: never reach the kernel.
        for op in [0x04u8, 0x05, 0x09, 0x0d, 0x11, 0x7f, 0x80, 0x81, 0xc0, 0xff] {
            let mut dw = read(0, 1, 0x10000, 0);
            dw[0] = (dw[0] & !0xff) | u32::from(op);
            assert_eq!(run(&dw, &m), Err(Reject::Opcode), "opcode {op:#x}");
        }
    }

    #[test]
    fn fused_sgl_metadata_and_reserved_bits_are_refused() {
        let m = Model { pool: [0; 1024] };
        for flags in [1u32, 2, 0x04, 0x40, 0x80] {
            let mut dw = read(0, 1, 0x10000, 0);
            dw[0] |= flags << 8;
            assert_eq!(run(&dw, &m), Err(Reject::Field), "flags {flags:#x}");
        }
        let cases: [(usize, u32); 5] = [
            (4, 0x10000),  // MPTR low
            (5, 1),        // MPTR high
            (12, 1 << 26), // PRINFO
            (14, 1),
            (15, 1),
        ];
        for (i, v) in cases {
            let mut dw = read(0, 1, 0x10000, 0);
            dw[i] |= v;
            assert_eq!(run(&dw, &m), Err(Reject::Field), "dword {i} = {v:#x}");
        }
    }

    #[test]
    fn other_namespaces_are_refused() {
        let m = Model { pool: [0; 1024] };
        for nsid in [0u32, 2, 0xffff_ffff] {
            let mut dw = read(0, 1, 0x10000, 0);
            dw[1] = nsid;
            assert_eq!(run(&dw, &m), Err(Reject::Namespace));
        }
        // Flush carries nothing but its namespace.
        let f = run(&sqe(opcode::FLUSH, 9, 1, 0x1234, 0x5678), &m).unwrap();
        assert_eq!((f.nsid, f.slba, f.data, f.data_len), (1, 0, Data::None, 0));
    }

    #[test]
    fn the_window_bounds_every_lba_and_is_added() {
        let m = Model { pool: [0; 1024] };
        let ok = run(&read(992, 8, 0x10000, 0), &m).unwrap();
        assert_eq!(ok.slba, 5992, "window-relative LBA 992 is absolute 5992");
        assert_eq!(run(&read(993, 8, 0x10000, 0), &m), Err(Reject::LbaRange));
        assert_eq!(run(&read(1000, 1, 0x10000, 0), &m), Err(Reject::LbaRange));
        // Absolute LBAs of the window are outside it, relative.
        assert_eq!(run(&read(5000, 1, 0x10000, 0), &m), Err(Reject::LbaRange));
        assert_eq!(
            run(&read(u64::MAX, 1, 0x10000, 0), &m),
            Err(Reject::LbaRange)
        );
        assert_eq!(
            run(&read(u64::MAX - 3, 8, 0x10000, 0), &m),
            Err(Reject::LbaRange),
            "SLBA + NLB overflows"
        );
        let mut wz = sqe(opcode::WRITE_ZEROES, 0, 1000, 0, 0);
        wz[12] |= 1 << 25;
        let z = run(&wz, &m).unwrap();
        assert_eq!(
            (z.slba, z.cdw12, z.data),
            (5000, (1 << 25) | 999, Data::None)
        );
        wz[10] = 1;
        assert_eq!(run(&wz, &m), Err(Reject::LbaRange));
        // DEAC is for Write Zeroes only.
        let mut w = sqe(opcode::WRITE, 0, 1, 0x10000, 0);
        w[12] |= 1 << 25;
        assert_eq!(run(&w, &m), Err(Reject::Field));
    }

    #[test]
    fn prps_must_name_registered_payload() {
        let m = Model { pool: [0; 1024] };
        let one = run(&read(0, 1, 0x10200, 0), &m).unwrap();
        assert_eq!(
            one.data,
            Data::Contig {
                addr: 0x7f00_0001_0200,
                region: 0
            }
        );
        assert_eq!(one.data_len, 512);
        // Unregistered pages, a misaligned PRP1, a host pointer.
        assert_eq!(run(&read(0, 1, 0x20000, 0), &m), Err(Reject::Field));
        assert_eq!(run(&read(0, 1, 0x0f000, 0), &m), Err(Reject::Field));
        assert_eq!(run(&read(0, 1, 0x10002, 0), &m), Err(Reject::Field));
        assert_eq!(
            run(&read(0, 1, 0x7f00_0001_0000, 0), &m),
            Err(Reject::Field)
        );
        // Two pages: PRP2 is the second page, page aligned and registered.
        let two = run(&read(0, 16, 0x10000, 0x11000), &m).unwrap();
        assert_eq!(
            two.data,
            Data::Contig {
                addr: 0x7f00_0001_0000,
                region: 0
            }
        );
        assert_eq!(run(&read(0, 16, 0x10000, 0x20000), &m), Err(Reject::Field));
        assert_eq!(run(&read(0, 16, 0x10000, 0x11008), &m), Err(Reject::Field));
        // Within the first page PRP2 is not used.
        assert!(run(&read(0, 1, 0x10000, 0x9999), &m).is_ok());
        // Pages that are apart in this process become iovecs.
        let mut s = Scratch::default();
        let apart = check(&read(0, 16, 0x1e000, 0x1f000), &limits(), &m, &mut s).unwrap();
        assert_eq!(apart.data, Data::Vectored { n: 2 });
        assert_eq!(
            (
                s.iov[0].iov_base as u64,
                s.iov[0].iov_len,
                s.iov[1].iov_base as u64
            ),
            (0x7f00_0001_e000, 4096, 0x6000_0000)
        );
    }

    #[test]
    fn lists_are_walked_copied_and_every_entry_checked() {
        let mut m = Model { pool: [0; 1024] };
        for i in 0..4 {
            m.pool[i] = 0x11000 + 0x1000 * i as u64;
        }
        // 20 KiB from a page start: PRP1 + 4 list entries, all contiguous.
        let ok = run(&read(0, 40, 0x10000, 0x80000), &m).unwrap();
        assert_eq!(
            ok.data,
            Data::Contig {
                addr: 0x7f00_0001_0000,
                region: 0
            }
        );
        assert_eq!(ok.data_len, 20480);
        // A list outside the pool (in payload), an unregistered entry, a
        // misaligned entry, a list pointer in the pool but unaligned.
        assert_eq!(run(&read(0, 40, 0x10000, 0x11000), &m), Err(Reject::Field));
        assert_eq!(run(&read(0, 40, 0x10000, 0x80004), &m), Err(Reject::Field));
        m.pool[2] = 0x20000;
        assert_eq!(run(&read(0, 40, 0x10000, 0x80000), &m), Err(Reject::Field));
        m.pool[2] = 0x13008;
        assert_eq!(run(&read(0, 40, 0x10000, 0x80000), &m), Err(Reject::Field));
        // An entry naming the pool itself (data into the list memory).
        m.pool[2] = 0x81000;
        assert_eq!(run(&read(0, 40, 0x10000, 0x80000), &m), Err(Reject::Field));
        // A list through the page that sits apart: three ranges.
        m.pool[2] = 0x1f000;
        m.pool[3] = 0x15000;
        let mut s = Scratch::default();
        let v = check(&read(0, 40, 0x10000, 0x80000), &limits(), &m, &mut s).unwrap();
        assert_eq!(v.data, Data::Vectored { n: 3 });
        let lens: Vec<usize> = s.iov.iter().map(|i| i.iov_len).collect();
        assert_eq!(lens, [3 * 4096, 4096, 4096]);
    }

    #[test]
    fn lists_chain_across_pool_pages() {
        let mut m = Model { pool: [0; 1024] };
        // Entry 0 two slots before the end of pool page 0, then the chain
        // pointer to pool page 1, which holds the rest.
        m.pool[510] = 0x11000;
        m.pool[511] = 0x81000;
        for i in 0..3 {
            m.pool[512 + i] = 0x12000 + 0x1000 * i as u64;
        }
        let ok = run(&read(0, 40, 0x10000, 0x80000 + 510 * 8), &m).unwrap();
        assert_eq!(ok.data_len, 20480);
        assert!(matches!(ok.data, Data::Contig { .. }));
        // A chain pointer out of the pool, or not page aligned.
        m.pool[511] = 0x12000;
        assert_eq!(
            run(&read(0, 40, 0x10000, 0x80000 + 510 * 8), &m),
            Err(Reject::Field)
        );
        m.pool[511] = 0x81008;
        assert_eq!(
            run(&read(0, 40, 0x10000, 0x80000 + 510 * 8), &m),
            Err(Reject::Field)
        );
    }

    #[test]
    fn transfer_limit_cost_and_status() {
        let m = Model { pool: [0; 1024] };
        let mut lim = limits();
        lim.window.blocks = 1 << 20;
        // 1025 blocks of 512 B: over the 512 KiB limit.
        assert_eq!(
            check(
                &read(0, 1025, 0x10000, 0x80000),
                &lim,
                &m,
                &mut Scratch::default()
            ),
            Err(Reject::Field)
        );
        assert_eq!(Reject::LbaRange.status(), 0x4080);
        assert_eq!(Reject::Field.status(), 0x4002);
        // The module's CQE field (status << 1): SC 0x80 with DNR is 0x8100.
        assert_eq!(Reject::LbaRange.status() << 1, 0x8100);
        assert_eq!(check_cost(&read(0, 8, 0, 0), &lim), 3);
        assert_eq!(check_cost(&read(0, 1024, 0, 0), &lim), 130);
        assert_eq!(check_cost(&read(0, 65535, 0, 0), &lim), 130);
        assert_eq!(check_cost(&sqe(opcode::FLUSH, 0, 1, 0, 0), &lim), 1);
        assert_eq!(max_transfer(0), 2 << 20);
        assert_eq!(max_transfer(128 << 10), 128 << 10);
        assert_eq!(max_transfer(64 << 20), 2 << 20);
        assert_eq!((list_entries(512 << 10), list_entries(4 << 20)), (128, 512));
    }
}
