# SPDX-License-Identifier: MIT OR GPL-2.0-only
"""The future of an asynchronous transfer (``Namespace.read_async`` and the
other ``*_async`` calls)."""

from __future__ import annotations

from concurrent.futures import Future


class AsyncFuture(Future[int]):
    """A :class:`concurrent.futures.Future` of the bytes a transfer moved.

    The transfer runs on a worker thread of the namespace, or on the thread
    that waits for it: ``result()`` or ``exception()`` called before a
    worker took the job runs it there, on an idle queue pair, so
    ``ns.read_async(buf, lba).result()`` does not wait for a worker to
    wake. Either way it runs exactly once, with the GIL released while the
    device works. Such a waiter returns when the transfer is done (each
    command has the namespace's deadline), which may be after a shorter
    ``timeout``; ``timeout=0`` (a poll) never runs it. ``wait``,
    ``as_completed``, ``add_done_callback`` and ``asyncio.wrap_future``
    leave it to the workers, which take it at once; a future nobody waits
    for is taken by a worker once it has been queued 250 us.
    """

    def __init__(self, job=None):
        super().__init__()
        self._job = job
        if job is not None:
            w = self._waiters = _Waiters()
            w._job = job

    # (The check is inlined in both: this is the hot path of every
    # ``*_async(...).result()``.)
    def result(self, timeout=None):
        job = self._job
        if job is not None and (timeout is None or timeout > 0) and job._run_here(self):
            self._job = None
        return super().result(timeout)

    def exception(self, timeout=None):
        job = self._job
        if job is not None and (timeout is None or timeout > 0) and job._run_here(self):
            self._job = None
        return super().exception(timeout)

    def add_done_callback(self, fn):
        job = self._job
        if job is not None:
            job._hurry()  # nobody may call result(): a worker takes it now
        super().add_done_callback(fn)


class _Waiters(list):
    """``Future._waiters``, where ``concurrent.futures.wait`` and
    ``as_completed`` put their waiter: an append has a worker take the job
    at once instead of leaving it to a ``result()`` that will not come. (A
    Python whose ``wait`` did otherwise only loses that: the job still runs
    after the 250 us a worker leaves it to a waiter.)"""

    __slots__ = ("_job",)

    def append(self, waiter):
        self._job._hurry()
        super().append(waiter)
