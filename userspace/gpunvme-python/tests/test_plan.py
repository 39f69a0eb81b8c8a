# SPDX-License-Identifier: MIT OR GPL-2.0-only
"""A transfer's checks, without a device (_native._check_plan runs the
Namespace's own code on a made-up namespace): block counts, byte ranges,
alignment and bounds, each refusal with its exception."""

from __future__ import annotations

import numpy as np
import pytest

import gpunvme
from gpunvme._native import _check_plan


def plan(buf, **kw):
    kw.setdefault("lba_size", 512)
    kw.setdefault("capacity", 1000)
    return _check_plan(buf, **kw)


def test_the_buffer_decides_the_count_by_default():
    assert plan(bytearray(4096), lba=7) == (7, 8, 0, 4096)
    assert plan(bytearray(4096), lba=7, count=2) == (7, 2, 0, 1024)
    assert plan(np.zeros(1024, dtype=np.float32), buf_offset=512) == (0, 7, 512, 3584)
    # Host memory is copied, so any buffer offset works.
    assert plan(bytearray(1024 + 3), buf_offset=3) == (0, 2, 3, 1024)


def test_byte_ranges_become_blocks():
    assert plan(bytearray(8192), file_offset=4096) == (8, 16, 0, 8192)
    assert plan(bytearray(8192), file_offset=0, size=1024, buf_offset=100) == (0, 2, 100, 1024)


def test_alignment():
    with pytest.raises(gpunvme.AlignmentError, match="whole number of 512-byte blocks"):
        plan(bytearray(1000))
    with pytest.raises(gpunvme.AlignmentError, match="file_offset 100"):
        plan(bytearray(512), file_offset=100)
    with pytest.raises(gpunvme.AlignmentError, match="size 700"):
        plan(bytearray(1024), file_offset=0, size=700)
    with pytest.raises(gpunvme.AlignmentError):
        plan(bytearray(4096), lba_size=4096, file_offset=512)
    assert issubclass(gpunvme.AlignmentError, ValueError)


def test_bounds():
    with pytest.raises(gpunvme.OutOfRangeError, match="do not fit the 1024-byte buffer"):
        plan(bytearray(1024), count=3)
    with pytest.raises(gpunvme.OutOfRangeError, match="past the end"):
        plan(bytearray(1024), buf_offset=1025)
    with pytest.raises(gpunvme.OutOfRangeError, match="beyond namespace 1"):
        plan(bytearray(1024), lba=999)
    assert plan(bytearray(512), lba=999) == (999, 1, 0, 512), "the last block is fine"
    with pytest.raises(gpunvme.OutOfRangeError):
        plan(bytearray(512), lba=2**64 - 1)
    with pytest.raises(gpunvme.OutOfRangeError):
        plan(bytearray(512), count=2**62)
    e = pytest.raises(gpunvme.OutOfRangeError, plan, bytearray(512), lba=5000).value
    assert isinstance(e, IndexError) and isinstance(e, ValueError)


def test_empty_transfers_are_refused():
    with pytest.raises(gpunvme.InvalidArgumentError, match="empty transfer"):
        plan(bytearray(512), count=0)
    with pytest.raises(gpunvme.InvalidArgumentError, match="empty transfer"):
        plan(bytearray(1024), buf_offset=1024)


def test_the_direction_decides_what_must_be_writable():
    assert plan(b"x" * 512, read=False) == (0, 1, 0, 512)
    with pytest.raises(gpunvme.ReadOnlyBufferError):
        plan(b"x" * 512, read=True)
