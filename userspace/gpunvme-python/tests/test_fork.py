# SPDX-License-Identifier: MIT OR GPL-2.0-only
"""fork() during transfers (a PyTorch DataLoader worker's situation): the
child never touches its parent's queues (every call raises ForkedError,
dropping the objects there destroys nothing), can open the device again
and use it; the parent's in-flight transfers finish with every byte right
and its queue pairs go on."""

from __future__ import annotations

import gc
import json
import os
import time

import numpy as np
import pytest

import gpunvme
from helpers import first_mismatch, patterned, region_lba

pytestmark = pytest.mark.device

CHILD_DEADLINE = 120  # seconds


def child_checks(device_path, parents, lba):
    """Runs in the child, given the parent's objects in ``parents`` (and
    nowhere else, so dropping them here really drops them); returns what
    it saw."""
    dev, ns, hb = parents["dev"], parents["busy"], parents["hb"]
    seen = {}
    calls = {
        "info": lambda: dev.info(),
        "namespace": lambda: dev.namespace(),
        "alloc": lambda: dev.alloc(4096),
        "read": lambda: ns.read(bytearray(ns.lba_size), 0),
        "read_async": lambda: ns.read_async(bytearray(ns.lba_size), 0),
        "write": lambda: ns.write(bytes(ns.lba_size), 0),
        "flush": lambda: ns.flush(),
        "idle_read": lambda: parents["idle"].read(bytearray(ns.lba_size), 0),
        "hostbuffer_view": lambda: memoryview(hb),
        "hostbuffer_read": lambda: ns.read(hb, 0),
    }
    for name, call in calls.items():
        try:
            call()
            seen[name] = "went through"
        except gpunvme.ForkedError as e:
            seen[name] = "forked" if (e.opened_by, e.pid) == (os.getppid(), os.getpid()) else "wrong pids"
        except BaseException as e:  # noqa: BLE001 - report it
            seen[name] = repr(e)
    # Closing and dropping the parent's objects here must not reach the
    # module: the idle namespace's queue pair and the HostBuffer's mapping
    # are freed in this process (the busy one is still referenced by the
    # parent's in-flight jobs); the parent checks them afterwards.
    ns.close()
    dev.close()
    calls.clear()
    parents.clear()
    dev = ns = hb = None
    gc.collect()
    # The child's own file works.
    with gpunvme.open(device_path) as mine:
        n = mine.namespace()
        want = patterned(777, lba, n.lba_size, 64 << 10)
        n.write(want, lba)
        back = np.zeros_like(want)
        n.read(back, lba)
        seen["own_device"] = "ok" if first_mismatch(back, want) is None else "mismatch"
    return seen


def wait_child(pid):
    deadline = time.monotonic() + CHILD_DEADLINE
    while time.monotonic() < deadline:
        got, status = os.waitpid(pid, os.WNOHANG)
        if got == pid:
            return status
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail(f"the child did not finish in {CHILD_DEADLINE} s")


def test_fork_during_transfers(device_path):
    # Only this dict refers to the objects (the child drops them all).
    objs = {"dev": gpunvme.open(device_path)}
    objs["busy"] = objs["dev"].namespace(qpairs=2)
    objs["idle"] = objs["dev"].namespace()
    objs["hb"] = objs["dev"].alloc(4096)
    ns = objs["busy"]
    bs = ns.lba_size
    base = region_lba(ns, 23)
    n = 512 << 10
    lbas = [base, base + n // bs]
    for i, lba in enumerate(lbas):
        ns.write(patterned(500 + i, lba, bs, n), lba)
    busy_qids, idle_qids = sorted(ns._qids()), objs["idle"]._qids()
    bufs = [np.zeros(n, dtype=np.uint8) for _ in lbas]
    # Transfers in flight on both queue pairs when the fork comes.
    futs = [ns.read_async(b, lba) for b, lba in zip(bufs, lbas)]
    futs += [ns.read_async(np.zeros(n, dtype=np.uint8), lbas[0]) for _ in range(4)]
    del ns
    child_lba = region_lba(objs["idle"], 24)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            out = child_checks(device_path, objs, child_lba)
        except BaseException as e:  # noqa: BLE001
            out = {"child failed": repr(e)}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        report = f.read()
    status = wait_child(pid)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    seen = json.loads(report or b"{}")
    expected = {k: "forked" for k in ("info", "namespace", "alloc", "read", "read_async", "write", "flush",
                                      "idle_read", "hostbuffer_view", "hostbuffer_read")}
    expected["own_device"] = "ok"
    assert seen == expected

    # The parent's transfers finished, byte for byte.
    assert [f.result(timeout=60) for f in futs] == [n] * len(futs)
    for i, (b, lba) in enumerate(zip(bufs, lbas)):
        assert first_mismatch(b, patterned(500 + i, lba, bs, n)) is None, i
    # Its queue pairs are the same ones and still work (the child's drops
    # destroyed nothing); so does its HostBuffer.
    ns, idle, hb = objs["busy"], objs["idle"], objs["hb"]
    assert sorted(ns._qids()) == busy_qids and idle._qids() == idle_qids
    for i, lba in enumerate(lbas):
        back = np.zeros(n, dtype=np.uint8)
        idle.read(back, lba)
        assert first_mismatch(back, patterned(500 + i, lba, bs, n)) is None
    assert ns.read(hb, lbas[0]) == 4096
    with memoryview(hb) as m:
        assert first_mismatch(m, patterned(500, lbas[0], bs, 4096)) is None
    objs["dev"].close()
