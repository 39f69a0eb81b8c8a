# SPDX-License-Identifier: MIT OR GPL-2.0-only
"""gpunvme.HostBuffer through a real controller: zero-copy transfers, and
the rule that the controller never writes memory Python can reach (no
transfer while a view is alive, no view while a transfer holds it)."""

from __future__ import annotations

import numpy as np
import pytest

import gpunvme
from helpers import first_mismatch, patterned, region_lba

pytestmark = pytest.mark.device


def test_zero_copy_round_trip_every_byte(dev, ns):
    bs = ns.lba_size
    lba = region_lba(ns, 10)
    n = 512 << 10
    src, dst = dev.alloc(n), dev.alloc(n)
    assert len(src) == src.nbytes == n
    want = patterned(81, lba, bs, n)
    with memoryview(src) as m:
        assert m.nbytes == n and not m.readonly
        assert not any(m[:64]), "zero-filled"
        m[:] = want.tobytes()
    assert ns.write(src, lba) == n
    assert ns.read(dst, lba) == n
    got = np.frombuffer(dst, dtype=np.uint8).copy()
    assert first_mismatch(got, want) is None
    # Partial, at a buffer offset (a multiple of 4: the controller DMAs here).
    assert ns.read(dst, lba + 1, 2, buf_offset=bs) == 2 * bs


def test_a_live_view_blocks_transfers_until_released(dev, ns):
    hb = dev.alloc(4 * ns.lba_size)
    arr = np.frombuffer(hb, dtype=np.uint8)  # holds a view
    with pytest.raises(gpunvme.BufferBusyError, match="view"):
        ns.read(hb, 0)
    with pytest.raises(gpunvme.BufferBusyError):
        ns.write_async(hb, 0)
    del arr
    assert ns.read(hb, 0) == 4 * ns.lba_size
    m = memoryview(hb)
    with pytest.raises(gpunvme.BufferBusyError):
        ns.write(hb, 0)
    m.release()
    assert ns.write(hb, 0) == 4 * ns.lba_size


def test_async_zero_copy_hands_the_buffer_back(dev, ns):
    # (That a view is refused while the transfer holds the buffer is shown
    # deterministically in test_timeout.py, under a held relay.)
    n = 1 << 20
    lba = region_lba(ns, 11)
    hb = dev.alloc(n)
    with memoryview(hb) as m:
        m[:] = patterned(91, lba, ns.lba_size, n).tobytes()
    assert ns.write_async(hb, lba).result(timeout=60) == n
    back = dev.alloc(n)
    assert ns.read_async(back, lba).result(timeout=60) == n
    assert first_mismatch(np.frombuffer(back, dtype=np.uint8).copy(), patterned(91, lba, ns.lba_size, n)) is None


def test_dma_offsets_and_ownership(device_path, dev, ns):
    hb = dev.alloc(2 * ns.lba_size + 8)
    with pytest.raises(gpunvme.AlignmentError, match="multiples of 4"):
        ns.read(hb, 0, 1, buf_offset=2)
    assert ns.read(hb, 0, 1, buf_offset=4) == ns.lba_size
    with pytest.raises(gpunvme.OutOfRangeError):
        ns.read(hb, 0, 3)
    other = gpunvme.open(device_path)
    try:
        with pytest.raises(gpunvme.InvalidArgumentError, match="another open Device"):
            ns.read(other.alloc(ns.lba_size), 0)
    finally:
        other.close()
    with pytest.raises(gpunvme.InvalidArgumentError):
        dev.alloc(0)
