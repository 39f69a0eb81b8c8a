// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The programming guide's array launcher (kernels/README.md shows this
//! file verbatim): an array of 64-bit words striped over every controller
//! named on the command line (shared queue pairs), read by
//! kernels/examples/guide_array.hip's check kernel on GPU 0, every element
//! against the pattern. The blocks must hold the pattern first, on each:
//!
//! ```text
//! gpunvme write /dev/gpunvme0 --pattern 7 --start-block 0 --block-count 8192
//! gpunvme write /dev/gpunvme1 --pattern 7 --start-block 0 --block-count 8192
//! cargo run --release --example guide_array -- kernels/build /dev/gpunvme0 /dev/gpunvme1
//! ```

use std::error::Error;
use std::mem::size_of;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use gpunvme::{Controller, Mode};
use gpunvme_gpu::array::{ArrayConfig, ArrayTarget, Layout, StorageArray};
use gpunvme_gpu::kernel_abi::{status_name, ArrayArgs, IoResult};
use gpunvme_gpu::{code_object, fine_grain, Gpu, LaunchConfig};

const SEED: u64 = 7; // the pattern's seed, as written
const BLOCKS: u64 = 8192; // LBAs of each controller the array uses, from 0
const GROUPS: u32 = 64; // workgroups of 256 threads
const THREADS: u32 = 256;

fn main() -> Result<(), Box<dyn Error>> {
    let mut argv = std::env::args().skip(1);
    let build = argv.next().unwrap_or_else(|| "kernels/build".into());
    let nodes: Vec<String> = argv.collect();
    if nodes.is_empty() {
        return Err("usage: guide_array BUILD_DIR /dev/gpunvme0 [/dev/gpunvme1 ...]".into());
    }
    // SAFETY: no other thread runs yet.
    let fg = unsafe { fine_grain::prepare() };
    let mut targets = Vec::new();
    let mut bytes = 0;
    for n in &nodes {
        let ctrl = Arc::new(Controller::open(n)?);
        let ns = *ctrl
            .info()?
            .namespaces
            .first()
            .ok_or("no active namespace")?;
        bytes += BLOCKS * ns.lba_size as u64; // this controller's share
        targets.push(ArrayTarget {
            ctrl,
            mode: Mode::Shared,
            nsid: ns.nsid,
            base_lba: 0,
        });
    }
    let gpu = Gpu::open(0)?;
    let (kind, arch) = (gpu.runtime().kind, gpu.device().arch.clone());
    let (path, image) = code_object::load(Path::new(&build), kind, &arch, "guide_array")?;
    let module = gpu.load_module(&image)?;

    // 16 KiB pages, 1024 frames (16 MiB of VRAM) in sets of 8, a stripe
    // unit of one page; 4 pairs of depth 128 per controller.
    let cfg = ArrayConfig {
        bytes,
        page_shift: 14,
        frames: 1024,
        ways: 8,
        layout: Layout::Stripe { chunk_pages: 1 },
        pairs_per_ctrl: 4,
        depth: 128,
        timeout: Duration::from_secs(1),
    };
    let array = StorageArray::build(&gpu, &targets, &cfg)?;
    let desc = array.desc();
    let stop = array.stop_flag();

    let args = gpu.alloc_host_mapped(size_of::<ArrayArgs>())?;
    let res = gpu.alloc_host_mapped(size_of::<IoResult>())?;
    let n = bytes / 8;
    let a = ArrayArgs {
        seed: SEED,
        first: 0,
        count: n,
        threads: GROUPS * THREADS,
        fua: 0,
    };
    // SAFETY: inside `args`; no kernel runs yet.
    unsafe { args.at::<ArrayArgs>(0).write(a) };
    let launch_cfg = LaunchConfig {
        grid: GROUPS,
        block: THREADS,
        args: &[desc, args.dev(), res.dev()],
        stop_flag: Some(stop),
    };
    // The launch owns the array (its pairs, frames and tables: everything
    // the kernel and the controllers reach) and the argument memory;
    // tuple order is teardown order.
    let keep = (array, args, res);
    // SAFETY: gpunvme_array_check's arguments are (array_desc, array_args,
    // io_result), all in memory `keep` owns, as is everything they lead
    // to; Rust touches none of it until `finish`; its waits end on the
    // array's stop flag.
    let mut launch = unsafe { gpu.launch(&module, "gpunvme_array_check", launch_cfg, keep)? };
    if launch.wait(Duration::from_secs(30)).is_err() {
        launch.stop();
        launch.wait(Duration::from_secs(5))?;
    }
    let keep = launch
        .finish()
        .map_err(|_| "the kernel finished, but its stream says otherwise")?;
    // SAFETY: the kernel has finished.
    let r = unsafe { keep.2.at::<IoResult>(0).read_volatile() };
    let s = keep.0.stats()?;
    drop(keep);
    println!(
        "{}: {} of {n} elements over {} controller(s), {} wrong, {}; loads {}, evictions {} ({})",
        path.display(),
        r.completed,
        nodes.len(),
        r.mismatches,
        status_name(r.status),
        s.loads,
        s.evictions,
        fg.describe()
    );
    if r.status != 0 || r.mismatches != 0 || r.completed as u64 != n {
        return Err("guide_array: the kernel found errors".into());
    }
    Ok(())
}
