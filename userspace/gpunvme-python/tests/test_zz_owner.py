# SPDX-License-Identifier: MIT OR GPL-2.0-only
"""Owner mode (raw queue pairs, PRP lists in list pages of the package's
own) through a real controller: host memory, a HostBuffer and a
dma-buf. Last (zz): the claim needs every other file of this process
closed."""

from __future__ import annotations

import errno
import gc
import os

import numpy as np
import pytest

import gpunvme
from helpers import Udmabuf, first_mismatch, patterned, region_lba

pytestmark = pytest.mark.device


def test_owner_mode_round_trips(device_path):
    gc.collect()  # earlier tests' buffers hold their files open
    try:
        dev = gpunvme.open(device_path, owner=True)
    except gpunvme.DeviceError as e:
        if e.errno in (errno.EPERM, errno.EACCES):
            pytest.skip(f"owner mode is not claimable here: {e}")
        if e.errno == errno.EBUSY:
            pytest.fail(f"{e}: another file still has queue pairs or buffers (objects of an earlier "
                        "test kept alive, by a failure's traceback for instance)")
        raise
    try:
        assert dev.owner
        ns = dev.namespace(qpairs=2)
        bs = ns.lba_size
        lba = region_lba(ns, 29)
        n = 1 << 20  # several commands, each with a PRP list
        want = patterned(901, lba, bs, n)
        ns.write(want, lba)
        back = np.zeros(n, dtype=np.uint8)
        ns.read(back, lba)
        assert first_mismatch(back, want) is None
        hb = dev.alloc(n)
        ns.read(hb, lba)
        assert first_mismatch(np.frombuffer(hb, dtype=np.uint8).copy(), want) is None
        if os.path.exists("/dev/udmabuf"):
            u = Udmabuf(n)
            try:
                rb = dev.register_dmabuf(u.fd)
                ns.read(rb, lba)
                assert first_mismatch(u.view(), want) is None
                u.view()[:] = patterned(902, lba, bs, n)
                ns.write(rb, lba)
                ns.read(back, lba)
                assert first_mismatch(back, patterned(902, lba, bs, n)) is None
            finally:
                u.close()
    finally:
        dev.close()
