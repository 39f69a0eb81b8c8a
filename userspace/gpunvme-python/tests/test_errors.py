# SPDX-License-Identifier: MIT OR GPL-2.0-only
"""Errors without a device: every library error becomes its exception,
with errno and the NVMe status; open() refuses what is not a device; a
fork is caught before anything reaches the node."""

from __future__ import annotations

import errno
import os
import pickle

import pytest

import gpunvme
from gpunvme import _native


def samples():
    return dict(_native._sample_errors())


def test_every_library_error_has_its_class_and_builtin_base():
    s = samples()
    want = {
        "io": (gpunvme.DeviceError, OSError),
        "ioctl": (gpunvme.DeviceError, OSError),
        "refused": (gpunvme.RefusedError, gpunvme.GpunvmeError),
        "not_found": (gpunvme.NotFoundError, LookupError),
        "invalid": (gpunvme.InvalidArgumentError, ValueError),
        "nvme": (gpunvme.NvmeError, gpunvme.GpunvmeError),
        "timeout": (gpunvme.DeviceTimeoutError, TimeoutError),
        "poisoned": (gpunvme.PoisonedError, gpunvme.GpunvmeError),
        "forked": (gpunvme.ForkedError, gpunvme.GpunvmeError),
    }
    assert set(s) == set(want)
    for name, (cls, base) in want.items():
        e = s[name]
        assert type(e) is cls, (name, type(e))
        assert isinstance(e, base) and isinstance(e, gpunvme.GpunvmeError), name


def test_os_errors_carry_errno_path_and_ioctl():
    s = samples()
    io = s["io"]
    assert io.errno == errno.ENOENT
    assert io.path == "/dev/gpunvme9" and io.ioctl is None
    assert "open the gpunvme device node" in str(io)
    ioctl = s["ioctl"]
    assert ioctl.errno == errno.ENOSPC
    assert ioctl.ioctl == "GPUNVME_IOC_CREATE_QPAIR" and ioctl.path == "/dev/gpunvme0"
    assert "no I/O queue pair left" in str(ioctl)
    assert ioctl.status is None


def test_nvme_error_carries_the_status():
    e = samples()["nvme"]
    assert e.errno is None
    st = e.status
    assert isinstance(st, gpunvme.NvmeStatus)
    assert (st.sct, st.sc, st.dnr, st.more, st.crd) == (0, 0x80, True, False, 0)
    assert st.name == "LBA Out of Range"
    assert (e.qid, e.cid) == (2, 7)
    assert e.command == "Read of 8 block(s) at LBA 9 (nsid 1)"
    assert "LBA Out of Range (SCT 0x0, SC 0x80, DNR)" in str(e)


def test_timeout_poison_and_fork_details():
    s = samples()
    t = s["timeout"]
    assert (t.qid, t.cid) == (3, 5) and "Write of 1 block" in t.command
    assert t.errno is None and t.status is None
    assert s["poisoned"].qid == 4
    f = s["forked"]
    assert (f.opened_by, f.pid) == (100, 101)
    assert "open the device again" in str(f)


def test_errors_pickle_whole():
    # multiprocessing (a DataLoader's pool) sends exceptions by pickle.
    for name, e in samples().items():
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is type(e) and str(back) == str(e), name
        assert (back.errno, back.status) == (e.errno, e.status), name
        assert {k: v for k, v in vars(back).items()} == vars(e), name
    st = gpunvme.NvmeStatus(2, 0x86, crd=1, more=True, dnr=True)
    assert pickle.loads(pickle.dumps(st)) == st


def test_nvme_status_round_trips_and_checks_its_fields():
    st = gpunvme.NvmeStatus(2, 0x81, crd=3, more=True, dnr=True)
    assert st.name == "Unrecovered Read Error"
    assert gpunvme.NvmeStatus.from_raw(st.raw) == st
    assert gpunvme.NvmeStatus.from_raw(st.raw | 1) == st, "the phase tag is not status"
    assert hash(st) == hash(gpunvme.NvmeStatus(2, 0x81, crd=3, more=True, dnr=True))
    assert st != gpunvme.NvmeStatus(2, 0x81)
    assert str(gpunvme.NvmeStatus(7, 0xC3)) == "unknown status (SCT 0x7, SC 0xc3)"
    assert gpunvme.NvmeStatus(0, 0).name == "Successful Completion"
    with pytest.raises(ValueError):
        gpunvme.NvmeStatus(8, 0)
    with pytest.raises(ValueError):
        gpunvme.NvmeStatus(0, 0, crd=4)


def test_open_refuses_what_is_not_a_device():
    with pytest.raises(gpunvme.DeviceError) as e:
        gpunvme.open("/nonexistent/gpunvme0")
    assert e.value.errno == errno.ENOENT and isinstance(e.value, OSError)
    for bad in ("not a device", "0000:zz:00.0"):
        with pytest.raises(gpunvme.InvalidArgumentError, match="not a device"):
            gpunvme.open(bad)
    with pytest.raises(gpunvme.InvalidArgumentError, match="a device is an int"):
        gpunvme.open(3.5)
    # A well-formed address with no gpunvme node behind it.
    with pytest.raises(gpunvme.NotFoundError, match="gpunvme bind"):
        gpunvme.open("0000:7f:1f.7")


def test_an_ioctl_on_a_node_that_is_not_gpunvme_names_the_request():
    # /dev/null opens; its ioctls fail with ENOTTY.
    with gpunvme.open("/dev/null") as dev:
        with pytest.raises(gpunvme.DeviceError) as e:
            dev.info()
        assert e.value.errno == errno.ENOTTY
        assert e.value.ioctl == "GPUNVME_IOC_GET_INFO"
        assert "not a gpunvme device node" in str(e.value)
        with pytest.raises(gpunvme.DeviceError) as e:
            dev.alloc(4096)
        assert e.value.ioctl == "GPUNVME_IOC_MAP_HOST"
        for kw in ({"qpairs": 0}, {"qpairs": 65}, {"timeout": 0.0}, {"timeout": float("nan")},
                   {"bounce_bytes": 0}):
            with pytest.raises(gpunvme.InvalidArgumentError):
                dev.namespace(1, **kw)
        with pytest.raises(gpunvme.InvalidArgumentError, match="not a descriptor"):
            dev.register_dmabuf(-1)
        with pytest.raises(gpunvme.InvalidArgumentError, match="needs no registration"):
            dev.register(bytearray(8))
    assert dev.closed
    with pytest.raises(gpunvme.ClosedError):
        dev.info()


def test_a_forked_child_is_refused_before_any_ioctl():
    dev = gpunvme.open("/dev/null")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what it saw, then leave at once
        os.close(r)
        try:
            dev.info()
            msg = b"info() went through"
        except gpunvme.ForkedError as e:
            msg = b"ok" if (e.opened_by, e.pid) == (os.getppid(), os.getpid()) else b"wrong pids"
        except BaseException as e:  # noqa: BLE001 - report anything else
            msg = repr(e).encode()
        os.write(w, msg)
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        got = f.read()
    os.waitpid(pid, 0)
    assert got == b"ok"
    # The parent still gets the ioctl's own answer.
    with pytest.raises(gpunvme.DeviceError):
        dev.info()
    dev.close()
