# SPDX-License-Identifier: MIT OR GPL-2.0-only
"""Timeouts through a real controller: the module's relay is told to hold
a queue pair's completions (debugfs relay_hold_qid), so its commands run
on the controller but never complete for the caller. The wait's deadline
raises DeviceTimeoutError, the pair is replaced, and Python memory is
never written after the call returned (host memory goes through a bounce
buffer; a HostBuffer stays with the poisoned pair)."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

import gpunvme
from helpers import Udmabuf, first_mismatch, patterned, region_lba

pytestmark = pytest.mark.device


def knob_path():
    bdf = os.environ.get("GPUNVME_BDF", "")
    return f"/sys/kernel/debug/gpunvme-{bdf}/relay_hold_qid"


@pytest.fixture
def hold():
    """hold(qid): the relay leaves that pair's completions alone until the
    test ends (or hold(0))."""
    path = knob_path()
    if not os.path.exists(path):
        pytest.skip(f"no {path} (debugfs, shared mode)")

    def set_hold(qid: int):
        with open(path, "w") as f:
            f.write(str(qid))

    yield set_hold
    set_hold(0)


@pytest.fixture
def slow_ns(dev):
    if dev.owner:
        pytest.skip("the relay hold is a shared-mode knob")
    ns = dev.namespace(timeout=1.0)
    yield ns
    ns.close()


def test_a_held_read_times_out_and_never_writes_the_buffer_later(slow_ns, hold):
    ns = slow_ns
    bs = ns.lba_size
    lba = region_lba(ns, 26)
    n = 64 << 10
    ns.write(patterned(601, lba, bs, n), lba)
    (qid,) = ns._qids()
    buf = np.full(n, 0xAA, dtype=np.uint8)
    hold(qid)
    t0 = time.monotonic()
    with pytest.raises(gpunvme.DeviceTimeoutError) as e:
        ns.read(buf, lba)
    took = time.monotonic() - t0
    assert isinstance(e.value, TimeoutError) and e.value.qid == qid
    assert 1.0 <= took < 30, took
    hold(0)
    # The controller did read the blocks (only their completion was held):
    # a design that DMA'd into `buf` would show them by now.
    time.sleep(0.5)
    assert (buf == 0xAA).all()
    # A fresh queue pair replaced the poisoned one.
    assert ns.read(buf, lba) == n
    assert first_mismatch(buf, patterned(601, lba, bs, n)) is None


def test_a_host_buffer_under_a_held_transfer(dev, slow_ns, hold):
    ns = slow_ns
    (qid,) = ns._qids()
    hb = dev.alloc(1 << 20)
    hold(qid)
    fut = ns.read_async(hb, region_lba(ns, 27))
    # The read holds the buffer for the whole second it waits: no view.
    time.sleep(0.2)
    assert not fut.done()
    with pytest.raises(gpunvme.BufferBusyError, match="transfer is using"):
        memoryview(hb)
    with pytest.raises(gpunvme.BufferBusyError):
        ns.write(hb, 0)
    assert isinstance(fut.exception(timeout=30), gpunvme.DeviceTimeoutError)
    hold(0)
    # Its memory stays with the poisoned pair: the buffer is lost for good.
    with pytest.raises(gpunvme.BufferBusyError, match="timed out"):
        memoryview(hb)
    with pytest.raises(gpunvme.BufferBusyError, match="timed out"):
        ns.read(hb, 0)
    assert "lost" in repr(hb)
    assert ns.read(bytearray(ns.lba_size), 0) == ns.lba_size


@pytest.mark.skipif(not os.path.exists("/dev/udmabuf"), reason="no /dev/udmabuf")
def test_a_held_dmabuf_transfer_times_out_and_the_lane_recovers(dev, slow_ns, hold):
    ns = slow_ns
    bs = ns.lba_size
    lba = region_lba(ns, 28)
    u = Udmabuf(64 << 10)
    try:
        rb = dev.register_dmabuf(u.fd)
        ns.read(rb, lba)  # makes the lane's dma-buf pair
        ns.write(patterned(611, lba, bs, u.size), lba)
        (qid,) = ns._qids(dma=True)
        hold(qid)
        with pytest.raises(gpunvme.DeviceTimeoutError) as e:
            ns.read(rb, lba)
        assert e.value.qid == qid
        hold(0)
        assert ns._qids(dma=True) == [], "the poisoned lane went"
        u.view()[:] = 0
        assert ns.read(rb, lba) == u.size
        assert first_mismatch(u.view(), patterned(611, lba, bs, u.size)) is None
    finally:
        u.close()
