# SPDX-License-Identifier: MIT OR GPL-2.0-only
"""Dma-buf-backed buffers through a real controller: a udmabuf (memfd
memory exported as a dma-buf, the VRAM stand-in of the dma-buf
selftests) registered once, then read into and written from by DMA,
every byte checked through the memfd's own mapping."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest

import gpunvme
from helpers import Udmabuf, first_mismatch, patterned, region_lba

pytestmark = [
    pytest.mark.device,
    pytest.mark.skipif(not os.path.exists("/dev/udmabuf"), reason="no /dev/udmabuf"),
]


@pytest.fixture
def udmabuf():
    u = Udmabuf(1 << 20)
    yield u
    u.close()


def test_reads_land_in_the_dmabuf_and_writes_come_from_it(dev, ns, udmabuf):
    bs = ns.lba_size
    lba = region_lba(ns, 13)
    n = udmabuf.size
    rb = dev.register_dmabuf(udmabuf.fd)
    assert rb.nbytes == n == len(rb) and rb.gpu_address is None
    # The udmabuf's bytes, written through the dma-buf.
    udmabuf.view()[:] = patterned(101, lba, bs, n)
    assert ns.write(rb, lba) == n
    back = np.zeros(n, dtype=np.uint8)
    ns.read(back, lba)
    assert first_mismatch(back, patterned(101, lba, bs, n)) is None
    # A read into the middle of it: the rest stays as it was.
    udmabuf.view()[:] = 0x5A
    ns.read(rb, lba, 16, buf_offset=8192)
    v = udmabuf.view()
    assert first_mismatch(v[8192:8192 + 16 * bs], patterned(101, lba, bs, 16 * bs)) is None
    assert (v[:8192] == 0x5A).all() and (v[8192 + 16 * bs:] == 0x5A).all()


def test_byte_ranges_and_async_into_the_dmabuf(dev, ns, udmabuf):
    bs = ns.lba_size
    lba = region_lba(ns, 14)
    n = udmabuf.size
    want = patterned(111, lba, bs, n)
    ns.write(want, lba)
    rb = dev.register_dmabuf(udmabuf.fd, n)
    quarter = n // 4
    futs = [ns.pread_async(rb, quarter, lba * bs + i * quarter, buf_offset=i * quarter) for i in range(4)]
    assert [f.result(timeout=60) for f in futs] == [quarter] * 4
    assert first_mismatch(udmabuf.view(), want) is None


def test_dmabuf_checks(device_path, dev, ns, udmabuf):
    rb = dev.register_dmabuf(udmabuf.fd)
    with pytest.raises(gpunvme.AlignmentError, match="multiples of 4"):
        ns.read(rb, 0, 1, buf_offset=2)
    with pytest.raises(gpunvme.OutOfRangeError):
        ns.read(rb, 0, udmabuf.size // ns.lba_size + 1)
    other = gpunvme.open(device_path)
    try:
        with pytest.raises(gpunvme.InvalidArgumentError, match="another open Device"):
            other.namespace().read(rb, 0, 1)
    finally:
        other.close()
    rb.close()
    with pytest.raises(gpunvme.ClosedError):
        ns.read(rb, 0, 1)
    # A dma-buf larger than the size given: the module says EINVAL.
    with pytest.raises(gpunvme.DeviceError) as e:
        dev.register_dmabuf(udmabuf.fd, 4096)
    assert e.value.errno == errno.EINVAL and e.value.ioctl == "GPUNVME_IOC_MAP_DMABUF"


def test_the_descriptor_may_be_closed_after_registering(dev, ns):
    u = Udmabuf(64 << 10)
    bs = ns.lba_size
    lba = region_lba(ns, 15)
    rb = dev.register_dmabuf(u.fd)
    os.close(u.fd)  # the module holds its own reference
    want = patterned(121, lba, bs, u.size)
    ns.write(want, lba)
    ns.read(rb, lba)
    assert first_mismatch(np.frombuffer(u.mem, dtype=np.uint8), want) is None
    u.mem.close()
    os.close(u.memfd)
