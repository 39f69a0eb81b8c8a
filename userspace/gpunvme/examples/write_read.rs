// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Writes a pattern to a namespace through a shared queue pair, reads it
//! back and checks every byte: the safe API end to end. Needs a controller
//! bound to gpunvme (and overwrites the blocks it names).
//!
//!     cargo run -p gpunvme --example write_read -- /dev/gpunvme0 1 4096 64
//!                                                  node        nsid lba count

use std::sync::Arc;

use gpunvme::{pattern, Controller, DmaBuffer, Io};

fn main() -> gpunvme::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    let num = |i: usize, d: &str| -> u64 { arg(i, d).parse().expect("a number") };
    let (node, nsid, lba, count) = (
        arg(0, "/dev/gpunvme0"),
        num(1, "1"),
        num(2, "0"),
        num(3, "8"),
    );

    // Queue pairs and buffers hold an Arc of the controller they belong to.
    let ctrl = Arc::new(Controller::open(&node)?);
    let info = ctrl.info()?;
    let mut io = Io::new(&ctrl, &info, nsid as u32, 32)?;
    let lba_size = io.namespace().lba_size as usize;
    let bytes = count as usize * lba_size;
    let mut buf = DmaBuffer::with_len(&ctrl, bytes)?;

    pattern::fill(42, lba, lba_size, &mut buf.as_mut_slice()[..bytes]);
    // The buffer moves into the transfer and comes back when every command
    // on it completed; after a timeout it does not come back at all.
    let mut buf = io.write(lba, count, buf, 0)?;
    io.flush()?;
    buf.as_mut_slice().fill(0xa5);
    let buf = io.read(lba, count, buf, 0)?;
    match pattern::first_mismatch(42, lba, lba_size, &buf.as_slice()[..bytes]) {
        None => println!(
            "{count} block(s) at LBA {lba} of namespace {nsid} on {}: written, read back, every byte matches ({} commands)",
            info.bdf,
            io.commands()
        ),
        Some(m) => return Err(gpunvme::Error::Invalid(format!("mismatch at {m}"))),
    }
    Ok(())
}
