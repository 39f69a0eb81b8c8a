# SPDX-License-Identifier: MIT OR GPL-2.0-only
"""What gpunvme makes of a buffer argument, without a device: the buffer
protocol, DLPack capsules (fake producers made with ctypes, and NumPy's
own) and the CUDA array interface; writability, contiguity and the
DLPack capsule's life."""

from __future__ import annotations

import array
import ctypes
import gc
import mmap

import numpy as np
import pytest

import gpunvme
from helpers import KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_ROCM, KDL_VULKAN, READ_ONLY, FakeTensor, cai

inspect = gpunvme.inspect_buffer


def test_buffer_protocol_objects_are_host_memory():
    a = np.arange(12, dtype=np.float32)
    i = inspect(a, for_read=True)
    assert (i.kind, i.protocol, i.device, i.nbytes, i.readonly) == ("host", "buffer", "cpu", 48, False)
    assert i.address == a.ctypes.data
    b = bytearray(100)
    assert inspect(memoryview(b)[10:30], for_read=True).nbytes == 20
    assert inspect(array.array("q", range(4))).nbytes == 32
    m = mmap.mmap(-1, 8192)
    assert inspect(m, for_read=True).nbytes == 8192
    # A read-only object is fine to write from...
    ro = inspect(b"abcd")
    assert ro.readonly and ro.nbytes == 4


def test_reading_into_read_only_memory_is_refused():
    with pytest.raises(gpunvme.ReadOnlyBufferError, match="read-only"):
        inspect(b"abcd", for_read=True)
    a = np.zeros(16, dtype=np.uint8)
    a.setflags(write=False)
    with pytest.raises(gpunvme.ReadOnlyBufferError) as e:
        inspect(a, for_read=True)
    assert isinstance(e.value, ValueError) and isinstance(e.value, BufferError)
    with pytest.raises(gpunvme.ReadOnlyBufferError):
        inspect(memoryview(bytearray(8)).toreadonly(), for_read=True)


def test_non_contiguous_memory_is_refused_with_the_way_out():
    with pytest.raises(gpunvme.UnsupportedBufferError, match="C-contiguous"):
        inspect(np.zeros((4, 4))[:, ::2])
    with pytest.raises(gpunvme.UnsupportedBufferError):
        inspect(np.zeros((4, 4)).T, for_read=True)
    with pytest.raises(gpunvme.UnsupportedBufferError):
        inspect(memoryview(bytearray(16))[::2])


def test_objects_without_a_protocol_are_refused():
    for obj in (object(), 42, "text", [1, 2, 3]):
        with pytest.raises(gpunvme.UnsupportedBufferError) as e:
            inspect(obj)
        assert isinstance(e.value, TypeError)
        assert "buffer protocol" in str(e.value)


# ---- DLPack -----------------------------------------------------------------------


@pytest.fixture
def mem():
    """Host memory for fake tensors to point at."""
    return (ctypes.c_uint8 * 4096)()


def test_a_cpu_dlpack_tensor_is_host_memory(mem):
    base = ctypes.addressof(mem)
    t = FakeTensor(base, (4, 8), bits=32, byte_offset=64)
    i = inspect(t, for_read=True)
    assert (i.kind, i.protocol, i.device, i.nbytes) == ("host", "dlpack", "cpu", 128)
    assert i.address == base + 64
    assert t.calls == [{"max_version": (1, 1)}], "asks for a versioned capsule"


def test_a_legacy_producer_is_called_again_without_arguments(mem):
    t = FakeTensor(ctypes.addressof(mem), (16,), legacy_signature=True)
    assert inspect(t).nbytes == 16
    assert t.calls == [{}]


def test_gpu_dlpack_tensors_are_gpu_memory_with_their_device(mem):
    for dev, name in ((KDL_CUDA, "cuda"), (KDL_ROCM, "rocm")):
        t = FakeTensor(0x7F00_0000_0000, (2, 3), bits=16, device=dev, device_id=3)
        i = inspect(t, for_read=True)
        assert (i.kind, i.device, i.device_id, i.nbytes, i.address) == ("gpu", name, 3, 12, 0x7F00_0000_0000)
    pinned = inspect(FakeTensor(ctypes.addressof(mem), (8,), device=KDL_CUDA_HOST))
    assert (pinned.kind, pinned.device) == ("host", "cuda_host")


def test_dlpack_layouts_that_cannot_work_are_refused(mem):
    base = ctypes.addressof(mem)
    # Strides count elements in DLPack: (1, 4) over (4, 4) is a transpose.
    with pytest.raises(gpunvme.UnsupportedBufferError, match="not contiguous"):
        inspect(FakeTensor(base, (4, 4), strides=(1, 4), bits=32))
    # Row-major strides are fine, and extent-1 dimensions may say anything.
    assert inspect(FakeTensor(base, (4, 4), strides=(4, 1), bits=32)).nbytes == 64
    assert inspect(FakeTensor(base, (1, 4), strides=(99, 1), bits=32)).nbytes == 16
    with pytest.raises(gpunvme.UnsupportedBufferError, match="whole number of bytes"):
        inspect(FakeTensor(base, (8,), bits=4))
    assert inspect(FakeTensor(base, (8,), bits=8, lanes=4)).nbytes == 32, "lanes widen an element"
    with pytest.raises(gpunvme.UnsupportedBufferError, match="device type 7"):
        inspect(FakeTensor(base, (8,), device=KDL_VULKAN))
    with pytest.raises(gpunvme.UnsupportedBufferError, match="negative"):
        inspect(FakeTensor(base, (-1,)))
    with pytest.raises(gpunvme.UnsupportedBufferError, match="null pointer"):
        inspect(FakeTensor(0, (8,)))
    assert inspect(FakeTensor(0, (0,))).nbytes == 0, "an empty tensor may have no data"


def test_versioned_capsules_and_their_read_only_flag(mem):
    base = ctypes.addressof(mem)
    t = FakeTensor(base, (32,), versioned=True, version=(1, 1))
    assert inspect(t, for_read=True).nbytes == 32
    ro = FakeTensor(base, (32,), versioned=True, flags=READ_ONLY)
    assert inspect(ro).readonly
    with pytest.raises(gpunvme.ReadOnlyBufferError, match="read-only"):
        inspect(ro, for_read=True)
    with pytest.raises(gpunvme.UnsupportedBufferError, match="DLPack 2.0"):
        inspect(FakeTensor(base, (32,), versioned=True, version=(2, 0)))


def test_a_capsule_that_is_not_a_tensor_is_refused(mem):
    t = FakeTensor(ctypes.addressof(mem), (8,), capsule_name=b"not_a_tensor")
    with pytest.raises(gpunvme.UnsupportedBufferError, match="not_a_tensor"):
        inspect(t)

    class NotACapsule:
        def __dlpack__(self, **kw):
            return 5

        def __dlpack_device__(self):
            return (KDL_CPU, 0)

    with pytest.raises(gpunvme.UnsupportedBufferError, match="not a PyCapsule"):
        inspect(NotACapsule())


def test_the_capsule_is_not_consumed_and_its_deleter_runs_once(mem):
    # Not renamed "used_dltensor": the producer's capsule destructor calls
    # the deleter when gpunvme lets go (the DLPack rule for an unconsumed
    # capsule); a consumer that renamed it without deleting would leak.
    t = FakeTensor(ctypes.addressof(mem), (64,))
    info = inspect(t, for_read=True)
    del info
    gc.collect()
    assert (t.destroyed, t.deleted) == (1, 1)
    for _ in range(3):
        inspect(t)
    gc.collect()
    assert (t.destroyed, t.deleted) == (4, 4)


def test_numpys_own_dlpack_export_is_read_without_its_buffer_protocol():
    a = np.arange(64, dtype=np.int16)

    class OnlyDLPack:  # as a PyTorch CPU tensor: DLPack, no buffer protocol
        def __dlpack__(self, **kw):
            return a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return a.__dlpack_device__()

    i = inspect(OnlyDLPack(), for_read=True)
    assert (i.kind, i.protocol, i.address, i.nbytes) == ("host", "dlpack", a.ctypes.data, 128)
    a.setflags(write=False)
    with pytest.raises((gpunvme.ReadOnlyBufferError, BufferError)):
        inspect(OnlyDLPack(), for_read=True)


# ---- the CUDA array interface -------------------------------------------------


def test_cuda_array_interface_objects_are_gpu_memory():
    i = inspect(cai(0x7000_0000, (3, 5), "<f4"), for_read=True)
    assert (i.kind, i.protocol, i.device, i.device_id, i.nbytes, i.address) == (
        "gpu", "cuda_array_interface", "cuda", -1, 60, 0x7000_0000)
    assert inspect(cai(0x7000_0000, (3, 5), "<f4", strides=(20, 4))).nbytes == 60
    assert inspect(cai(0x7000_0000, (2,), "<c16", version=2)).nbytes == 32
    assert inspect(cai(0, (0, 4), "<f8")).nbytes == 0


def test_cuda_array_interfaces_that_cannot_work_are_refused():
    bad = [
        (cai(0x7000, (4, 4), "<f4", strides=(4, 16)), "not contiguous"),
        (cai(0x7000, (4,), "<f4", mask=object()), "masked"),
        (cai(0x7000, (4,), "<f4", version=4), "version 4"),
        (cai(0x7000, (4,), "f4"), "typestr"),
        (cai(0x7000, (4,), "<f0"), "typestr"),
        (cai(0, (4,), "<f4"), "null pointer"),
    ]
    for obj, why in bad:
        with pytest.raises(gpunvme.UnsupportedBufferError, match=why):
            inspect(obj)
    no_data = cai(0x7000, (4,), "<f4")
    no_data.__cuda_array_interface__["data"] = 0x7000
    with pytest.raises(gpunvme.UnsupportedBufferError, match="data is not"):
        inspect(no_data)
    del no_data.__cuda_array_interface__["shape"]
    with pytest.raises(gpunvme.UnsupportedBufferError, match='no "shape"'):
        inspect(no_data)
    with pytest.raises(gpunvme.ReadOnlyBufferError):
        inspect(cai(0x7000, (4,), "<f4", readonly=True), for_read=True)


def test_gpu_arrays_need_a_gpu_exporter_in_this_build():
    if gpunvme.GPU_ARRAYS:
        pytest.skip("this build registers GPU arrays")
    with gpunvme.open("/dev/null") as dev, pytest.raises(gpunvme.GpuUnavailableError) as e:
        dev.register(cai(0x7000_0000, (1024,), "|u1"))
    assert isinstance(e.value, NotImplementedError)
    assert "register_dmabuf" in str(e.value)
