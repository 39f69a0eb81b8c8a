// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! `bench --gpu`: the library's CPU-initiated transfers
//! ([`gpunvme::Transfers`]) into GPU memory and, the same I/O through the
//! same code, into host memory. Each cell gets a `Transfers` of QPAIRS
//! queue pairs of QD; QPAIRS worker threads keep QD asynchronous
//! transfers of `--bs` each in flight (into their own slots of one GPU
//! buffer registered once for the run, or into host buffers moved in and
//! handed back). Host and GPU cells alternate, so drift hits both alike.

use std::sync::Arc;
use std::time::Instant;

use gpunvme::{Buffer, Controller, Direction, DmaBuffer, TransferOptions, Transfers};

use super::stats::Measured;
use super::{
    cells, check_interrupt, plan_for, range_bytes, run_cell, skipped, BenchArgs, Cell, CpuClock,
    Plan, Run, TARGET_XFER_GPU, TARGET_XFER_HOST,
};
use crate::gpu_mem::{GpuMemory, GpuSource};
use crate::habits::{Progress, Unit};

/// What the transfers move data into.
enum Into<'a> {
    Host,
    Gpu(&'a GpuMemory),
}

/// A worker's slot: free (with its host buffer, if any) or in flight.
enum Slot {
    Free(Option<DmaBuffer>),
    Busy(gpunvme::Transfer, Direction, Instant),
}

#[allow(clippy::needless_range_loop)] // slots are replaced in place by index
fn worker(
    ctrl: &Arc<Controller>,
    t: &Transfers,
    plan: &Plan,
    index: u64,
    into: &Into<'_>,
) -> Result<Measured, String> {
    let (qd, bs) = (plan.qd as usize, plan.bs);
    let mut ops = plan.ops(index);
    let mut m = Measured::new();
    let mut clock = CpuClock::new();
    let mut measured = 0u64;
    let mut slots: Vec<Slot> = (0..qd)
        .map(|_| match into {
            Into::Host => DmaBuffer::with_len(ctrl, bs as usize)
                .map(|b| Slot::Free(Some(b)))
                .map_err(|e| e.to_string()),
            Into::Gpu(_) => Ok(Slot::Free(None)),
        })
        .collect::<Result<_, _>>()?;
    let submit = |slot: usize,
                  host: Option<DmaBuffer>,
                  ops: &mut super::workload::OpGen,
                  measured: &mut u64|
     -> Result<Slot, String> {
        let (dir, off) = ops.next_op();
        let (buffer, at) = match (into, host) {
            (Into::Gpu(g), _) => (
                Buffer::Gpu(g.buffer().clone()),
                (index as usize * qd + slot) as u64 * bs,
            ),
            (Into::Host, Some(h)) => (Buffer::Host(h), 0),
            (Into::Host, None) => return Err("a host slot lost its buffer".into()),
        };
        let t0 = Instant::now();
        let h = t
            .submit(dir, buffer, at, bs, off)
            .map_err(|e| e.error.to_string())?;
        if plan.stop.measuring(t0) {
            *measured += 1;
        }
        Ok(Slot::Busy(h, dir, t0))
    };
    for i in 0..qd {
        if plan.stop.done(measured) {
            break;
        }
        let Slot::Free(h) = std::mem::replace(&mut slots[i], Slot::Free(None)) else {
            unreachable!()
        };
        slots[i] = submit(i, h, &mut ops, &mut measured)?;
    }
    loop {
        let mut busy = 0;
        for i in 0..qd {
            let ready = match &slots[i] {
                Slot::Busy(h, ..) => {
                    busy += 1;
                    h.is_done()
                }
                Slot::Free(_) => false,
            };
            if !ready {
                continue;
            }
            let Slot::Busy(h, dir, t0) = std::mem::replace(&mut slots[i], Slot::Free(None)) else {
                unreachable!()
            };
            let now = Instant::now();
            clock.tick(&plan.stop, now);
            let done = h.wait().map_err(|e| e.error.to_string())?;
            if plan.stop.measuring(t0) {
                m.dir(dir).record(now - t0, bs);
            }
            slots[i] = if plan.stop.done(measured) {
                Slot::Free(done.buffer)
            } else {
                submit(i, done.buffer, &mut ops, &mut measured)?
            };
        }
        if busy == 0 {
            break;
        }
    }
    m.cpu = clock.used();
    Ok(m)
}

fn one_cell(
    a: &BenchArgs,
    ctrl: &Arc<Controller>,
    info: &gpunvme::Info,
    range: u64,
    qpairs: u32,
    qd: u32,
    into: &Into<'_>,
) -> Result<Cell, String> {
    let opts = TransferOptions {
        qpairs: qpairs as usize,
        qd,
        ..Default::default()
    };
    let t = Transfers::new(ctrl, info, super::nsid(a, info), &opts).map_err(|e| e.to_string())?;
    if a.bs > t.max_command_bytes() {
        // Split into several commands: still one transfer per I/O.
        eprintln!(
            "bench: --bs {} is split into commands of {} bytes (the controller's limit)",
            a.bs,
            t.max_command_bytes()
        );
    }
    let plan = plan_for(a, range, qd, qpairs);
    run_cell(a, qpairs, &plan, qpairs as usize, |i| {
        worker(ctrl, &t, &plan, i as u64, into)
    })
}

/// The two runs: transfers into host memory, and into GPU memory.
pub(super) fn runs(
    sysfs: &gpunvme::sysfs::Sysfs,
    a: &BenchArgs,
    src: &GpuSource,
) -> Result<(Run, Run), Box<dyn std::error::Error>> {
    let dev = a
        .device
        .as_ref()
        .ok_or("bench --gpu: name the gpunvme controller (DEVICE)")?;
    let ctrl = Arc::new(crate::blockio::open(sysfs, dev)?);
    let info = ctrl.info()?;
    let nsid = super::nsid(a, &info);
    let ns = *info
        .namespaces
        .iter()
        .find(|n| n.nsid == nsid)
        .ok_or_else(|| format!("no namespace {nsid} on {}", info.bdf))?;
    if a.bs % ns.lba_size as u64 != 0 {
        return Err(format!(
            "--bs {} is not a multiple of the {}-byte LBA size",
            a.bs, ns.lba_size
        )
        .into());
    }
    let range = range_bytes(a, ns.capacity_bytes());
    if range < a.bs {
        return Err(format!("the namespace is smaller than one {}-byte I/O", a.bs).into());
    }
    // One registration for the run: a bs slot per I/O in flight.
    let slots =
        *a.qpairs.iter().max().unwrap_or(&1) as u64 * *a.qd.iter().max().unwrap_or(&1) as u64;
    let bytes = slots * a.bs;
    if bytes > gpunvme::GpuBuffer::MAX_BYTES {
        return Err(format!(
            "bench --gpu: {slots} I/Os of {} in flight need {bytes} bytes of GPU memory, more than \
             one registration's {} MiB: lower --qd, --qpairs or --bs",
            a.bs,
            gpunvme::GpuBuffer::MAX_BYTES >> 20
        )
        .into());
    }
    let gpu = GpuMemory::new(&ctrl, src, bytes as usize)?;
    let mut host_cells = Vec::new();
    let mut gpu_cells = Vec::new();
    let mut bar = Progress::new("bench", 2 * cells(a), Unit::Items);
    for &qpairs in &a.qpairs {
        for &qd in &a.qd {
            check_interrupt(&gpu_cells)?;
            bar.set((host_cells.len() + gpu_cells.len()) as u64);
            if qpairs > info.io_queues || qd + 1 > info.max_queue_entries {
                let why = format!(
                    "controller granted {} I/O queues of at most {} entries",
                    info.io_queues, info.max_queue_entries
                );
                host_cells.push(skipped(qpairs, qd, why.clone()));
                gpu_cells.push(skipped(qpairs, qd, why));
                continue;
            }
            bar.set_what(format!(
                "bench {TARGET_XFER_HOST} {qpairs} qpair(s) QD {qd}"
            ));
            host_cells.push(one_cell(a, &ctrl, &info, range, qpairs, qd, &Into::Host)?);
            bar.set_what(format!("bench {TARGET_XFER_GPU} {qpairs} qpair(s) QD {qd}"));
            gpu_cells.push(one_cell(
                a,
                &ctrl,
                &info,
                range,
                qpairs,
                qd,
                &Into::Gpu(&gpu),
            )?);
        }
    }
    bar.finish();
    check_interrupt(&gpu_cells)?;
    let method = "gpunvme::Transfers (shared queue pairs, asynchronous transfers, one worker \
                  thread per queue pair keeping QD in flight)";
    Ok((
        Run {
            target: TARGET_XFER_HOST,
            device: info.bdf.clone(),
            method: format!("{method} into host memory (DmaBuffer)"),
            range_bytes: range,
            results: host_cells,
        },
        Run {
            target: TARGET_XFER_GPU,
            device: info.bdf.clone(),
            method: format!("{method} into GPU memory: {}", gpu.describe()),
            range_bytes: range,
            results: gpu_cells,
        },
    ))
}
