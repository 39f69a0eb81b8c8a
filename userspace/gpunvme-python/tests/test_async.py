# SPDX-License-Identifier: MIT OR GPL-2.0-only
"""Asynchronous transfers through a real controller: many futures across
queue pairs, concurrent.futures and asyncio on them, every byte checked;
argument errors at the call, a closed namespace refusing new work."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import threading

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


def test_a_waiter_runs_the_job_itself_exactly_once(dev):
    # One queue pair, so one worker: a done-callback that the worker runs
    # holds it, and the next future's job can only run on its waiter.
    ns = dev.namespace(qpairs=1)
    try:
        bs = ns.lba_size
        base = region_lba(ns, 20)
        n = 64 << 10
        lbas = [base + i * (n // bs) for i in range(3)]
        for i, lba in enumerate(lbas):
            ns.write(patterned(700 + i, lba, bs, n), lba)
        main = threading.get_ident()
        held, go = threading.Event(), threading.Event()

        def hold_the_worker(f):
            if threading.get_ident() != main:
                held.set()
                go.wait(60)

        bufs = [np.zeros(n, dtype=np.uint8) for _ in lbas]
        # Nobody waits for f0: the worker runs it (it cannot before the
        # callback is added: taking a job needs the GIL, which this thread
        # holds until then).
        f0 = ns.read_async(bufs[0], lbas[0])
        f0.add_done_callback(hold_the_worker)
        assert held.wait(60), "the worker never ran f0"
        try:
            f1 = ns.read_async(bufs[1], lbas[1])
            assert isinstance(f1, gpunvme.AsyncFuture) and isinstance(f1, cf.Future)
            calls = {"start": [], "set_result": [], "set_exception": []}
            for name, meth in (("start", f1.set_running_or_notify_cancel),
                               ("set_result", f1.set_result), ("set_exception", f1.set_exception)):
                def counted(*a, _name=name, _meth=meth):
                    calls[_name].append(threading.get_ident())
                    return _meth(*a)
                setattr(f1, meth.__name__, counted)
            # The worker is held in f0's callback: only this waiter can run f1.
            assert f1.result(timeout=60) == n
            assert calls == {"start": [main], "set_result": [main], "set_exception": []}
            assert first_mismatch(bufs[1], patterned(701, lbas[1], bs, n)) is None
        finally:
            go.set()
        assert f0.result(timeout=60) == n
        # The worker meets f1's job after f0's callback and finds it taken;
        # f2, queued behind it and left to the worker, shows it got there.
        f2 = ns.read_async(bufs[2], lbas[2])
        done, _ = cf.wait([f2], timeout=60)
        assert done == {f2} and f2.result() == n
        assert calls == {"start": [main], "set_result": [main], "set_exception": []}
        for i, lba in enumerate(lbas):
            assert first_mismatch(bufs[i], patterned(700 + i, lba, bs, n)) is None, i
    finally:
        ns.close()


def test_waiters_and_workers_run_each_job_once(dev, monkeypatch):
    # Many futures waited for at once and late, on two queue pairs: each
    # one's job runs once (a second run would set the future twice, which
    # goes to sys.unraisablehook) and every byte lands.
    unraisable = []
    monkeypatch.setattr("sys.unraisablehook", unraisable.append)
    ns = dev.namespace(qpairs=2)
    try:
        bs = ns.lba_size
        base = region_lba(ns, 21)
        n = 16 << 10
        lbas = [base + i * (n // bs) for i in range(64)]
        for f in [ns.write_async(patterned(800 + i, lba, bs, n), lba) for i, lba in enumerate(lbas)]:
            assert f.result(timeout=60) == n
        bufs = [np.zeros(n, dtype=np.uint8) for _ in lbas]
        late = []
        for i, (b, lba) in enumerate(zip(bufs, lbas)):
            f = ns.read_async(b, lba)
            if i % 2:
                assert f.result(timeout=60) == n
            else:
                late.append(f)
        assert [f.result(timeout=60) for f in late] == [n] * len(late)
        for i, lba in enumerate(lbas):
            assert first_mismatch(bufs[i], patterned(800 + i, lba, bs, n)) is None, i
    finally:
        ns.close()
    assert not unraisable, [u.exc_value for u in unraisable]
