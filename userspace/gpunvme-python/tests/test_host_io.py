# SPDX-License-Identifier: MIT OR GPL-2.0-only
"""Host memory through a real controller (the VM): every kind of buffer,
every byte checked; the same bytes as the gpunvme CLI; bounds, alignment
and the NVMe status in exceptions; the GIL released during I/O; threads
sharing a namespace's queue pairs."""

from __future__ import annotations

import array
import mmap
import os
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import gpunvme
from helpers import first_mismatch, patterned, region_lba

pytestmark = pytest.mark.device


def test_info_and_namespace(dev, ns):
    info = dev.info()
    bdf = os.environ.get("GPUNVME_BDF")
    if bdf:
        assert info.bdf == bdf
    assert ns.nsid in [n.nsid for n in info.namespaces]
    nsinfo = next(n for n in info.namespaces if n.nsid == ns.nsid)
    assert (nsinfo.lba_size, nsinfo.capacity) == (ns.lba_size, ns.capacity)
    assert ns.nbytes == ns.capacity * ns.lba_size and ns.lba_size in (512, 4096)
    assert info.shared_mode and info.model and info.version.count(".") == 2
    assert (ns.qpairs, ns.depth) == (1, 32)


def test_write_then_read_every_byte(ns):
    lba = region_lba(ns, 0)
    data = patterned(11, lba, ns.lba_size, 256 << 10)
    assert ns.write(data, lba) == data.size
    back = np.zeros_like(data)
    assert ns.read(back, lba) == data.size
    assert first_mismatch(back, data) is None


def test_the_same_bytes_as_the_cli(ns, device_path):
    cli = os.environ.get("GPUNVME_CLI", "gpunvme")
    bs = ns.lba_size
    lba = region_lba(ns, 1)
    count = (128 << 10) // bs
    # Python writes the pattern, the CLI verifies it ...
    ns.write(patterned(21, lba, bs, count * bs), lba)
    r = subprocess.run([cli, "verify", device_path, "-n", str(ns.nsid), "-s", str(lba), "-c", str(count),
                        "-p", "21"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    # ... and the other way round.
    lba2 = lba + count
    r = subprocess.run([cli, "write", device_path, "-n", str(ns.nsid), "-s", str(lba2), "-c", str(count),
                        "-p", "22"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    back = bytearray(count * bs)
    ns.read(back, lba2)
    assert first_mismatch(back, patterned(22, lba2, bs, count * bs)) is None


def test_every_kind_of_host_buffer(ns):
    bs = ns.lba_size
    lba = region_lba(ns, 2)
    n = 16 * bs
    want = patterned(31, lba, bs, n)
    kinds = {
        "bytearray": lambda: bytearray(n),
        "memoryview slice": lambda: memoryview(bytearray(n + 100))[50:50 + n],
        "numpy float64 2-d": lambda: np.zeros((n // 64, 8), dtype=np.float64),
        "array.array": lambda: array.array("I", bytes(n)),
        "mmap": lambda: mmap.mmap(-1, n),
    }
    ns.write(bytes(want), lba)  # bytes: read-only, fine to write from
    for name, make in kinds.items():
        buf = make()
        assert ns.read(buf, lba) == n, name
        assert first_mismatch(buf, want) is None, name
        # And written from that kind, read back as bytes.
        ns.write(buf, lba + 16)
        check = bytearray(n)
        ns.read(check, lba + 16)
        assert first_mismatch(check, want) is None, name


def test_any_buffer_offset_works_for_host_memory(ns):
    bs = ns.lba_size
    lba = region_lba(ns, 3)
    want = patterned(41, lba, bs, 8 * bs)
    ns.write(want, lba)
    buf = bytearray(b"\xee" * (8 * bs + 7))
    assert ns.read(buf, lba, 8, buf_offset=3) == 8 * bs
    assert buf[:3] == b"\xee" * 3 and buf[-4:] == b"\xee" * 4, "bytes outside the range untouched"
    assert first_mismatch(buf[3:3 + 8 * bs], want) is None


def test_large_transfers_split_at_the_bounce_buffer_and_mdts(dev):
    ns = dev.namespace(bounce_bytes=64 << 10)
    try:
        lba = region_lba(ns, 4)
        n = 2 << 20  # 32 bounce buffers, several MDTS-sized commands each
        want = patterned(51, lba, ns.lba_size, n)
        assert ns.pwrite(want, file_offset=lba * ns.lba_size) == n
        back = np.zeros(n, dtype=np.uint8)
        assert ns.pread(back, n, lba * ns.lba_size) == n
        assert first_mismatch(back, want) is None
        half = np.zeros(n // 2, dtype=np.uint8)
        assert ns.pread(half, file_offset=lba * ns.lba_size + n // 2) == n // 2
        assert first_mismatch(half, want[n // 2:]) is None
    finally:
        ns.close()


def test_bounds_and_alignment_on_the_device(ns):
    bs = ns.lba_size
    last = ns.capacity - 1
    buf = bytearray(bs)
    assert ns.read(buf, last) == bs, "the last block"
    with pytest.raises(gpunvme.OutOfRangeError, match="beyond namespace"):
        ns.read(bytearray(2 * bs), last)
    with pytest.raises(gpunvme.ReadOnlyBufferError):
        ns.read(bytes(bs), 0)
    with pytest.raises(gpunvme.AlignmentError):
        ns.pread(bytearray(bs), file_offset=bs // 2)
    with pytest.raises(gpunvme.AlignmentError):
        ns.read(bytearray(bs + 1), 0)
    with pytest.raises(gpunvme.UnsupportedBufferError):
        ns.read(np.zeros((8, bs))[:, ::2], 0)


def test_the_controllers_status_reaches_python(ns):
    buf = bytearray(ns.lba_size)
    with pytest.raises(gpunvme.NvmeError) as e:
        ns._read_unchecked(buf, ns.capacity, 1)  # only the controller checks
    st = e.value.status
    assert (st.sct, st.sc, st.name) == (0, 0x80, "LBA Out of Range")
    assert e.value.errno is None and e.value.qid >= 1 and e.value.cid >= 0
    assert "Read of 1 block(s)" in e.value.command
    # A status is not a timeout: the pair goes on.
    assert ns.read(buf, 0) == ns.lba_size


def test_write_zeroes_and_flush(ns):
    bs = ns.lba_size
    lba = region_lba(ns, 5)
    want = patterned(61, lba, bs, 32 * bs)
    ns.write(want, lba)
    ns.write_zeroes(lba + 8, 8)
    ns.flush()
    back = bytearray(32 * bs)
    ns.read(back, lba)
    want[8 * bs:16 * bs] = 0
    assert first_mismatch(back, want) is None
    with pytest.raises(gpunvme.OutOfRangeError):
        ns.write_zeroes(ns.capacity, 1)
    with pytest.raises(gpunvme.InvalidArgumentError):
        ns.write_zeroes(0, 0)


def test_the_gil_is_released_while_the_device_works(dev):
    ns = dev.namespace(bounce_bytes=2 << 20)
    try:
        lba = region_lba(ns, 6)
        buf = np.zeros(2 << 20, dtype=np.uint8)
        ticks = []
        stop = threading.Event()

        def count():
            while not stop.is_set():
                ticks.append(time.perf_counter())

        t = threading.Thread(target=count)
        t.start()
        try:
            time.sleep(0.05)
            inside = []
            for _ in range(5):
                t0 = time.perf_counter()
                ns.read(buf, lba)
                t1 = time.perf_counter()
                inside.append(sum(t0 < x < t1 for x in list(ticks)))
        finally:
            stop.set()
            t.join()
        # With the GIL held for the call no Python code of the other thread
        # could run between t0 and t1.
        assert max(inside) > 0, inside
    finally:
        ns.close()


def test_threads_share_the_queue_pairs(dev):
    ns = dev.namespace(qpairs=4)
    try:
        bs = ns.lba_size
        base = region_lba(ns, 7)
        n = 64 << 10

        def job(i):
            lba = base + i * (n // bs)
            want = patterned(70 + i, lba, bs, n)
            ns.write(want, lba)
            back = np.zeros(n, dtype=np.uint8)
            ns.read(back, lba)
            return first_mismatch(back, want)

        with ThreadPoolExecutor(8) as pool:
            assert list(pool.map(job, range(16))) == [None] * 16
        assert ns.qpairs == 4
    finally:
        ns.close()


def test_threads_waiting_for_the_one_queue_pair_are_woken(dev):
    # Four threads on one lane: three wait at any time, and each lane given
    # back must wake one (a waiter left to its 120 s deadline instead shows
    # up as a stall: the run is bounded far below that).
    ns = dev.namespace(qpairs=1)
    try:
        bs = ns.lba_size
        base = region_lba(ns, 8)
        n = 4096

        def job(i):
            lba = base + i * (n // bs)
            want = patterned(90 + i, lba, bs, n)
            back = np.zeros(n, dtype=np.uint8)
            for _ in range(8):
                ns.write(want, lba)
                ns.read(back, lba)
                bad = first_mismatch(back, want)
                if bad is not None:
                    return bad
            return None

        t0 = time.monotonic()
        with ThreadPoolExecutor(4) as pool:
            assert list(pool.map(job, range(4))) == [None] * 4
        took = time.monotonic() - t0
        assert took < 100, f"64 transfers on one queue pair took {took:.0f} s: a waiter was not woken"
    finally:
        ns.close()


def test_closed_namespace_and_device(dev):
    ns = dev.namespace()
    ns.close()
    assert ns.closed
    with pytest.raises(gpunvme.ClosedError):
        ns.read(bytearray(ns.lba_size), 0)
    ns2 = dev.namespace()
    dev.close()
    assert ns2.closed, "closing the device closes its namespaces"
    with pytest.raises(gpunvme.ClosedError):
        ns2.write(bytes(ns2.lba_size), 0)
    with pytest.raises(gpunvme.ClosedError):
        dev.namespace()
