# SPDX-License-Identifier: MIT OR GPL-2.0-only
"""Asynchronous transfers through a real controller: many futures across
queue pairs, concurrent.futures and asyncio on them, every byte checked;
argument errors at the call, a closed namespace refusing new work."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf

import numpy as np
import pytest

import gpunvme
from helpers import first_mismatch, patterned, region_lba

pytestmark = pytest.mark.device


def test_many_futures_across_queue_pairs(dev):
    ns = dev.namespace(qpairs=4)
    try:
        bs = ns.lba_size
        base = region_lba(ns, 17)
        n = 64 << 10
        lbas = [base + i * (n // bs) for i in range(24)]
        writes = [ns.write_async(patterned(200 + i, lba, bs, n), lba) for i, lba in enumerate(lbas)]
        assert all(isinstance(f, cf.Future) for f in writes)
        done, pending = cf.wait(writes, timeout=120)
        assert not pending and all(f.result() == n for f in done)
        bufs = [np.zeros(n, dtype=np.uint8) for _ in lbas]
        reads = {ns.read_async(b, lba): i for i, (b, lba) in enumerate(zip(bufs, lbas))}
        for f in cf.as_completed(reads, timeout=120):
            i = reads[f]
            assert f.result() == n
            assert first_mismatch(bufs[i], patterned(200 + i, lbas[i], bs, n)) is None, i
    finally:
        ns.close()


def test_asyncio_awaits_them(dev):
    ns = dev.namespace(qpairs=2)
    try:
        bs = ns.lba_size
        lba = region_lba(ns, 18)
        n = 128 << 10
        want = patterned(301, lba, bs, n)

        async def main():
            await asyncio.wrap_future(ns.write_async(want, lba))
            halves = [np.zeros(n // 2, dtype=np.uint8) for _ in range(2)]
            got = await asyncio.gather(*(asyncio.wrap_future(
                ns.pread_async(h, file_offset=lba * bs + i * (n // 2))) for i, h in enumerate(halves)))
            return got, halves

        got, halves = asyncio.run(main())
        assert got == [n // 2, n // 2]
        assert first_mismatch(np.concatenate(halves), want) is None
    finally:
        ns.close()


def test_argument_errors_raise_at_the_call(ns):
    with pytest.raises(gpunvme.OutOfRangeError):
        ns.read_async(bytearray(ns.lba_size), ns.capacity)
    with pytest.raises(gpunvme.ReadOnlyBufferError):
        ns.read_async(b"\0" * ns.lba_size, 0)
    with pytest.raises(gpunvme.AlignmentError):
        ns.pwrite_async(bytes(ns.lba_size), file_offset=1)


def test_a_closed_namespace_takes_no_new_work(dev):
    ns = dev.namespace(qpairs=2)
    lba = region_lba(ns, 19)
    futs = [ns.write_async(bytes(64 << 10), lba) for _ in range(4)]
    ns.close()  # joins the workers: what was queued has finished or failed
    for f in futs:
        assert f.done()
        e = f.exception()
        assert e is None or isinstance(e, gpunvme.ClosedError), e
    with pytest.raises(gpunvme.ClosedError):
        ns.write_async(bytes(ns.lba_size), lba)
