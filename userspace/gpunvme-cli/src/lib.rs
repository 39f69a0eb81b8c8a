// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! `gpunvme`: command-line tool for the gpunvme kernel module. The
//! binary (src/main.rs) calls [`main`]; [`command`] is the clap definition,
//! which tests/habits.rs checks against every documented example.

mod bench;
mod blockio;
mod gpu_mem;
mod gpu_run;
pub mod habits;
mod passthrough_args;
mod probe;
mod self_test;
mod sriov;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use gpunvme::sysfs::{NvmeController, Sysfs, GPUNVME_DRIVER};
use gpunvme::{Controller, Info};
use habits::{human_bytes, parse_device, parse_size, Device, Output};
use serde_json::json;

/// `after_help` of a command: its examples (one `gpunvme ...` line each,
/// two spaces in, `#` comments after two spaces; tests/habits.rs parses
/// each with the real parser), then the exit codes.
fn examples(lines: &str) -> String {
    format!("Examples:\n{lines}\n\n{}", habits::EXIT_CODES_HELP)
}

/// Hand NVMe controllers to the gpunvme kernel module so GPUs can drive
/// them, and inspect what this machine can do.
#[derive(Parser, Debug)]
#[command(
    name = "gpunvme",
    version,
    about = "Hand NVMe controllers to the gpunvme kernel module so GPUs can drive them, and inspect what this machine can do.",
    long_about = "Hand NVMe controllers to the gpunvme kernel module so GPUs can drive them, and inspect what this machine can do.\n\n\
        One vocabulary in every command, nvme-cli's where it has one: the device comes first, right after the command \
        (DEVICE: a PCI address 0000:01:00.0 or 01:00.0, /dev/gpunvmeN, gpunvmeN, or a namespace node /dev/gpunvmeNnM; \
        for read, write, verify, bench and gpu-run also a namespace the kernel drives, /dev/ngXnY, /dev/nvmeXnY or a partition \
        /dev/nvmeXnYpZ, through io_uring passthrough with no module: --partition or --lba-window set its LBA window); \
        -n/--namespace-id, -s/--start-block (first LBA), -c/--block-count (a number of blocks, 1-based: -c 8 is eight \
        blocks, unlike nvme-cli's 0-based count), --qd (commands in flight per queue pair, like fio's iodepth), \
        --qpairs (queue pairs), -p/--pattern SEED (the data pattern of write, verify, pattern and the GPU examples), \
        --gpu SOURCE (read, write, verify and bench through GPU memory registered once: a GPU index, or the VM's \
        udmabuf and edu stand-ins; not on a namespace the kernel drives), \
        -o/--output-format normal|json. Lists take commas or spaces (--qd 1,8,32 or --qd 1 8 32); sizes take binary \
        suffixes (512, 4k, 1M, 1MiB, 2G). A progress bar is drawn on stderr when it is a terminal. Ctrl-C stops \
        submitting, reaps what is in flight (gpu-run: raises the GPU's stop flag) and exits 130.",
    after_help = examples("  gpunvme list\n  gpunvme bind 0000:01:00.0\n  gpunvme info /dev/gpunvme0 -o json\n  gpunvme write 0000:01:00.0 -s 0 -c 2048 -p 42\n  gpunvme verify 0000:01:00.0 -s 0 -c 2048 -p 42\n  gpunvme bench 0000:01:00.0 --qd 1 8 32 --qpairs 1,4"),
    propagate_version = true
)]
pub struct Cli {
    /// sysfs root to use instead of /sys (for tests and chroots).
    #[arg(
        long,
        global = true,
        value_name = "DIR",
        default_value = "/sys",
        hide_default_value = true
    )]
    sysfs_root: PathBuf,

    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// List NVMe controllers (PCI class 0x010802): address, IDs, driver,
    /// driver_override, and the gpunvme nodes or nvme namespaces; then every
    /// namespace the kernel drives (PCIe or NVMe over Fabrics) and whether
    /// read, write, verify, bench and gpu-run can use it through io_uring
    /// passthrough (whole, or which partitions), and why not.
    #[command(after_help = examples("  gpunvme list\n  gpunvme list -o json\n  gpunvme list --namespaces -o json  # the kernel namespaces alone"))]
    List {
        /// Only the kernel's namespaces (with -o json: that list).
        #[arg(long)]
        namespaces: bool,
        #[command(flatten)]
        out: Output,
    },
    /// Show a gpunvme controller's identity, decoded CAP/VS registers
    /// (queue depth, doorbell stride, ready timeout, ...), its IOMMU mode
    /// and the modes (shared, owner) you may use on it. Needs access to
    /// the node (root, unless a udev rule grants it).
    #[command(override_usage = "gpunvme info <DEVICE> [OPTIONS]")]
    #[command(after_help = examples("  gpunvme info 0000:01:00.0\n  gpunvme info /dev/gpunvme0 -o json\n  gpunvme info gpunvme0n1  # a namespace node"))]
    Info {
        /// The controller: a PCI address (0000:01:00.0 or 01:00.0),
        /// /dev/gpunvmeN, gpunvmeN, or a namespace node /dev/gpunvmeNnM.
        #[arg(value_name = "DEVICE", value_parser = parse_device)]
        device: Device,
        #[command(flatten)]
        out: Output,
    },
    /// Bind a controller to gpunvme: unbind it from its driver, set
    /// driver_override=gpunvme, probe, and check that gpunvme took it.
    ///
    /// Refused (non-zero exit, nothing unbound) while its storage is in
    /// use: every namespace, partition and dm/md device on them is opened
    /// O_EXCL, which the kernel refuses while a file system is mounted from
    /// it (under any name, in any mount namespace), it is swap, a dm/md
    /// device holds it or a process opened it O_EXCL; the message names
    /// the mount point, swap, holder (dm name) or pid. A process that has
    /// a namespace, /dev/nvmeN or /dev/ngNnM open refuses it too. The
    /// O_EXCL opens are held until the unbind is done.
    #[command(override_usage = "gpunvme bind <DEVICE> [OPTIONS]")]
    #[command(after_help = examples("  gpunvme bind 0000:01:00.0\n  gpunvme bind 01:00.0\n  gpunvme bind /dev/nvme1  # the kernel nvme controller's node"))]
    Bind {
        /// The controller: a PCI address (0000:01:00.0 or 01:00.0) or its
        /// kernel nvme node (/dev/nvmeN, nvmeN).
        #[arg(value_name = "DEVICE", value_parser = parse_device)]
        device: Device,
    },
    /// Unbind a controller from gpunvme and clear driver_override, leaving
    /// it without a driver; with --to-nvme, hand it back to the kernel nvme
    /// driver instead.
    #[command(override_usage = "gpunvme unbind <DEVICE> [OPTIONS]")]
    #[command(after_help = examples("  gpunvme unbind 0000:01:00.0\n  gpunvme unbind /dev/gpunvme0 --to-nvme"))]
    Unbind {
        /// The controller: a PCI address, /dev/gpunvmeN or gpunvmeN.
        #[arg(value_name = "DEVICE", value_parser = parse_device)]
        device: Device,
        /// Give the controller back to the kernel nvme driver.
        #[arg(long)]
        to_nvme: bool,
    },
    /// Look for a GPU runtime (HIP, then CUDA), list the GPUs, say which
    /// doorbell mapping mode this machine can do (direct, bridge only or
    /// none), and for each controller bound to gpunvme its IOMMU mode and
    /// the modes (shared, owner) you may use. Then run the round-trip
    /// self-test on GPU --gpu: in host-mapped memory and, with DEVICE, in
    /// every region of a shared queue pair the GPU imports (doorbell
    /// cells, shadow SQ, CQ mirror, PRP pool), the GPU stores a value the
    /// CPU must see and the CPU one the GPU must see, with deadlines; one
    /// line per region with its import route and memory type. Exit 1 if a
    /// region fails (or, with DEVICE, if the test cannot run).
    #[command(override_usage = "gpunvme probe [DEVICE] [OPTIONS]")]
    #[command(after_help = examples("  gpunvme probe\n  gpunvme probe -o json\n  gpunvme probe 0000:01:00.0  # also a shared queue pair's memory\n  gpunvme probe /dev/gpunvme0 --gpu 1 --code-objects kernels/build\n  gpunvme probe --skip-self-test"))]
    Probe(probe::ProbeArgs),
    /// Read blocks through a queue pair of this process (shared, or raw
    /// with --owner), into host memory or (--gpu) GPU memory: to --data
    /// FILE, or a hex dump on stdout.
    #[command(override_usage = "gpunvme read <DEVICE> --start-block <LBA> [OPTIONS]")]
    #[command(after_help = examples("  gpunvme read 0000:01:00.0 -s 0 -c 8\n  gpunvme read /dev/gpunvme0 --start-block 2048 --block-count 256 --data blocks.bin\n  gpunvme read gpunvme0n1 -s 0 -c 2048 -d out.bin -o json  # summary as JSON, data to the file\n  gpunvme read 0000:01:00.0 -s 0 -c 256 --gpu 0 -d vram.bin  # SSD -> VRAM of GPU 0 -> file\n  gpunvme read /dev/ng0n1 --partition /dev/nvme0n1p3 -s 0 -c 8  # a partition of a kernel-driven SSD, no module"))]
    Read {
        #[command(flatten)]
        range: blockio::Range,
        /// Write the raw bytes to FILE instead of a hex dump on stdout
        /// (nvme-cli's --data).
        #[arg(short = 'd', long = "data", value_name = "FILE")]
        data: Option<PathBuf>,
        #[command(flatten)]
        out: Output,
    },
    /// Write blocks with the data pattern of -p SEED (every 64-bit word
    /// from seed and byte offset, the GPU examples' pattern: see `gpunvme
    /// pattern`), then flush.
    #[command(
        override_usage = "gpunvme write <DEVICE> --start-block <LBA> --pattern <SEED> [OPTIONS]"
    )]
    #[command(after_help = examples("  gpunvme write 0000:01:00.0 -s 0 -c 2048 -p 42\n  gpunvme write /dev/gpunvme0 --start-block 4096 --block-count 512 --pattern 7 --qd 8 --owner\n  gpunvme write 0000:01:00.0 -s 0 -c 2048 -p 42 --gpu 0  # from VRAM of GPU 0\n  gpunvme write /dev/nvme0n1p3 -s 0 -c 2048 -p 42  # through io_uring passthrough, LBAs of the partition"))]
    Write {
        #[command(flatten)]
        range: blockio::Range,
        /// Pattern seed.
        #[arg(short = 'p', long, value_name = "SEED")]
        pattern: u64,
        #[command(flatten)]
        out: Output,
    },
    /// Read blocks and check every byte against the pattern of -p SEED;
    /// prints the first mismatch and exits 3 on any.
    #[command(
        override_usage = "gpunvme verify <DEVICE> --start-block <LBA> --pattern <SEED> [OPTIONS]"
    )]
    #[command(after_help = examples("  gpunvme verify 0000:01:00.0 -s 0 -c 2048 -p 42\n  gpunvme verify gpunvme0n1 -n 1 -s 0 -c 8 --pattern 42 -o json\n  gpunvme verify 0000:01:00.0 -s 0 -c 2048 -p 42 --gpu udmabuf  # through a udmabuf (the VM's VRAM stand-in)\n  gpunvme verify /dev/ng1n1 --lba-window 0:65536 -s 0 -c 2048 -p 42  # e.g. an NVMe/TCP namespace"))]
    Verify {
        #[command(flatten)]
        range: blockio::Range,
        /// Pattern seed.
        #[arg(short = 'p', long, value_name = "SEED")]
        pattern: u64,
        #[command(flatten)]
        out: Output,
    },
    /// Print the bytes `write -p SEED` (and the GPU examples with
    /// `gpu-run --pattern SEED`) put in blocks (raw, to stdout), e.g. to
    /// compare with what dd reads. No device needed.
    #[command(after_help = examples("  gpunvme pattern -p 42 -s 0 -c 8 > expected.bin\n  gpunvme pattern --pattern 42 --start-block 5 --block-count 3 --block-size 4k"))]
    Pattern {
        /// Pattern seed.
        #[arg(short = 'p', long, value_name = "SEED")]
        pattern: u64,
        /// First logical block.
        #[arg(short = 's', long = "start-block", value_name = "LBA")]
        start_block: u64,
        /// Number of logical blocks (1-based: 8 is eight blocks).
        #[arg(
            short = 'c',
            long = "block-count",
            value_name = "N",
            default_value_t = 1
        )]
        block_count: u64,
        /// Bytes per logical block (512, 4k, ...).
        #[arg(short = 'b', long = "block-size", value_name = "SIZE", default_value = "512", value_parser = parse_size)]
        block_size: u64,
    },
    /// Storage benchmark with fio's knobs: --rw (randread, randwrite, read,
    /// write, randrw with --rwmixread), --bs, --runtime 30s, --ramp-time,
    /// --cpus-allowed, at each queue depth (--qd/--iodepth, default 1, 8,
    /// 32) with each number of queue pairs (--qpairs/--numjobs, default 1,
    /// 4) on shared queue pairs (with --owner also on raw ones; with --gpu
    /// the library's transfers into GPU memory against host memory, GB/s
    /// GPU/host), or on a kernel namespace through the passthrough back
    /// end, beside the kernel's own io_uring on the same blocks (and fio's
    /// io_uring_cmd engine with --fio); with --block-device, the same on a
    /// kernel nvme device (O_DIRECT io_uring with interrupt completions
    /// and, polled like gpunvme, IORING_SETUP_IOPOLL; or pread/pwrite
    /// threads with --pread). Tables (IOPS, MiB/s, GB/s,
    /// min/mean/p50-p99.99/max latency, CPU use, a latency histogram) on
    /// stdout; -o json adds fio's jobs[] (fio's field names, json+ bins)
    /// for fio's tools.
    #[command(override_usage = "gpunvme bench [DEVICE] [OPTIONS]")]
    #[command(after_help = examples("  gpunvme bench 0000:01:00.0\n  gpunvme bench 0000:01:00.0 --qd 1 8 32 --qpairs 1 4\n  gpunvme bench 0000:01:00.0 --rw randrw --rwmixread 70 --bs 16k --runtime 30s --ramp-time 2s --cpus-allowed 2-5\n  gpunvme bench /dev/gpunvme0 --rw read --bs 128k --qd 32 --qpairs 1 --gpu 0  # GPU memory vs host memory\n  gpunvme bench /dev/gpunvme0 --qd 1,32 --qpairs 1 --range 16M --ops 10000 -o json > bench.json\n  gpunvme bench 0000:01:00.0 --owner --block-device /dev/nvme1n1 --runtime 300ms\n  gpunvme bench --block-device /dev/nvme1n1 --kernel-mode poll --rw randwrite  # the kernel driver only\n  gpunvme bench /dev/ng0n1 --partition /dev/nvme0n1p3 --qd 1,32 --qpairs 1 --fio  # passthrough vs the kernel's io_uring and fio"))]
    Bench(bench::BenchArgs),
    /// Run an example GPU kernel (write, read-verify, sweep; with --api
    /// thread, write and read-verify through the per-thread API) against a
    /// controller bound to gpunvme: VRAM exported to the controller, queue
    /// pairs (shared, or raw with --owner) imported into the GPU, every
    /// import route reported, and before the kernel the round-trip
    /// self-test of every imported region (the GPU and the CPU each store
    /// a value the other must see; a failure refuses the launch, naming
    /// region, route and memory type; --skip-self-test skips it and says
    /// so). Needs a GPU, ROCm or the NVIDIA driver, and access to the node
    /// (root for --owner).
    #[command(override_usage = "gpunvme gpu-run <DEVICE> --kernel <KERNEL> [OPTIONS]")]
    #[command(after_help = examples("  gpunvme gpu-run 0000:01:00.0 --kernel write -p 7\n  gpunvme gpu-run 0000:01:00.0 --kernel read-verify -p 7 --qpairs 4 --qd 63 --cmds 64 --cmd-blocks 8 -s 0\n  gpunvme gpu-run /dev/gpunvme0 --kernel sweep --rounds 32 -o json\n  gpunvme gpu-run 0000:01:00.0 --kernel read-verify -p 7 --owner --cq gpu\n  gpunvme gpu-run 0000:01:00.0 --kernel read-verify -p 7 --api thread --qpairs 2 --cmds 64\n  gpunvme gpu-run /dev/ng0n1 --partition /dev/nvme0n1p3 --kernel read-verify -p 7  # no module: passthrough, host payload"))]
    GpuRun(gpu_run::GpuRunArgs),
    /// SR-IOV: keep the physical function with the kernel nvme driver (its
    /// file systems stay mounted) and prepare virtual functions for
    /// gpunvme: move flexible queue and interrupt resources from the
    /// primary to each VF's secondary controller (resetting the PF if its
    /// own allocation must shrink), enable the VFs, bring them online and
    /// attach the namespaces of -n; then `gpunvme bind VF`. --vfs 0 undoes
    /// it; --print prints the nvme-cli commands instead. Needs root.
    #[command(override_usage = "gpunvme sriov <DEVICE> [OPTIONS]")]
    #[command(after_help = examples("  gpunvme sriov /dev/nvme0 --vfs 1 -n 2 --print\n  gpunvme sriov 0000:01:00.0 --vfs 2 --namespace-id 2 --namespace-id 3 --flex-queues 5\n  gpunvme sriov /dev/nvme0 --vfs 0 -n 2 --reclaim\n  gpunvme sriov /dev/nvme0 --vfs 1 --print -o json"))]
    Sriov(sriov::SriovArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish,
    /// powershell) on stdout.
    #[command(after_help = examples("  gpunvme completions bash > /etc/bash_completion.d/gpunvme\n  gpunvme completions zsh > ~/.zfunc/_gpunvme"))]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) on stdout, generated from this help.
    #[command(after_help = examples("  gpunvme man > gpunvme.1"))]
    Man,
}

/// The clap definition of the command line (for tests and generators).
pub fn command() -> clap::Command {
    Cli::command()
}

/// Runs the command line of this process; the exit status is 0, 1 (could
/// not run), 2 (usage: clap's), 3 (data mismatch) or 130 (Ctrl-C).
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let mut msg = e.to_string().replace('\n', " ");
            if let Some(gpunvme::Error::Io { what, source, .. }) =
                e.downcast_ref::<gpunvme::Error>()
            {
                if what.contains("gpunvme device node")
                    && source.kind() == std::io::ErrorKind::NotFound
                {
                    msg.push_str(" (is the gpunvme module loaded and a controller bound? see `gpunvme list`)");
                }
            }
            eprintln!("gpunvme: {msg}");
            ExitCode::from(habits::exit_code(e.as_ref()))
        }
    }
}

type Res = Result<(), Box<dyn std::error::Error>>;

fn run(cli: Cli) -> Res {
    let sysfs = Sysfs::with_root(&cli.sysfs_root);
    if matches!(
        cli.cmd,
        Cmd::Read { .. } | Cmd::Write { .. } | Cmd::Verify { .. } | Cmd::Bench(_) | Cmd::GpuRun(_)
    ) {
        habits::catch_sigint();
    }
    match cli.cmd {
        Cmd::List { namespaces, out } => list(&sysfs, namespaces, out.json()),
        Cmd::Info { device, out } => info(&sysfs, &device, out.json()),
        Cmd::Bind { device } => {
            let bdf = habits::device_bdf(&sysfs, &device)?;
            let c = sysfs.bind(&bdf)?;
            let node = c
                .node
                .as_ref()
                .map(|p| format!(" as {}", p.display()))
                .unwrap_or_default();
            println!("{}: bound to gpunvme{node}", c.bdf);
            Ok(())
        }
        Cmd::Unbind { device, to_nvme } => {
            let bdf = habits::device_bdf(&sysfs, &device)?;
            let c = sysfs.unbind(&bdf, to_nvme)?;
            match (&c.driver, &c.nvme_name) {
                (Some(d), Some(n)) => println!("{}: handed back to {d} as {n}", c.bdf),
                (Some(d), None) => println!("{}: now bound to {d}", c.bdf),
                (None, _) => println!("{}: unbound from gpunvme, left without a driver", c.bdf),
            }
            Ok(())
        }
        Cmd::Probe(a) => probe::probe(&sysfs, &a),
        Cmd::Read { range, data, out } => blockio::read(&sysfs, &range, data, out),
        Cmd::Write {
            range,
            pattern,
            out,
        } => blockio::write(&sysfs, &range, pattern, out),
        Cmd::Verify {
            range,
            pattern,
            out,
        } => blockio::verify(&sysfs, &range, pattern, out),
        Cmd::Pattern {
            pattern,
            start_block,
            block_count,
            block_size,
        } => blockio::print_pattern(pattern, start_block, block_count, block_size),
        Cmd::Bench(a) => bench::bench(&sysfs, &a),
        Cmd::GpuRun(a) => gpu_run::gpu_run(&sysfs, &a),
        Cmd::Sriov(a) => sriov::sriov(&sysfs, &a),
        Cmd::Completions { shell } => {
            clap_complete::generate(shell, &mut command(), "gpunvme", &mut std::io::stdout());
            Ok(())
        }
        Cmd::Man => {
            clap_mangen::Man::new(command()).render(&mut std::io::stdout())?;
            Ok(())
        }
    }
}

fn list(sysfs: &Sysfs, namespaces_only: bool, json: bool) -> Res {
    if namespaces_only {
        let c = gpunvme::passthrough::list(sysfs);
        if json {
            println!("{}", serde_json::to_string_pretty(&c)?);
        } else {
            print_namespaces(&c);
        }
        return Ok(());
    }
    let ctrls = sysfs.list()?;
    if json {
        println!("{}", serde_json::to_string_pretty(&ctrls)?);
        return Ok(());
    }
    if ctrls.is_empty() {
        println!(
            "no NVMe controllers (PCI class 0x010802) under {}",
            sysfs.root().display()
        );
    } else {
        println!(
            "{:<14} {:<9} {:<10} {:<10} USE",
            "BDF", "ID", "DRIVER", "OVERRIDE"
        );
    }
    for c in &ctrls {
        println!(
            "{:<14} {:04x}:{:04x} {:<10} {:<10} {}",
            c.bdf,
            c.vendor,
            c.device,
            c.driver.as_deref().unwrap_or("-"),
            c.driver_override.as_deref().unwrap_or("-"),
            usage(c)
        );
    }
    let c = gpunvme::passthrough::list(sysfs);
    if !c.is_empty() {
        println!();
        print_namespaces(&c);
    }
    Ok(())
}

/// The kernel's namespaces and what the passthrough back end can do there.
fn print_namespaces(list: &[gpunvme::passthrough::Candidate]) {
    if list.is_empty() {
        println!("no namespaces the kernel drives");
        return;
    }
    println!("Namespaces the kernel drives (usable through io_uring passthrough: DEVICE /dev/ngXnY or a partition):");
    for c in list {
        let ns = &c.namespace;
        let via: Vec<String> = ns
            .controllers
            .iter()
            .map(|k| format!("{} {} {}", k.name, k.transport, k.address))
            .collect();
        println!(
            "  {} ({}, nsid {}): {} blocks of {} bytes ({}) via {}",
            ns.disk,
            ns.ng.display(),
            ns.nsid,
            ns.capacity_lbas,
            ns.lba_size,
            human_bytes(ns.capacity_lbas * u64::from(ns.lba_size)),
            if via.is_empty() {
                "?".to_string()
            } else {
                via.join(", ")
            }
        );
        match &c.whole {
            Ok(()) => println!("    whole namespace: usable"),
            Err(e) => println!("    whole namespace: no: {e}"),
        }
        for (name, r) in &c.partitions {
            let p = ns.partitions.iter().find(|p| &p.name == name);
            let at = p.map_or(String::new(), |p| {
                format!(" (LBA {}, {} blocks)", p.start_lba, p.lbas)
            });
            match r {
                Ok(()) => println!("    {name}{at}: usable (--partition /dev/{name})"),
                Err(e) => println!("    {name}{at}: no: {e}"),
            }
        }
        match &c.poll {
            Ok(()) => println!("    completions: polled (poll queues)"),
            Err(e) => println!("    completions: by interrupt ({e})"),
        }
    }
}

fn usage(c: &NvmeController) -> String {
    match c.driver.as_deref() {
        Some(GPUNVME_DRIVER) => {
            let mut u = match &c.node {
                Some(n) => n.display().to_string(),
                None => "(device node not found)".into(),
            };
            if !c.namespace_nodes.is_empty() {
                let names: Vec<String> = c
                    .namespace_nodes
                    .iter()
                    .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
                    .collect();
                u.push_str(&format!(" (namespaces: {})", names.join(" ")));
            }
            u
        }
        Some("nvme") => {
            let name = c.nvme_name.as_deref().unwrap_or("nvme?");
            if c.namespaces.is_empty() {
                name.to_string()
            } else {
                format!("{name}: {}", c.namespaces.join(" "))
            }
        }
        _ => String::new(),
    }
}

fn info(sysfs: &Sysfs, device: &Device, json: bool) -> Res {
    let ctrl = blockio::open(sysfs, device)?;
    let i = ctrl.info()?;
    if json {
        println!("{}", serde_json::to_string_pretty(&info_json(&ctrl, &i))?);
    } else {
        print_info(&ctrl, &i);
    }
    Ok(())
}

fn info_json(ctrl: &Controller, i: &Info) -> serde_json::Value {
    json!({
        "node": ctrl.path(),
        "bdf": i.bdf,
        "pci_vendor": i.pci_vendor,
        "pci_device": i.pci_device,
        "nvme_version": i.version.to_string(),
        "vs": i.version,
        "cap": i.cap,
        "max_queue_entries": i.max_queue_entries,
        "doorbell_stride": i.doorbell_stride,
        "ready_timeout_ms": i.ready_timeout_ms,
        "min_page_size": i.cap.min_page_size(),
        "max_page_size": i.cap.max_page_size(),
        "command_sets": i.cap.command_sets(),
        "serial": i.serial,
        "model": i.model,
        "firmware": i.firmware,
        "max_transfer_bytes": i.max_transfer_bytes,
        "io_queues": i.io_queues,
        "page_size": i.page_size,
        "namespaces": i.namespaces,
        "iommu_mode": i.iommu_mode,
        "modes": i.modes,
        "shared_max_transfer_bytes": i.shared_max_transfer_bytes,
        "node_nsid": i.node_nsid,
        "quota_qpairs": i.quota_qpairs,
        "quota_maps": i.quota_maps,
    })
}

/// One line on the modes `i.modes` allows this caller, and why not owner.
pub(crate) fn modes_line(i: &Info) -> String {
    let mut s = format!("{}", i.modes);
    if !i.modes.shared {
        s.push_str(" (another file owns the controller: no shared queue pairs until it closes)");
    }
    if !i.modes.owner {
        let why = if i.node_nsid.is_some() {
            "a namespace node serves shared mode only"
        } else if !i.iommu_mode.is_translating() {
            "owner mode needs a translating IOMMU (or the module's allow_unsafe_no_iommu) and CAP_SYS_RAWIO"
        } else {
            "owner mode needs CAP_SYS_RAWIO and no kernel lockdown"
        };
        s.push_str(&format!("; not owner: {why}"));
    }
    s
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn print_info(ctrl: &Controller, i: &Info) {
    let c = &i.cap;
    println!(
        "{}: {} (PCI {:04x}:{:04x})",
        ctrl.path().display(),
        i.bdf,
        i.pci_vendor,
        i.pci_device
    );
    println!(
        "  NVMe version        {} (VS 0x{:08x})",
        i.version, i.version.raw
    );
    println!(
        "  max queue entries   {} (CAP.MQES {})",
        i.max_queue_entries, c.mqes
    );
    println!(
        "  doorbell stride     {} bytes (CAP.DSTRD {})",
        i.doorbell_stride, c.dstrd
    );
    println!(
        "  ready timeout       {} ms (CAP.TO {})",
        i.ready_timeout_ms, c.to
    );
    println!("  I/O queue pairs     {}", i.io_queues);
    match i.max_transfer_bytes {
        Some(b) => println!(
            "  max transfer        {} ({b} bytes)",
            human_bytes(b as u64)
        ),
        None => println!("  max transfer        no limit"),
    }
    println!("  page size           {} bytes", i.page_size);
    println!("  IOMMU mode          {}", i.iommu_mode);
    println!("  modes you may use   {}", modes_line(i));
    match i.shared_max_transfer_bytes {
        Some(b) => println!(
            "  shared max transfer {} ({b} bytes)",
            human_bytes(b as u64)
        ),
        None => println!("  shared max transfer not reported"),
    }
    if let Some(n) = i.node_nsid {
        println!("  this node           namespace {n} only");
    }
    let limit = |q: Option<u32>| q.map_or("no limit".to_string(), |n| n.to_string());
    println!(
        "  per-file quotas     {} queue pairs, {} mapped buffers",
        limit(i.quota_qpairs),
        limit(i.quota_maps)
    );
    for n in &i.namespaces {
        println!(
            "  namespace {:<9} {} blocks of {} bytes ({})",
            n.nsid,
            n.capacity_lbas,
            n.lba_size,
            human_bytes(n.capacity_bytes())
        );
    }
    println!("  CAP                 0x{:016x}", c.raw);
    println!("    contiguous queues required (CQR)   {}", yes(c.cqr));
    println!(
        "    arbitration mechanisms (AMS)       0x{:x}{}",
        c.ams,
        if c.ams & 1 != 0 {
            " (WRR with urgent)"
        } else {
            ""
        }
    );
    println!("    subsystem reset (NSSRS)            {}", yes(c.nssrs));
    println!(
        "    command sets (CSS)                 0x{:02x} ({})",
        c.css,
        c.command_sets().join(", ")
    );
    println!(
        "    page size min (MPSMIN)             {} bytes",
        c.min_page_size()
    );
    println!(
        "    page size max (MPSMAX)             {} bytes",
        c.max_page_size()
    );
    println!("    controller memory buffer (CMBS)    {}", yes(c.cmbs));
}
