// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! [`Transfers`] and [`GpuBuffer`] through real memory, against the
//! in-process controller model (`crate::model`): a memfd stands in for the
//! dma-buf (the model "DMAs" through a mapping of its own, the test reads
//! and writes the same pages through another, as a GPU would see them).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::io::tests::{info, LBA};
use crate::map::Mapping;
use crate::model::{Event, Model};
use crate::{pattern, GpuBufferCache};

const BLOCKS: usize = 4096; // 2 MiB namespace

/// A memfd of `len` bytes standing in for a dma-buf, and the test's own
/// mapping of its pages (the "GPU's" view).
fn fake_vram(len: usize) -> (OwnedFd, Mapping) {
    // SAFETY: a fresh memfd; the name is NUL-terminated.
    let fd = unsafe { libc::memfd_create(c"fake-vram".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: fd is ours and open.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain ftruncate of our memfd.
    assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), len as i64) }, 0);
    let view = Mapping::shared(fd.as_raw_fd(), 0, len).unwrap();
    (fd, view)
}

fn view(m: &mut Mapping) -> &mut [u8] {
    // SAFETY: the test's own shared mapping; the model writes these pages
    // only while a transfer runs, and the tests look between transfers.
    unsafe { std::slice::from_raw_parts_mut(m.ptr(), m.len()) }
}

/// `pairs` shared model pairs of depth `depth` on one controller, as one
/// `Transfers` with commands of at most `max_cmd` bytes.
fn transfers(
    pairs: usize,
    depth: u32,
    max_cmd: usize,
    timeout: Duration,
) -> (Arc<Controller>, Arc<Model>, Transfers) {
    let (ctrl, model) = Model::controller(BLOCKS, LBA);
    let ios = (0..pairs)
        .map(|_| {
            Io::with_qpair(model.qpair(&ctrl, depth, Mode::Shared), &info(64 << 10), 1).unwrap()
        })
        .collect();
    let opts = TransferOptions {
        max_command_bytes: Some(max_cmd),
        timeout,
        ..Default::default()
    };
    let t = Transfers::from_ios(&ctrl, ios, &opts).unwrap();
    (ctrl, model, t)
}

fn disk_mismatch(model: &Model, seed: u64, lba: u64, count: usize) -> Option<String> {
    let d = model.disk.lock().unwrap();
    let at = lba as usize * LBA;
    pattern::first_mismatch(seed, lba, LBA, &d[at..at + count * LBA]).map(|m| m.to_string())
}

/// GPU memory to the namespace and back, every byte checked, in 8 KiB
/// commands over three queue pairs of depth 4 (so pieces wait in the
/// backlogs), at a buffer offset that is not page aligned.
#[test]
fn gpu_memory_round_trip_split_over_queue_pairs() {
    let (ctrl, model, t) = transfers(3, 4, 8 << 10, DEFAULT_TIMEOUT);
    let (fd, mut v) = fake_vram(1 << 20);
    let buf = GpuBuffer::register(&ctrl, &fd).unwrap();
    drop(fd); // the import holds its own reference
    assert_eq!(buf.len(), 1 << 20);
    let (lba, count, off) = (100u64, 1000usize, 2048u64);
    let len = (count * LBA) as u64;
    let mem = view(&mut v);
    mem.fill(0x5a);
    pattern::fill(
        3,
        lba,
        LBA,
        &mut mem[off as usize..off as usize + count * LBA],
    );
    t.write(&buf, off, len, lba * LBA as u64).unwrap();
    assert_eq!(disk_mismatch(&model, 3, lba, count), None);
    let per_pair = t.commands();
    assert_eq!(per_pair.iter().sum::<u64>(), len.div_ceil(8 << 10));
    assert!(
        per_pair.iter().all(|&c| c > 0),
        "every pair used: {per_pair:?}"
    );

    mem.fill(0xa5);
    t.read(&buf, off, len, lba * LBA as u64).unwrap();
    let mem = view(&mut v);
    assert_eq!(
        pattern::first_mismatch(3, lba, LBA, &mem[off as usize..off as usize + count * LBA]),
        None
    );
    assert!(
        mem[..off as usize].iter().all(|&b| b == 0xa5),
        "wrote before"
    );
    assert!(
        mem[off as usize + count * LBA..].iter().all(|&b| b == 0xa5),
        "and after"
    );
    assert_eq!(t.qpairs(), (3, 3));
}

/// Block-addressed, asynchronous, from four threads at once into one
/// buffer: every transfer's bytes land where they belong.
#[test]
fn several_transfers_in_flight_from_several_threads() {
    let (ctrl, model, t) = transfers(2, 8, 16 << 10, DEFAULT_TIMEOUT);
    {
        let mut d = model.disk.lock().unwrap();
        pattern::fill(11, 0, LBA, &mut d[..]);
    }
    let (fd, mut v) = fake_vram(1 << 20);
    let buf = GpuBuffer::register(&ctrl, &fd).unwrap();
    view(&mut v).fill(0);
    std::thread::scope(|s| {
        for k in 0..4u64 {
            let (t, buf) = (&t, &buf);
            s.spawn(move || {
                // Thread k: blocks 512k .. 512k + 500, twice, into its quarter.
                let hs: Vec<Transfer> = (0..2)
                    .map(|j| {
                        t.submit_blocks(
                            Direction::Read,
                            512 * k + 250 * j,
                            250,
                            Buffer::Gpu(buf.clone()),
                            (k * (256 << 10)) + j * 250 * LBA as u64,
                        )
                        .unwrap()
                    })
                    .collect();
                for h in hs {
                    let done = h.wait().unwrap();
                    assert_eq!(done.bytes, 250 * LBA as u64);
                    assert!(done.buffer.is_none());
                }
            });
        }
    });
    let mem = view(&mut v);
    for k in 0..4usize {
        let at = k * (256 << 10);
        assert_eq!(
            pattern::first_mismatch(11, 512 * k as u64, LBA, &mem[at..at + 500 * LBA]),
            None,
            "quarter {k}"
        );
        assert!(mem[at + 500 * LBA..at + (256 << 10)]
            .iter()
            .all(|&b| b == 0));
    }
}

/// Host memory through the same path: the buffer is moved in and comes
/// back with the result.
#[test]
fn a_host_buffer_comes_back_once_every_command_completed() {
    let (ctrl, model, t) = transfers(2, 4, 4096, DEFAULT_TIMEOUT);
    let mut b = DmaBuffer::new(&ctrl, 16).unwrap();
    pattern::fill(5, 8, LBA, b.as_mut_slice());
    let h = t
        .submit(
            Direction::Write,
            Buffer::Host(b),
            0,
            16 * 4096,
            8 * LBA as u64,
        )
        .unwrap();
    let mut b = h.wait().unwrap().buffer.expect("host buffer back");
    assert_eq!(disk_mismatch(&model, 5, 8, 128), None);
    b.as_mut_slice().fill(0);
    let h = t
        .submit(
            Direction::Read,
            Buffer::Host(b),
            4096,
            15 * 4096,
            8 * LBA as u64,
        )
        .unwrap();
    assert!(h.wait_for(Duration::from_secs(5)));
    let b = h.wait().unwrap().buffer.unwrap();
    assert!(b.as_slice()[..4096].iter().all(|&x| x == 0));
    assert_eq!(
        pattern::first_mismatch(5, 8, LBA, &b.as_slice()[4096..]),
        None
    );
}

/// Requests the controller could not carry out are refused before any
/// command, with a reason, and a host buffer comes back in the error.
#[test]
fn refused_requests_say_why_and_submit_nothing() {
    let (ctrl, _model, t) = transfers(2, 4, 64 << 10, DEFAULT_TIMEOUT);
    let (fd, _v) = fake_vram(64 << 10);
    let buf = GpuBuffer::register(&ctrl, &fd).unwrap();
    let cap = (BLOCKS * LBA) as u64;
    for (boff, len, dev, want) in [
        (0, 100, 0, "whole 512-byte blocks"),
        (0, 512, 100, "whole 512-byte blocks"),
        (0, 0, 0, "whole 512-byte blocks"),
        (2, 512, 0, "not dword aligned"),
        (4096, 64 << 10, 0, "do not fit"),
        (u64::MAX - 3, 512, 0, "do not fit"),
        (0, 1024, cap - 512, "beyond namespace"),
    ] {
        let e = t.read(&buf, boff, len, dev).unwrap_err();
        assert!(e.to_string().contains(want), "{boff} {len} {dev}: {e}");
    }
    let (other, _m) = Model::controller(8, LBA);
    let hb = DmaBuffer::new(&other, 1).unwrap();
    let e = t
        .submit(Direction::Read, Buffer::Host(hb), 0, 512, 0)
        .unwrap_err();
    assert!(e.error.to_string().contains("another open file"), "{e}");
    assert!(e.buffer.is_some(), "refused: the host buffer is back");
    assert_eq!(t.commands(), vec![0, 0]);
}

/// Dropped when the test says so, to see when the owner goes.
struct Owner(Arc<AtomicBool>);
impl Drop for Owner {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// The soundness rule at run time: a read that times out fails, its
/// queue pair is taken out, and that pair keeps the GPU buffer and the
/// allocation it owns (the controller may still write it) even after the
/// caller drops its handle; they go only after the pair is destroyed.
/// Other pairs go on working meanwhile.
#[test]
fn a_timeout_keeps_the_gpu_buffer_and_its_owner_until_the_pair_is_destroyed() {
    let (ctrl, model, t) = transfers(2, 4, 64 << 10, Duration::from_millis(100));
    let (fd, _v) = fake_vram(64 << 10);
    let freed = Arc::new(AtomicBool::new(false));
    let buf = GpuBuffer::register_owned(&ctrl, &fd, Owner(freed.clone())).unwrap();
    let handle = buf.mapping().handle();
    assert!(buf.owner::<Owner>().is_some());
    model.knobs.stall.store(true, Ordering::Release);
    let t0 = Instant::now();
    let e = t.read(&buf, 0, 4096, 0).unwrap_err();
    assert!(t0.elapsed() >= Duration::from_millis(100));
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert_eq!(t.qpairs(), (2, 1), "the late pair is out");
    drop(buf);
    assert!(
        !freed.load(Ordering::Acquire),
        "the owner outlives the timed-out command"
    );
    assert!(model.mapped().contains(&handle), "and so does the import");

    // The other pair still works (a host buffer this time), and the
    // stalled controller completes the late read into memory still mapped.
    model.knobs.stall.store(false, Ordering::Release);
    let hb = DmaBuffer::new(&ctrl, 1).unwrap();
    let h = t
        .submit(Direction::Read, Buffer::Host(hb), 0, 4096, 8192)
        .unwrap();
    assert!(h.wait().unwrap().buffer.is_some());
    std::thread::sleep(Duration::from_millis(20));
    assert!(!freed.load(Ordering::Acquire));

    drop(t);
    assert!(
        freed.load(Ordering::Acquire),
        "released with the destroyed pair"
    );
    let log = model.log();
    let destroyed = log
        .iter()
        .rposition(|e| matches!(e, Event::Destroy(_, Ok(()))))
        .unwrap();
    let unmapped = log
        .iter()
        .position(|e| *e == Event::Unmap(handle, Ok(())))
        .expect("the import is UNMAPped");
    assert!(destroyed < unmapped, "{log:?}");
}

/// A host buffer whose command timed out never comes back: the error
/// carries none, and the poisoned pair keeps it.
#[test]
fn a_timed_out_host_transfer_does_not_hand_its_buffer_back() {
    let (ctrl, model, t) = transfers(1, 4, 64 << 10, Duration::from_millis(50));
    model.knobs.stall.store(true, Ordering::Release);
    let hb = DmaBuffer::new(&ctrl, 4).unwrap();
    let handle = hb.handle();
    let e = t
        .submit(Direction::Read, Buffer::Host(hb), 0, 4 * 4096, 0)
        .unwrap()
        .wait()
        .unwrap_err();
    assert!(matches!(e.error, Error::Timeout { .. }), "{e}");
    assert!(e.buffer.is_none());
    // Every pair is out: a new request is refused, its buffer handed back.
    let e = t
        .submit(
            Direction::Read,
            Buffer::Host(DmaBuffer::new(&ctrl, 1).unwrap()),
            0,
            512,
            0,
        )
        .unwrap_err();
    assert!(matches!(e.error, Error::Poisoned { .. }), "{e}");
    assert!(e.buffer.is_some());
    drop(e);
    model.knobs.stall.store(false, Ordering::Release);
    assert!(model.mapped().contains(&handle));
    drop(t);
    assert!(!model.mapped().contains(&handle), "UNMAPped once destroyed");
}

/// A transfer dropped without waiting: what was submitted completes and is
/// reaped by later transfers, the rest never goes out; nothing breaks.
#[test]
fn a_transfer_dropped_unwaited_is_harmless() {
    let (ctrl, model, t) = transfers(1, 2, 512, DEFAULT_TIMEOUT);
    let (fd, mut v) = fake_vram(64 << 10);
    let buf = GpuBuffer::register(&ctrl, &fd).unwrap();
    view(&mut v).fill(0x77);
    // 64 one-block commands on a depth-2 pair: one in flight, 63 waiting.
    drop(t.write_async(&buf, 0, 64 * 512, 0).unwrap());
    let d0 = t.commands()[0];
    assert!(d0 < 64, "{d0}");
    t.read(&buf, 0, 512, 1 << 20).unwrap();
    assert_eq!(
        t.commands()[0],
        d0 + 1,
        "the dropped transfer's rest never went out"
    );
    let written = model.disk.lock().unwrap()[..d0 as usize * 512]
        .iter()
        .all(|&b| b == 0x77);
    assert!(written);
}

/// The synchronous Io path into a GPU buffer, and its timeout: the pair
/// keeps a clone of the buffer.
#[test]
fn io_reads_into_a_gpu_buffer_and_keeps_it_after_a_timeout() {
    let (ctrl, model, mut io) = crate::io::tests::io(4, Mode::Raw, 64 << 10);
    {
        let mut d = model.disk.lock().unwrap();
        pattern::fill(21, 0, LBA, &mut d[..256 * LBA]);
    }
    let (fd, mut v) = fake_vram(256 << 10);
    let buf = GpuBuffer::register(&ctrl, &fd).unwrap();
    io.read_gpu(0, 256, &buf, 4096).unwrap();
    assert_eq!(
        pattern::first_mismatch(21, 0, LBA, &view(&mut v)[4096..4096 + 256 * LBA]),
        None
    );
    view(&mut v)[..LBA].copy_from_slice(&[9u8; LBA]);
    io.write_gpu(300, 1, &buf, 0).unwrap();
    assert!(model.disk.lock().unwrap()[300 * LBA..301 * LBA]
        .iter()
        .all(|&b| b == 9));
    let e = io.read_gpu(0, 1, &buf, 256 << 10).unwrap_err();
    assert!(
        e.to_string()
            .contains("do not fit a 262144-byte GPU buffer"),
        "{e}"
    );

    io.set_timeout(Duration::from_millis(50));
    model.knobs.stall.store(true, Ordering::Release);
    assert!(matches!(
        io.read_gpu(0, 8, &buf, 0),
        Err(Error::Timeout { .. })
    ));
    assert_eq!(io.qpair().kept_buffers(), 1);
    let handle = buf.mapping().handle();
    drop(buf);
    assert!(model.mapped().contains(&handle));
    model.knobs.stall.store(false, Ordering::Release);
    drop(io);
    assert!(!model.mapped().contains(&handle));
}

/// A key used again gets the same registration; a removed one is imported
/// anew.
#[test]
fn the_cache_imports_each_key_once() {
    let (ctrl, model) = Model::controller(BLOCKS, LBA);
    let cache = GpuBufferCache::new();
    let mut exports = 0;
    let (a, b, c) = {
        let mut get = |key| {
            cache
                .get_or_register(&ctrl, key, || {
                    exports += 1;
                    Ok((fake_vram(8192).0, ()))
                })
                .unwrap()
        };
        (get(1), get(1), get(2))
    };
    assert!(a.same(&b) && !a.same(&c));
    assert_eq!(exports, 2);
    assert_eq!(cache.len(), 2);
    assert!(cache.remove(1));
    let imports = |m: &Model| {
        m.log()
            .iter()
            .filter(|e| matches!(e, Event::MapDmabuf(_)))
            .count()
    };
    assert_eq!(imports(&model), 2);
    let d = cache
        .get_or_register(&ctrl, 1, || Ok((fake_vram(8192).0, ())))
        .unwrap();
    assert!(!d.same(&a));
    assert_eq!(imports(&model), 3);
}

/// A descriptor that is not a dma-buf (nor seekable) is refused clearly.
#[test]
fn registering_something_else_fails_clearly() {
    let (ctrl, _model) = Model::controller(BLOCKS, LBA);
    let mut p = [0i32; 2];
    // SAFETY: pipe(2) into a 2-int array.
    assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
    // SAFETY: both ends are fresh descriptors of ours.
    let (r, _w) = unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) };
    let e = GpuBuffer::register(&ctrl, &r).unwrap_err();
    assert!(e.to_string().contains("not a dma-buf"), "{e}");
    let (big, _v) = fake_vram(4096 + 100);
    let e = GpuBuffer::register(&ctrl, &big).unwrap_err();
    assert!(e.to_string().contains("multiple of 4 KiB"), "{e}");
}

/// What a binding (pyo3's `#[pyclass]` needs `Send + Sync`) holds: owned
/// handles with no lifetime, shareable across threads.
#[test]
fn the_handles_are_owned_send_and_sync() {
    fn owned_send_sync<T: Send + Sync + 'static>() {}
    owned_send_sync::<Transfers>();
    owned_send_sync::<Transfer>();
    owned_send_sync::<GpuBuffer>();
    owned_send_sync::<GpuBufferCache>();
    owned_send_sync::<Completed>();
}
