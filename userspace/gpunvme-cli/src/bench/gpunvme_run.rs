// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The gpunvme side of the bench: one worker thread per queue pair,
//! keeping QD commands in flight on its own pair (shared, or raw with
//! --owner), each command one `--bs` I/O into a slot of a buffer the pair
//! keeps (so no Rust code reaches it), with a PRP list when it spans more
//! than two pages (in the pair's PRP pool on a shared pair, in list pages
//! of a buffer of the worker's on a raw one). On a kernel namespace the
//! same workers drive the passthrough back end's shadow pairs.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use gpunvme::command::{build_prps, pages_spanned, prp_list_pages, PrpListMem};
use gpunvme::{Controller, DmaBuffer, Mode, QueuePair, Sqe, PAGE_SIZE};

use super::stats::Measured;
use super::{
    cells, check_interrupt, plan_for, range_bytes, run_cell, skipped, Baseline, CpuClock, Plan,
    Run, TARGET_PT, TARGET_RAW, TARGET_SHARED,
};
use crate::habits::{Progress, Unit};

/// One queue pair's worker: `qd` I/Os in flight until the plan stops;
/// returns what it measured.
fn worker(
    ctrl: &Arc<Controller>,
    nsid: u32,
    lba_size: u64,
    plan: &Plan,
    index: u64,
    mode: Mode,
) -> gpunvme::Result<Measured> {
    let (bs, qd) = (plan.bs as usize, plan.qd as usize);
    let slot_bytes = bs.div_ceil(PAGE_SIZE) * PAGE_SIZE;
    let buf = DmaBuffer::with_len(ctrl, qd * slot_bytes)?;
    let needs_list = pages_spanned(0, bs) > 2;
    let list_entries = pages_spanned(0, bs) - 1;
    let list_pages = prp_list_pages(0, bs);
    // A raw pair's lists: declared before the pair, so dropped after it
    // (a command may read its list until the pair is destroyed).
    let mut lists = match (needs_list, mode) {
        (true, Mode::Raw) => Some(DmaBuffer::new(ctrl, qd * list_pages)?),
        _ => None,
    };
    let mut qp = QueuePair::create_with(ctrl, plan.qd + 1, mode)?;
    if needs_list && mode == Mode::Shared {
        let have = qp.prp_pool().map_or(0, |p| p.slots(list_entries));
        if have < qd {
            return Err(gpunvme::Error::Invalid(format!(
                "bs {bs}: the shared pair's PRP pool holds {have} list(s) of {list_entries} entries, \
                 fewer than QD {qd}"
            )));
        }
    }
    // The pair keeps the data buffer from now on and releases it only once
    // it is destroyed: nothing else can reach it.
    let pages = buf.dma_addrs().to_vec();
    qp.keep_until_destroyed(buf);
    let per_slot = slot_bytes / PAGE_SIZE;
    let nlb = (bs as u64 / lba_size) as u32;
    let mut ops = plan.ops(index);
    let mut m = Measured::new();
    let mut clock = CpuClock::new();
    // Per CID: the slot, direction and submission time of its I/O.
    let mut of_cid: Vec<Option<(usize, gpunvme::Direction, Instant)>> = vec![None; qd + 1];
    let mut measured = 0u64;

    let mut issue = |qp: &mut QueuePair,
                     lists: &mut Option<DmaBuffer>,
                     slot: usize,
                     measured: &mut u64|
     -> gpunvme::Result<(u16, gpunvme::Direction, Instant)> {
        let (dir, off) = ops.next_op();
        let data = &pages[slot * per_slot..(slot + 1) * per_slot];
        let mem: Option<PrpListMem<'_>> = match (needs_list, lists.as_mut()) {
            (false, _) => None,
            (true, Some(l)) => Some(l.list_pages(slot * list_pages, list_pages)?),
            (true, None) => Some(
                qp.prp_pool_mut()
                    .expect("a shared pair has a pool")
                    .list_slot(slot, list_entries)?,
            ),
        };
        let prp = build_prps(data, 0, bs, mem).map_err(gpunvme::Error::Invalid)?;
        let lba = off / lba_size;
        let sqe = match dir {
            gpunvme::Direction::Read => Sqe::read(nsid, lba, nlb, prp),
            gpunvme::Direction::Write => Sqe::write(nsid, lba, nlb, prp),
        };
        let t = Instant::now();
        // SAFETY: the command names one `bs` slot of the buffer the pair
        // keeps until it is destroyed (no Rust code reaches it), and its
        // list slot, used by this command alone until its completion was
        // taken (each slot has one command in flight); the list memory
        // (pool or `lists`) outlives the pair.
        let cid = unsafe { qp.push(sqe)? };
        if plan.stop.measuring(t) {
            *measured += 1;
        }
        Ok((cid, dir, t))
    };

    for slot in 0..qd {
        if plan.stop.done(measured) {
            break;
        }
        let (cid, dir, t) = issue(&mut qp, &mut lists, slot, &mut measured)?;
        of_cid[cid as usize] = Some((slot, dir, t));
    }
    qp.ring();
    while qp.outstanding() > 0 {
        let c = qp.wait_any()?;
        let now = Instant::now();
        clock.tick(&plan.stop, now);
        let (slot, dir, t0) = of_cid[c.cid as usize].take().expect("known cid");
        if plan.stop.measuring(t0) {
            m.dir(dir).record(now - t0, bs as u64);
        }
        if !plan.stop.done(measured) {
            let (cid, dir, t) = issue(&mut qp, &mut lists, slot, &mut measured)?;
            of_cid[cid as usize] = Some((slot, dir, t));
            qp.ring();
        }
    }
    m.cpu = clock.used();
    drop(qp);
    drop(lists);
    Ok(m)
}

/// The kernel's path to the blocks of `d`'s window (`lba_size` bytes per
/// block), for the baselines of a passthrough run of `range` bytes.
fn baseline(d: &gpunvme::passthrough::Device, lba_size: u64, range: u64) -> Option<Baseline> {
    let r = d.window_claim()?;
    let w = d.window();
    let (block_device, offset) = match &r.partition {
        Some(p) => (PathBuf::from("/dev").join(p), 0),
        None => (PathBuf::from("/dev").join(&r.disk), w.start * lba_size),
    };
    Some(Baseline {
        block_device,
        offset,
        ng: PathBuf::from(format!(
            "/dev/ng{}",
            r.disk.strip_prefix("nvme").unwrap_or_default()
        )),
        ng_offset: w.start * lba_size,
        polled: d.polled(),
        range,
    })
}

/// The gpunvme matrix on shared (or, `Mode::Raw`, owner-mode raw) pairs,
/// or on a kernel namespace's passthrough back end; for the latter also
/// the kernel's path to the same blocks.
pub(super) fn run(
    sysfs: &gpunvme::sysfs::Sysfs,
    a: &super::BenchArgs,
    mode: Mode,
) -> Result<(Run, Option<Baseline>), Box<dyn std::error::Error>> {
    let dev = a
        .device
        .as_ref()
        .ok_or("bench --owner measures a gpunvme controller: name it (DEVICE) first")?;
    let ctrl = Arc::new(crate::blockio::open_io(sysfs, dev, &a.passthrough)?);
    let mode = crate::blockio::mode_for(&ctrl, mode == Mode::Raw, "bench")?;
    let info = ctrl.info()?;
    let nsid = super::nsid(a, &info);
    let ns = *info
        .namespaces
        .iter()
        .find(|n| n.nsid == nsid)
        .ok_or_else(|| format!("no namespace {nsid} on {}", info.bdf))?;
    let lba_size = ns.lba_size as u64;
    if a.bs % lba_size != 0 {
        return Err(format!(
            "--bs {} is not a multiple of the {lba_size}-byte LBA size",
            a.bs
        )
        .into());
    }
    let max = info
        .max_transfer_for(mode)
        .map_or(gpunvme::NO_MDTS_CAP as u64, |m| m as u64)
        .min(65536 * lba_size);
    if a.bs > max || (mode == Mode::Shared && pages_spanned(0, a.bs as usize) - 1 > 512) {
        return Err(format!(
            "--bs {} is larger than one {mode} command can move ({max} bytes)",
            a.bs
        )
        .into());
    }
    let range = range_bytes(a, ns.capacity_bytes());
    if range < a.bs {
        return Err(format!("the namespace is smaller than one {}-byte I/O", a.bs).into());
    }
    let pt = ctrl.passthrough().cloned();
    let target = match (&pt, mode) {
        (Some(_), _) => TARGET_PT,
        (None, Mode::Shared) => TARGET_SHARED,
        (None, Mode::Raw) => TARGET_RAW,
    };
    let mut results = Vec::new();
    let mut bar = Progress::new("bench", cells(a), Unit::Items);
    for &qpairs in &a.qpairs {
        for &qd in &a.qd {
            check_interrupt(&results)?;
            bar.set_what(format!("bench {target} {qpairs} qpair(s) QD {qd}"));
            bar.set(results.len() as u64);
            if qpairs > info.io_queues {
                results.push(skipped(
                    qpairs,
                    qd,
                    format!("controller granted {} I/O queues", info.io_queues),
                ));
                continue;
            }
            if qd + 1 > info.max_queue_entries {
                results.push(skipped(
                    qpairs,
                    qd,
                    format!("max queue entries {}", info.max_queue_entries),
                ));
                continue;
            }
            let plan = plan_for(a, range, qd, qpairs);
            results.push(
                run_cell(a, qpairs, &plan, qpairs as usize, |i| {
                    worker(&ctrl, nsid, lba_size, &plan, i as u64, mode)
                        .map_err(|e| -> Box<dyn std::error::Error + Send + Sync> { e.into() })
                })
                .map_err(|e| e.to_string())?,
            );
        }
    }
    bar.finish();
    check_interrupt(&results)?;
    let method = match (&pt, mode) {
        (Some(d), _) => format!(
            "gpunvme passthrough back end on {} (no module): shadow queue pairs driven from this \
             process, polled, one thread per queue pair; {} checks each SQE and submits it with \
             io_uring NVME_URING_CMD_IO on the namespace's /dev/ngXnY ({}), mirroring the \
             completions",
            ctrl.path().display(),
            if d.relay_inline() {
                "the relay, run inline by the worker threads while they wait (--relay-inline),"
            } else {
                "a relay thread of the library"
            },
            if d.polled() {
                "IORING_SETUP_IOPOLL on the driver's poll queues"
            } else {
                "interrupt completions: the namespace has no poll queues"
            }
        ),
        (None, Mode::Shared) => "gpunvme shared queue pairs mapped into this process, polled, one \
             thread per queue pair; a module thread per pair checks each SQE of the shadow SQ, \
             copies it into the real SQ, rings the doorbell and mirrors the CQEs"
            .to_string(),
        (None, Mode::Raw) => "gpunvme raw queue pairs (owner mode, GPUNVME_QPAIR_RAW) mapped into \
             this process, polled, one thread per queue pair: the real SQ, CQ and doorbells"
            .to_string(),
    };
    let baseline = pt.as_deref().and_then(|d| baseline(d, lba_size, range));
    Ok((
        Run {
            target,
            device: if pt.is_some() {
                ctrl.path().display().to_string()
            } else {
                info.bdf.clone()
            },
            method,
            range_bytes: range,
            results,
        },
        baseline,
    ))
}
