// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! `gpunvme probe`: the GPU runtime and GPUs, the controllers bound to
//! gpunvme and the modes they offer, and the round-trip self-test of the
//! queue memory (host-mapped memory, and with DEVICE a shared pair's
//! imported regions) on one GPU.

use std::path::PathBuf;

use clap::Args;
use gpunvme::sysfs::{Sysfs, GPUNVME_DRIVER};
use gpunvme::{Controller, Info, Mode, QueuePair};
use gpunvme_gpu::selftest::SelfTest;
use gpunvme_gpu::{fine_grain, Gpu, ProbeReport};
use serde_json::json;

use crate::habits::{parse_device, Device, Output};
use crate::{modes_line, Res};

#[derive(Args, Debug)]
pub struct ProbeArgs {
    /// A controller bound to gpunvme (a PCI address, /dev/gpunvmeN,
    /// gpunvmeN or /dev/gpunvmeNnM): the self-test also covers a shared
    /// queue pair of it, as gpu-run imports one into the GPU.
    #[arg(value_name = "DEVICE", value_parser = parse_device)]
    pub device: Option<Device>,
    /// The GPU the self-test runs on (its index in its runtime).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub gpu: u32,
    /// Where `make kernels` put the code objects (the self-test's kernel).
    #[arg(long, value_name = "DIR", default_value = "kernels/build")]
    pub code_objects: PathBuf,
    /// Leave the self-test out (the report says it was skipped).
    #[arg(long)]
    pub skip_self_test: bool,
    #[command(flatten)]
    pub out: Output,
}

/// A controller bound to gpunvme as `probe` sees it: its node's answer to
/// GET_INFO, or why there is none.
struct Probed {
    bdf: String,
    node: Option<PathBuf>,
    info: Result<Info, String>,
}

impl Probed {
    fn json(&self) -> serde_json::Value {
        match &self.info {
            Ok(i) => json!({
                "bdf": self.bdf, "node": self.node, "iommu_mode": i.iommu_mode,
                "modes": i.modes, "node_nsid": i.node_nsid,
            }),
            Err(e) => json!({"bdf": self.bdf, "node": self.node, "error": e}),
        }
    }
}

fn probe_controllers(sysfs: &Sysfs) -> Vec<Probed> {
    let Ok(ctrls) = sysfs.list() else {
        return Vec::new();
    };
    ctrls
        .into_iter()
        .filter(|c| c.driver.as_deref() == Some(GPUNVME_DRIVER))
        .map(|c| {
            let info = match &c.node {
                None => Err("no /dev/gpunvme<N> node found".to_string()),
                Some(node) => Controller::open(node)
                    .and_then(|ctrl| ctrl.info())
                    .map_err(|e| e.to_string()),
            };
            Probed {
                bdf: c.bdf,
                node: c.node,
                info,
            }
        })
        .collect()
}

/// The self-test as probe ran it (or why it did not).
enum Tested {
    Skipped,
    NotRun(String),
    Ran { gpu: String, st: SelfTest },
}

impl Tested {
    fn json(&self) -> serde_json::Value {
        match self {
            Tested::Skipped => crate::self_test::json(None, true),
            Tested::NotRun(why) => json!({"skipped": false, "not_run": why}),
            Tested::Ran { gpu, st } => {
                let mut v = crate::self_test::json(Some(st), false);
                v["gpu"] = json!(gpu);
                v
            }
        }
    }
}

/// The self-test on GPU `a.gpu`: a host-mapped page and, with a device, a
/// shared pair's imported regions. `Err` only where the user named a
/// device and the test could not run there.
fn self_test(
    sysfs: &Sysfs,
    a: &ProbeArgs,
    r: &ProbeReport,
    fg: &fine_grain::Decision,
) -> Result<Tested, String> {
    if a.skip_self_test {
        return Ok(Tested::Skipped);
    }
    let not_run = |why: String| {
        if a.device.is_some() {
            Err(format!("probe: the self-test could not run: {why}"))
        } else {
            Ok(Tested::NotRun(why))
        }
    };
    if let fine_grain::Decision::Conflict { .. } = fg {
        return not_run(fg.describe());
    }
    if r.devices.is_empty() {
        return not_run("no GPU".into());
    }
    let gpu = match Gpu::open(a.gpu) {
        Ok(g) => g,
        Err(e) => return not_run(e.to_string()),
    };
    let name = format!(
        "{} {} ({})",
        gpu.device().index,
        gpu.device().name,
        gpu.device().arch
    );
    let page = gpu.alloc_host_mapped(4096).map_err(|e| e.to_string())?;
    let mut cells = vec![crate::self_test::host_cell(
        &gpu,
        &page,
        "host-mapped memory",
    )];
    let mut queues = Vec::new();
    if let Some(d) = &a.device {
        let ctrl = std::sync::Arc::new(
            crate::blockio::open(sysfs, d)
                .map_err(|e| format!("probe: the self-test could not run on {d}: {e}"))?,
        );
        let qp = QueuePair::create_with(
            &ctrl,
            gpunvme::sys::GPUNVME_MIN_QUEUE_DEPTH.max(2),
            Mode::Shared,
        )
        .map_err(|e| format!("probe: a shared queue pair on {d}: {e}"))?;
        match crate::gpu_run::import_pair(&gpu, qp, None, true) {
            Ok(gq) => queues.push(gq),
            Err(failure) => {
                let (_, reports, why) = *failure;
                let all: Vec<String> = reports.iter().map(|r| r.describe()).collect();
                return Err(format!("probe: {why}: {}", all.join("; ")));
            }
        }
        cells.extend(crate::self_test::queue_cells(&queues));
    }
    // SAFETY: the cells are in `page` and `queues`, kept until the test
    // returned and leaked if its kernel may still run.
    let st = match unsafe { crate::self_test::run(&gpu, &a.code_objects, cells) } {
        Ok(st) => st,
        Err(e) => return not_run(e.to_string()),
    };
    if st.kernel_still_running {
        std::mem::forget(queues);
        std::mem::forget(page);
        // The runtime stays loaded under it too (the Gpu counts it).
    }
    Ok(Tested::Ran { gpu: name, st })
}

pub fn probe(sysfs: &Sysfs, a: &ProbeArgs) -> Res {
    // Before HIP loads: consumer RDNA maps host memory fine-grained only
    // with this set (the self-test's host-mapped cell needs it).
    // SAFETY: probe starts no thread before this (main parsed the
    // arguments and called it), so nothing reads the environment meanwhile.
    let fg = unsafe { fine_grain::prepare() };
    let r = gpunvme_gpu::probe();
    let module = sysfs.driver_loaded(GPUNVME_DRIVER);
    let controllers = probe_controllers(sysfs);
    // A failure is reported after the rest of the report, not instead of it.
    let (tested, failed) = match self_test(sysfs, a, &r, &fg) {
        Ok(t) => {
            let why = match &t {
                Tested::Ran { st, .. } => st.refusal().map(|w| format!("probe: {w}")),
                _ => None,
            };
            (t, why)
        }
        Err(e) => (Tested::NotRun(e.clone()), Some(e)),
    };
    if a.out.json() {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "gpu": r, "gpunvme_module_loaded": module,
                "controllers": controllers.iter().map(Probed::json).collect::<Vec<_>>(),
                "fine_grain": fg.describe(), "self_test": tested.json(),
            }))?
        );
    } else {
        print_report(sysfs, &r, module, &controllers, &fg, &tested);
    }
    match failed {
        Some(why) => Err(why.into()),
        None => Ok(()),
    }
}

fn print_report(
    sysfs: &Sysfs,
    r: &ProbeReport,
    module: bool,
    controllers: &[Probed],
    fg: &fine_grain::Decision,
    tested: &Tested,
) {
    match &r.runtime {
        Some(rt) => println!(
            "GPU runtime: {} ({}{})",
            rt.kind,
            rt.library,
            rt.version
                .map(|v| format!(", version {v}"))
                .unwrap_or_default()
        ),
        None => println!("GPU runtime: none found"),
    }
    for a in &r.attempts {
        println!("  tried {}: {}", a.library, a.outcome);
    }
    if r.devices.is_empty() {
        println!("GPUs: none");
    } else {
        println!("GPUs:");
        for d in &r.devices {
            println!(
                "  [{}] {} {}{}: {}",
                d.index,
                d.name,
                d.arch,
                d.pci_bus_id
                    .as_ref()
                    .map(|b| format!(" at {b}"))
                    .unwrap_or_default(),
                d.doorbell
            );
            println!("      CQ: {} ({})", d.cq, d.cq_reason);
            println!("      queue memory: {}", d.queue_memory);
        }
    }
    println!("Doorbell mapping: {}", r.doorbell);
    println!("  why: {}", r.reason);
    println!(
        "  shared queue pairs (the default) always go through the module's relay, for any GPU;"
    );
    println!("  only raw pairs (owner mode, --owner) need the GPU to ring the controller directly");
    println!(
        "gpunvme module: {}",
        if module {
            "loaded".to_string()
        } else {
            format!(
                "not loaded (no {}/bus/pci/drivers/gpunvme)",
                sysfs.root().display()
            )
        }
    );
    if module && controllers.is_empty() {
        println!("gpunvme controllers: none bound (`gpunvme bind BDF`)");
    }
    for c in controllers {
        let node = c
            .node
            .as_ref()
            .map_or("no node".to_string(), |p| p.display().to_string());
        match &c.info {
            Err(e) => println!("controller {} ({node}): {e}", c.bdf),
            Ok(i) => println!(
                "controller {} ({node}): IOMMU {}; modes you may use: {}",
                c.bdf,
                i.iommu_mode,
                modes_line(i)
            ),
        }
    }
    println!("{}", fg.describe());
    match tested {
        Tested::Skipped => println!("{}", crate::self_test::SKIPPED),
        Tested::NotRun(why) => println!("Self-test: not run: {why}"),
        Tested::Ran { gpu, st } => {
            println!(
                "Self-test on GPU {gpu}: {}",
                if st.passed() { "passed" } else { "FAILED" }
            );
            for c in &st.cells {
                println!("  {}", c.line());
            }
            if st.kernel_still_running {
                println!("  the self-test kernel did not end after its stop flag: the GPU may need a reset");
            }
        }
    }
    if r.devices.is_empty() {
        println!();
        if r.runtime.is_none() {
            println!("Missing: a GPU runtime. Install ROCm (libamdhip64.so) for an AMD GPU or the NVIDIA driver");
            println!("(libcuda.so.1) for an NVIDIA GPU, with the GPU visible to this system.");
        } else {
            println!("Missing: a GPU. The runtime loaded but reports no device (driver not loaded, no permission");
            println!("on /dev/kfd or /dev/nvidia*, or no GPU in this machine).");
        }
        println!("Without a GPU nothing can drive the NVMe queues from the GPU side. The relay of shared");
        println!("queue pairs (the CPU bridge) runs inside the gpunvme kernel module: it needs the module loaded");
        println!("and a controller bound to it (`gpunvme bind BDF`), and a GPU to serve.");
    } else if !module {
        println!();
        println!("Both modes need the gpunvme kernel module (shared pairs are relayed by it, raw pairs are");
        println!("created by it): load it and bind a controller with `gpunvme bind BDF`.");
    }
}
