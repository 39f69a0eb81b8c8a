# SPDX-License-Identifier: MIT OR GPL-2.0-only
"""The future of an asynchronous transfer (``Namespace.read_async`` and the
other ``*_async`` calls)."""

from __future__ import annotations

from concurrent.futures import Future


class AsyncFuture(Future):
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
    leave it to the workers.
    """

    def __init__(self, job=None):
        super().__init__()
        self._job = job

    def _run_here(self, timeout):
        job = self._job
        if job is not None and (timeout is None or timeout > 0) and job._run_here(self):
            self._job = None

    def result(self, timeout=None):
        self._run_here(timeout)
        return super().result(timeout)

    def exception(self, timeout=None):
        self._run_here(timeout)
        return super().exception(timeout)
