// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The whole back end without a device: a [`crate::Controller`] answered by
//! a passthrough back end on a model namespace ([`super::ModelDisk`], a
//! RAM disk), driven by the library's own queue pairs and [`crate::Io`]
//! exactly as a module node is, relay threads and all. Every byte moved is
//! checked against the disk, and the model's log shows what reached "the
//! kernel" (nothing that was refused does).

use std::sync::Arc;
use std::time::Duration;

use super::{open_model, open_model_inline, ModelDisk, Window};
use crate::command::opcode;
use crate::{pattern, Controller, DmaBuffer, Error, Io, Mode, Prp, QueuePair, Sqe};

const LBA: usize = 512;
const NSID: u32 = 3;
/// The disk: 8192 blocks; the window: 2048 blocks from LBA 1000.
const DISK_BLOCKS: u64 = 8192;
const WIN: Window = Window {
    start: 1000,
    blocks: 2048,
};

fn controller() -> (Arc<Controller>, Arc<ModelDisk>) {
    let disk = ModelDisk::with_data(DISK_BLOCKS, LBA);
    let dev = open_model(disk.clone(), NSID, WIN, 128 << 10, 2).unwrap();
    (Arc::new(Controller::with_passthrough(dev).unwrap()), disk)
}

/// The same back end with the relay inline (`Options::relay_inline`).
fn inline_controller() -> (Arc<Controller>, Arc<ModelDisk>) {
    let disk = ModelDisk::with_data(DISK_BLOCKS, LBA);
    let dev = open_model_inline(disk.clone(), NSID, WIN, 128 << 10).unwrap();
    (Arc::new(Controller::with_passthrough(dev).unwrap()), disk)
}

#[test]
fn get_info_describes_the_window_as_a_namespace_node() {
    let (ctrl, _) = controller();
    let info = ctrl.info().unwrap();
    assert_eq!(info.namespaces.len(), 1);
    let ns = info.namespaces[0];
    assert_eq!((ns.nsid, ns.lba_size, ns.capacity_lbas), (NSID, 512, 2048));
    assert_eq!(info.node_nsid, Some(NSID));
    assert!(info.modes.shared && !info.modes.owner);
    assert_eq!(info.shared_max_transfer_bytes, Some(128 << 10));
    assert_eq!(info.max_queue_entries, super::MAX_DEPTH);
    assert_eq!(info.bdf, "model");
}

#[test]
fn io_writes_and_reads_every_byte_through_the_relay_at_window_offsets() {
    let (ctrl, disk) = controller();
    let info = ctrl.info().unwrap();
    let mut io = Io::new(&ctrl, &info, NSID, 16).unwrap();
    // 300 blocks (150 KiB): two commands of at most 128 KiB, PRP lists in
    // the pair's pool; a second, unaligned buffer offset for good measure.
    let (lba, n) = (1700u64, 300u64);
    let bytes = n as usize * LBA;
    let mut buf = DmaBuffer::with_len(&ctrl, bytes + 4096).unwrap();
    pattern::fill(77, lba, LBA, &mut buf.as_mut_slice()[512..512 + bytes]);
    let buf = io.write(lba, n, buf, 512).unwrap();
    io.flush().unwrap();
    // What reached the disk is at window start + LBA.
    let on_disk = disk.read_bytes((WIN.start + lba) as usize * LBA, bytes);
    assert!(pattern::first_mismatch(77, lba, LBA, &on_disk).is_none());
    // Nothing before the window's start was touched.
    assert!(disk
        .read_bytes(0, WIN.start as usize * LBA)
        .iter()
        .all(|&b| b == 0));
    let mut buf = buf;
    buf.as_mut_slice().fill(0xa5);
    let buf = io.read(lba, n, buf, 0).unwrap();
    assert!(pattern::first_mismatch(77, lba, LBA, &buf.as_slice()[..bytes]).is_none());
    for (op, slba, _) in disk.log() {
        if op == opcode::READ || op == opcode::WRITE {
            assert!(
                (WIN.start..WIN.start + WIN.blocks).contains(&slba),
                "absolute LBA {slba}"
            );
        }
    }
    let c = ctrl
        .passthrough()
        .unwrap()
        .counters(io.qpair().qid())
        .unwrap();
    assert_eq!(c.get("sqes_rejected"), Some(0));
    assert!(
        c.get("sqes_accepted").unwrap() >= 5,
        "2 writes, a flush, 2 reads"
    );
}

/// Submits `sqe` raw on `qp` and returns its completion status.
fn raw_status(qp: &mut QueuePair, sqe: Sqe) -> crate::Status {
    // SAFETY: every address the tests put in `sqe` is either one the
    // relay must refuse (so nothing is ever written) or a page of a
    // buffer the test keeps alive and does not touch until the completion
    // is taken.
    let cid = unsafe { qp.submit(sqe) }.unwrap();
    qp.wait_raw(cid).unwrap().cqe.status
}

#[test]
fn commands_outside_the_window_or_the_rules_never_reach_the_kernel() {
    let (ctrl, disk) = controller();
    let buf = DmaBuffer::new(&ctrl, 4).unwrap();
    let page = buf.dma_addrs()[0];
    let mut qp = QueuePair::create(&ctrl, 8).unwrap();
    let pool = qp.memory().prp_dma;
    let prp = |p1| Prp { prp1: p1, prp2: 0 };
    let bad: Vec<(&str, Sqe, u8)> = vec![
        (
            "read past the window's last block",
            Sqe::read(NSID, WIN.blocks, 1, prp(page)),
            0x80,
        ),
        (
            "read straddling the window's end",
            Sqe::read(NSID, WIN.blocks - 2, 4, prp(page)),
            0x80,
        ),
        (
            "write at the window's absolute start",
            Sqe::write(NSID, WIN.start + WIN.blocks, 1, prp(page)),
            0x80,
        ),
        (
            "write zeroes past the end",
            Sqe::write_zeroes(NSID, WIN.blocks - 1, 2),
            0x80,
        ),
        (
            "another namespace",
            Sqe::read(NSID + 1, 0, 1, prp(page)),
            0x0b,
        ),
        (
            "an unregistered address",
            Sqe::read(NSID, 0, 1, prp(0x1000)),
            0x02,
        ),
        (
            "a host pointer",
            Sqe::read(NSID, 0, 1, prp(buf.as_slice().as_ptr() as u64)),
            0x02,
        ),
        (
            "data into the PRP pool",
            Sqe::read(NSID, 0, 1, prp(pool)),
            0x02,
        ),
        (
            "a list outside the pool",
            Sqe::read(
                NSID,
                0,
                24,
                Prp {
                    prp1: page,
                    prp2: buf.dma_addrs()[1] + 8,
                },
            ),
            0x02,
        ),
        (
            "Compare",
            {
                let mut s = Sqe::read(NSID, 0, 1, prp(page));
                s.dw[0] = (s.dw[0] & !0xff) | 0x05;
                s
            },
            0x01,
        ),
        ("Dataset Management", Sqe::new(0x09, NSID), 0x01),
        ("an admin opcode (Identify)", Sqe::new(0x06, NSID), 0x01),
        (
            "a fused command",
            {
                let mut s = Sqe::read(NSID, 0, 1, prp(page));
                s.dw[0] |= 1 << 8;
                s
            },
            0x02,
        ),
        (
            "an SGL",
            {
                let mut s = Sqe::read(NSID, 0, 1, prp(page));
                s.dw[0] |= 0x40 << 8;
                s
            },
            0x02,
        ),
        (
            "a metadata pointer",
            {
                let mut s = Sqe::read(NSID, 0, 1, prp(page));
                s.dw[4] = page as u32;
                s.dw[5] = (page >> 32) as u32;
                s
            },
            0x02,
        ),
        (
            "a transfer over the limit",
            Sqe::read(NSID, 0, 257, prp(page)),
            0x02,
        ),
    ];
    let before = disk.commands();
    for (what, sqe, sc) in &bad {
        let st = raw_status(&mut qp, *sqe);
        assert_eq!((st.sct, st.sc, st.dnr), (0, *sc, true), "{what}: {st:?}");
    }
    assert_eq!(
        disk.commands(),
        before,
        "a refused command reached the kernel"
    );
    let c = ctrl.passthrough().unwrap().counters(qp.qid()).unwrap();
    assert_eq!(c.get("sqes_rejected"), Some(bad.len() as u64));
    // The pair still works, at the window's last block.
    let st = raw_status(&mut qp, Sqe::read(NSID, WIN.blocks - 1, 1, prp(page)));
    assert!(st.is_success(), "{st:?}");
    assert_eq!(
        disk.log().last(),
        Some(&(opcode::READ, WIN.start + WIN.blocks - 1, 1))
    );
    drop(qp);
    drop(buf);
}

#[test]
fn scattered_pages_go_as_iovecs_and_land_in_order() {
    let (ctrl, disk) = controller();
    // Two buffers: a transfer whose pages alternate between them is not
    // contiguous in this process.
    let mut a = DmaBuffer::new(&ctrl, 2).unwrap();
    let mut b = DmaBuffer::new(&ctrl, 2).unwrap();
    a.as_mut_slice().fill(0x11);
    b.as_mut_slice().fill(0x22);
    let mut qp = QueuePair::create(&ctrl, 8).unwrap();
    let pages = [a.dma_addrs()[0], b.dma_addrs()[0], a.dma_addrs()[1]];
    {
        let pool = qp.prp_pool_mut().unwrap();
        let mut l = pool.list_slot(0, 2).unwrap();
        let plan = crate::command::prp_plan(&pages, 0, 3 * 4096, l.dma_addrs()).unwrap();
        l.write(&plan).unwrap();
        let sqe = Sqe::write(NSID, 0, 24, plan.prp);
        // SAFETY: the pages are the two buffers', alive and untouched
        // until the completion is taken; the list is in the pool slot.
        let cid = unsafe { qp.submit(sqe) }.unwrap();
        assert!(qp.wait(cid).is_ok());
    }
    let d = disk.read_bytes(WIN.start as usize * LBA, 3 * 4096);
    assert!(d[..4096].iter().all(|&x| x == 0x11));
    assert!(d[4096..8192].iter().all(|&x| x == 0x22));
    assert!(d[8192..].iter().all(|&x| x == 0x11));
    let c = ctrl.passthrough().unwrap().counters(qp.qid()).unwrap();
    assert_eq!(c.get("vectored_commands"), Some(1));
    drop(qp);
    drop((a, b));
}

#[test]
fn a_kernel_error_reaches_the_gpu_as_a_status_not_a_hang() {
    let (ctrl, disk) = controller();
    let info = ctrl.info().unwrap();
    let mut io = Io::new(&ctrl, &info, NSID, 4).unwrap();
    io.set_timeout(Duration::from_secs(5));
    let buf = DmaBuffer::new(&ctrl, 1).unwrap();
    // The path goes away (a fabrics target stopped): ENOTCONN for all.
    disk.set_fail_errno(libc::ENOTCONN);
    let e = io.read(0, 8, buf, 0).unwrap_err();
    let st = e.error.nvme_status().expect("an NVMe status");
    assert_eq!(
        (st.sct, st.sc, st.dnr),
        (3, 0x70, false),
        "Host Pathing Error"
    );
    let buf = e.buffer.expect("completed: the buffer comes back");
    // ... and comes back (a reconnect): the same pair works again.
    disk.set_fail_errno(0);
    assert!(io.read(0, 8, buf, 0).is_ok());
    let c = ctrl
        .passthrough()
        .unwrap()
        .counters(io.qpair().qid())
        .unwrap();
    assert_eq!(c.get("transport_errors"), Some(1));
    assert_eq!(c.get("last_errno"), Some(libc::ENOTCONN as u64));
}

#[test]
fn unmap_waits_for_the_pairs_and_a_stuck_pair_is_kept_not_freed() {
    let (ctrl, disk) = controller();
    {
        let buf = DmaBuffer::new(&ctrl, 1).unwrap();
        let qp = QueuePair::create(&ctrl, 4).unwrap();
        // A buffer dropped while a pair lives is parked (EBUSY), then
        // unmapped when the pair goes.
        drop(buf);
        assert_eq!(ctrl.deferred_unmaps(), 1);
        drop(qp);
        assert_eq!(ctrl.deferred_unmaps(), 0);
    }
    a_stuck_read_times_out_then_drains_at_destroy(&ctrl, &disk);
}

/// A read the model never completes: the wait times out, the pair is
/// poisoned and keeps the buffer. Then the model lets it complete and the
/// pair is destroyed: its destroy finds the command back (waiting out
/// DRAIN_DEADLINE with the model stalled would take 10 s).
fn a_stuck_read_times_out_then_drains_at_destroy(ctrl: &Arc<Controller>, disk: &ModelDisk) {
    let info = ctrl.info().unwrap();
    let dev = ctrl.passthrough().unwrap().clone();
    let mut io = Io::new(ctrl, &info, NSID, 4).unwrap();
    io.set_timeout(Duration::from_millis(200));
    let qid = io.qpair().qid();
    disk.set_stall(true);
    let e = io
        .read(0, 1, DmaBuffer::new(ctrl, 1).unwrap(), 0)
        .unwrap_err();
    assert!(matches!(e.error, Error::Timeout { .. }), "{}", e.error);
    assert!(e.buffer.is_none(), "a timed-out read keeps its buffer");
    assert!(io.qpair().is_poisoned());
    assert!(dev.counters(qid).is_some());
    disk.set_stall(false);
    drop(io);
    assert!(dev.counters(qid).is_none(), "destroyed once drained");
    assert_eq!(ctrl.kept_until_close(), 0);
}

#[test]
fn refusals_of_what_a_passthrough_back_end_has_not() {
    let (ctrl, _) = controller();
    let e = ctrl.claim_owner().unwrap_err().to_string();
    assert!(
        e.contains("owner mode needs a controller bound to the gpunvme module"),
        "{e}"
    );
    // The UAPI's answer, for programs that ask it directly.
    let e = QueuePair::create_with(&ctrl, 4, Mode::Raw).unwrap_err();
    assert_eq!(e.errno(), Some(libc::EPERM));
    let qp = QueuePair::create(&ctrl, 4).unwrap();
    let e = qp.export(crate::ExportKind::Sq).unwrap_err().to_string();
    assert!(e.contains("hipHostRegister"), "{e}");
    let f = std::fs::File::open("/dev/null").unwrap();
    use std::os::fd::AsFd;
    let e = crate::DmabufMapping::new(&ctrl, f.as_fd(), 4096)
        .unwrap_err()
        .to_string();
    assert!(e.contains("dmabuf read/write via io_uring"), "{e}");
    // Depths outside 2..=MAX_DEPTH.
    assert!(QueuePair::create(&ctrl, super::MAX_DEPTH + 1).is_err());
}

/// Six threads, each with its own pair: 20 rounds of a 100-block write and
/// read back at its own LBAs, every byte checked.
fn six_clients_each_check_their_own_blocks(ctrl: &Arc<Controller>, disk: &ModelDisk, seeds: u64) {
    let info = ctrl.info().unwrap();
    std::thread::scope(|s| {
        for t in 0..6u64 {
            let ctrl = ctrl.clone();
            let info = info.clone();
            s.spawn(move || {
                let mut io = Io::new(&ctrl, &info, NSID, 8).unwrap();
                let lba = t * 300;
                let mut buf = DmaBuffer::new(&ctrl, 25).unwrap();
                for round in 0..20u64 {
                    let seed = seeds + t * 1000 + round;
                    pattern::fill(seed, lba, LBA, &mut buf.as_mut_slice()[..100 * LBA]);
                    buf = io.write(lba, 100, buf, 0).unwrap();
                    buf.as_mut_slice().fill(0);
                    buf = io.read(lba, 100, buf, 0).unwrap();
                    assert!(
                        pattern::first_mismatch(seed, lba, LBA, &buf.as_slice()[..100 * LBA])
                            .is_none()
                    );
                }
            });
        }
    });
    assert!(disk.commands() >= 6 * 20 * 2);
}

#[test]
fn many_pairs_on_few_threads_each_get_their_own_completions() {
    let (ctrl, disk) = controller();
    six_clients_each_check_their_own_blocks(&ctrl, &disk, 0);
    assert!(ctrl.passthrough().unwrap().relay_threads() <= 2);
}

/// The relay threads on a real io_uring: /dev/null stands in for
/// /dev/ngXnY (it answers IORING_OP_URING_CMD with success since Linux
/// 6.2, moving no data). Every command comes back under the GPU's command
/// ID through the kernel, contiguous data through the fixed buffer the
/// relay thread registered; the checks still refuse what they refuse.
#[test]
fn a_kernel_ring_relays_a_pair_end_to_end() {
    if let Err(why) = super::uring_support() {
        eprintln!("SKIP: {why}");
        return;
    }
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .unwrap();
    let lim = super::check::Limits {
        nsid: NSID,
        lba_shift: 9,
        window: WIN,
        max_transfer: 128 << 10,
        qid: 0,
    };
    let dev = super::Device::new(
        "/dev/null".into(),
        super::device::Identity {
            name: "null".into(),
            ..Default::default()
        },
        lim,
        super::device::Target::Kernel {
            ng: null,
            iopoll: false,
            timeout_ms: 0,
            fixed_buffers: true,
        },
        super::relay_thread::Drivers::Threads(1),
        super::relay_thread::DEFAULT_SPIN,
        None,
    )
    .unwrap();
    let ctrl = Arc::new(Controller::with_passthrough(dev).unwrap());
    let buf = DmaBuffer::new(&ctrl, 8).unwrap();
    let mut qp = QueuePair::create(&ctrl, 16).unwrap();
    let pages: Vec<u64> = buf.dma_addrs().to_vec();
    let mut cids = Vec::new();
    for i in 0..8u64 {
        let prp = Prp {
            prp1: pages[i as usize],
            prp2: 0,
        };
        let sqe = if i % 2 == 0 {
            Sqe::read(NSID, i * 8, 8, prp)
        } else {
            Sqe::write(NSID, i * 8, 8, prp)
        };
        // SAFETY: each names one page of `buf`, which lives (untouched)
        // until every completion is taken below.
        cids.push(unsafe { qp.push(sqe) }.unwrap());
    }
    cids.push(qp.push_no_data(Sqe::flush(NSID)).unwrap());
    qp.ring();
    for cid in cids {
        let c = qp.wait(cid).unwrap();
        assert_eq!(c.cid, cid);
    }
    let st = raw_status(
        &mut qp,
        Sqe::read(
            NSID,
            WIN.blocks,
            1,
            Prp {
                prp1: pages[0],
                prp2: 0,
            },
        ),
    );
    assert_eq!(st.sc, 0x80);
    let c = ctrl.passthrough().unwrap().counters(qp.qid()).unwrap();
    assert_eq!(c.get("sqes_accepted"), Some(9));
    assert_eq!(c.get("sqes_rejected"), Some(1));
    assert_eq!(c.get("cqes_mirrored"), Some(9));
    assert_eq!(
        c.get("transport_errors"),
        Some(0),
        "/dev/null answers success"
    );
    let fixed = c.get("fixed_buffer_commands").unwrap();
    match ctrl.passthrough().unwrap().fixed_buffer_error() {
        None => assert_eq!(fixed, 8, "every data command through the fixed buffer"),
        Some(why) => eprintln!("no fixed buffers here ({why}): {fixed} commands used one"),
    }
    drop(qp);
    drop(buf);
}

#[test]
fn map_host_refuses_an_unmapped_range_and_takes_a_mapped_one() {
    use gpunvme_sys as sys;
    let disk = ModelDisk::with_data(DISK_BLOCKS, LBA);
    let dev = open_model(disk, NSID, WIN, 128 << 10, 1).unwrap();
    // Two pages mapped, then the second unmapped: a hole at a known place.
    // SAFETY: a fresh anonymous mapping, ours alone.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            8192,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(base, libc::MAP_FAILED);
    // SAFETY: the second page of the mapping above; nothing uses it.
    assert_eq!(
        unsafe { libc::munmap(base.cast::<u8>().add(4096).cast(), 4096) },
        0
    );
    let mut addrs = [0u64; 2];
    let mut map = |len: u64| {
        let mut m = sys::gpunvme_map_host {
            size: std::mem::size_of::<sys::gpunvme_map_host>() as u32,
            version: sys::GPUNVME_UAPI_VERSION,
            addr: base as u64,
            len,
            dma_addrs: addrs.as_mut_ptr() as u64,
            ..Default::default()
        };
        // SAFETY: a gpunvme_map_host whose dma_addrs has room for two.
        unsafe {
            dev.ioctl(
                sys::GPUNVME_IOC_MAP_HOST,
                (&mut m as *mut sys::gpunvme_map_host).cast(),
            )
        }
    };
    assert_eq!(map(8192), Err(libc::EFAULT), "a range with a hole");
    assert_eq!(map(4096), Ok(0), "the mapped page alone");
    drop(dev);
    // SAFETY: the first page, still mapped; the back end that recorded its
    // address (no pair used it) is gone.
    assert_eq!(unsafe { libc::munmap(base, 4096) }, 0);
}

#[test]
fn an_inline_relay_moves_every_byte_with_no_thread_of_its_own() {
    let (ctrl, disk) = inline_controller();
    let dev = ctrl.passthrough().unwrap().clone();
    assert!(dev.relay_inline());
    let info = ctrl.info().unwrap();
    let mut io = Io::new(&ctrl, &info, NSID, 16).unwrap();
    let (lba, n) = (900u64, 300u64);
    let bytes = n as usize * LBA;
    let mut buf = DmaBuffer::with_len(&ctrl, bytes).unwrap();
    pattern::fill(91, lba, LBA, &mut buf.as_mut_slice()[..bytes]);
    let mut buf = io.write(lba, n, buf, 0).unwrap();
    let on_disk = disk.read_bytes((WIN.start + lba) as usize * LBA, bytes);
    assert!(pattern::first_mismatch(91, lba, LBA, &on_disk).is_none());
    buf.as_mut_slice().fill(0x5a);
    let buf = io.read(lba, n, buf, 0).unwrap();
    assert!(pattern::first_mismatch(91, lba, LBA, &buf.as_slice()[..bytes]).is_none());
    assert_eq!(
        dev.relay_threads(),
        0,
        "the waiter relayed: no thread was started"
    );
    let qid = io.qpair().qid();
    drop(io);
    assert!(
        dev.counters(qid).is_none(),
        "destroyed (drained by the destroying thread)"
    );
}

#[test]
fn an_inline_relay_relays_only_while_someone_waits() {
    let (ctrl, disk) = inline_controller();
    let buf = DmaBuffer::new(&ctrl, 1).unwrap();
    let mut qp = QueuePair::create(&ctrl, 4).unwrap();
    let prp = Prp {
        prp1: buf.dma_addrs()[0],
        prp2: 0,
    };
    // SAFETY: the page is `buf`'s, alive and untouched until the
    // completion is taken below.
    let cid = unsafe { qp.push(Sqe::read(NSID, 5, 8, prp)) }.unwrap();
    qp.ring();
    // Rung, and nobody waits (a GPU polling the mirror would be such a
    // client): nothing reaches the kernel.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(disk.commands(), 0);
    // The wait relays it.
    let c = qp.wait(cid).unwrap();
    assert!(c.cqe.status.is_success());
    assert_eq!(disk.commands(), 1);
}

#[test]
fn inline_waiters_on_many_pairs_relay_each_others_commands() {
    let (ctrl, disk) = inline_controller();
    six_clients_each_check_their_own_blocks(&ctrl, &disk, 5000);
    assert_eq!(ctrl.passthrough().unwrap().relay_threads(), 0);
}

#[test]
fn an_inline_pair_with_a_stuck_command_times_out_and_drains_at_its_destroy() {
    // The destroy relays until the command is back (no thread does).
    let (ctrl, disk) = inline_controller();
    a_stuck_read_times_out_then_drains_at_destroy(&ctrl, &disk);
}
