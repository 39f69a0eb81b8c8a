// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Builds the NVMe Read command for 3 pages of data at a mid-page offset,
//! with its PRP list, and prints the entry and the list: what `Io` does for
//! every command, here without a device.
//!
//!     cargo run -p gpunvme --example prp_plan

use gpunvme::command::{prp_list_pages, prp_plan};
use gpunvme::{pattern, Sqe};

fn main() -> Result<(), String> {
    // DMA addresses of the buffer's pages, as GPUNVME_IOC_MAP_HOST returns
    // them (not consecutive: an IOMMU need not map them so).
    let pages = [
        0x1_0000_0000u64,
        0x1_0004_0000,
        0x1_0002_0000,
        0x1_0007_0000,
    ];
    let (offset, len) = (512, 3 * 4096);
    // Where the PRP list goes: a page of the pair's PRP pool (shared) or of
    // a buffer of its own (raw).
    let list = [0x2_0000_0000u64];
    assert_eq!(prp_list_pages(offset, len), 1);
    let plan = prp_plan(&pages, offset, len, &list)?;
    let sqe = Sqe::read(1, 2048, (len / 512) as u32, plan.prp);
    println!("{}", sqe.describe());
    println!(
        "PRP1 {:#x}  PRP2 {:#x} (the list)",
        plan.prp.prp1, plan.prp.prp2
    );
    for (i, e) in plan.lists[0].iter().enumerate() {
        println!("  list[{i}] = {e:#x}");
    }
    assert_eq!(plan.prp.prp1, pages[0] + offset as u64);
    assert_eq!(plan.lists, vec![pages[1..].to_vec()]);

    // The data such a command would write: one deterministic block per LBA.
    let mut block = vec![0u8; 512];
    pattern::fill_block(7, 2048, &mut block);
    assert_eq!(pattern::first_mismatch(7, 2048, 512, &block), None);
    println!("LBA 2048, seed 7 starts {:02x?}", &block[..8]);
    Ok(())
}
