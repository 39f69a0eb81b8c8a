# SPDX-License-Identifier: MIT OR GPL-2.0-only
"""Test helpers: the project's data pattern, fake DLPack producers and
CUDA-array-interface objects, and udmabufs (memfd-backed dma-bufs that
stand in for GPU memory, as the dma-buf selftests use them)."""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
import struct
from typing import Optional, Sequence

import numpy as np

# ---- the pattern of userspace/gpunvme/src/pattern.rs ------------------------

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def pattern(seed: int, offset: int, nbytes: int) -> np.ndarray:
    """The bytes ``gpunvme write --pattern seed`` puts at byte ``offset``
    (a multiple of 8) of a namespace: each little-endian 64-bit word is
    SplitMix64's finalizer of seed + (offset / 8) * golden ratio."""
    assert offset % 8 == 0
    first = offset // 8
    idx = np.arange(first, first + (nbytes + 7) // 8, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + idx * _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        z = z ^ (z >> np.uint64(31))
    return z.astype("<u8").view(np.uint8)[:nbytes].copy()


def first_mismatch(got, want) -> Optional[int]:
    """The first byte offset where two byte arrays differ, or None."""
    got = np.frombuffer(memoryview(got).cast("B"), dtype=np.uint8)
    want = np.frombuffer(memoryview(want).cast("B"), dtype=np.uint8)
    assert got.size == want.size, (got.size, want.size)
    bad = np.flatnonzero(got != want)
    return int(bad[0]) if bad.size else None


# ---- DLPack producers made with ctypes ---------------------------------------


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", DELETER),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_VULKAN, KDL_ROCM = 1, 2, 3, 7, 10
READ_ONLY = 1

_capi = ctypes.pythonapi
_capi.PyCapsule_New.restype = ctypes.py_object
_capi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capi.PyCapsule_IsValid.restype = ctypes.c_int
_capi.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
# Capsule names must outlive their capsules: module constants.
_NAMES = {b"dltensor": ctypes.c_char_p(b"dltensor"),
          b"dltensor_versioned": ctypes.c_char_p(b"dltensor_versioned"),
          b"not_a_tensor": ctypes.c_char_p(b"not_a_tensor")}


class FakeTensor:
    """A DLPack producer over ``data`` (an address) with the given layout.

    ``deleted`` counts deleter calls: the producer's capsule destructor
    calls it when the capsule was not consumed, as NumPy's and PyTorch's
    do. ``versioned``: answer ``max_version`` with a DLManagedTensorVersioned
    of ``version``; ``legacy_signature``: take no keyword arguments at all
    (producers older than DLPack 1.0)."""

    def __init__(self, data: int, shape: Sequence[int], *, strides: Optional[Sequence[int]] = None,
                 bits: int = 8, lanes: int = 1, code: int = 1, device: int = KDL_CPU, device_id: int = 0,
                 byte_offset: int = 0, versioned: bool = False, version=(1, 0), flags: int = 0,
                 legacy_signature: bool = False, capsule_name: bytes = b""):
        self.deleted = 0
        self.destroyed = 0
        self._shape = (ctypes.c_int64 * max(1, len(shape)))(*shape)
        self._strides = (ctypes.c_int64 * max(1, len(shape)))(*(strides or [0]))
        t = DLTensor(data, DLDevice(device, device_id), len(shape), DLDataType(code, bits, lanes),
                     self._shape, self._strides if strides is not None else None, byte_offset)
        self._deleter = DELETER(self._on_delete)
        if versioned:
            self._managed = DLManagedTensorVersioned(DLPackVersion(*version), None, self._deleter, flags, t)
            self._name = capsule_name or b"dltensor_versioned"
        else:
            self._managed = DLManagedTensor(t, None, self._deleter)
            self._name = capsule_name or b"dltensor"
        self._destructor = CAPSULE_DESTRUCTOR(self._on_capsule_free)
        self._device = (device, device_id)
        self.legacy_signature = legacy_signature
        self.calls = []

    def _on_delete(self, _ptr):
        self.deleted += 1

    def _on_capsule_free(self, capsule):
        self.destroyed += 1
        # Unconsumed (still its own name): the destructor calls the deleter.
        if _capi.PyCapsule_IsValid(capsule, _NAMES[self._name]):
            self._deleter(ctypes.addressof(self._managed))

    def __dlpack_device__(self):
        return self._device

    def __dlpack__(self, *args, **kwargs):
        if self.legacy_signature and (args or kwargs):
            raise TypeError("__dlpack__() takes no arguments")
        self.calls.append(kwargs)
        return _capi.PyCapsule_New(ctypes.addressof(self._managed), _NAMES[self._name],
                                   ctypes.cast(self._destructor, ctypes.c_void_p))


class FakeCudaArray:
    """An object with ``__cuda_array_interface__``: a dict as CuPy makes it."""

    def __init__(self, **iface):
        self.__cuda_array_interface__ = iface


def cai(ptr: int, shape, typestr: str = "|u1", *, strides=None, readonly: bool = False, version: int = 3, **extra):
    d = {"shape": tuple(shape), "typestr": typestr, "data": (ptr, readonly), "strides": strides, "version": version}
    d.update(extra)
    return FakeCudaArray(**d)


# ---- udmabuf: a dma-buf over a memfd -------------------------------------------

UDMABUF_CREATE = 0x40187542  # _IOW('u', 0x42, struct udmabuf_create)
UDMABUF_FLAGS_CLOEXEC = 0x01
F_ADD_SEALS, F_SEAL_SHRINK = 1033, 0x0002


class Udmabuf:
    """``size`` bytes of memfd memory, mapped here (``mem``) and exported
    as a dma-buf (``fd``), as tests/selftests/gpunvme_dmabuf_test.c makes
    them."""

    def __init__(self, size: int):
        self.size = size
        self.memfd = os.memfd_create("gpunvme-python-test", os.MFD_ALLOW_SEALING)
        os.ftruncate(self.memfd, size)
        fcntl.fcntl(self.memfd, F_ADD_SEALS, F_SEAL_SHRINK)
        self.mem = mmap.mmap(self.memfd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        dev = os.open("/dev/udmabuf", os.O_RDWR)
        try:
            # A mutable argument: ioctl() then returns the call's result (the fd).
            arg = bytearray(struct.pack("IIQQ", self.memfd, UDMABUF_FLAGS_CLOEXEC, 0, size))
            self.fd = fcntl.ioctl(dev, UDMABUF_CREATE, arg, True)
        finally:
            os.close(dev)

    def view(self) -> np.ndarray:
        return np.frombuffer(self.mem, dtype=np.uint8)

    def close(self):
        os.close(self.fd)
        self.mem.close()
        os.close(self.memfd)


# ---- device regions ------------------------------------------------------------

#: Each device test writes its own 2 MiB region of the namespace (the VM's
#: disks are 64 MiB: 32 regions), so the tests do not depend on each other.
REGION = 2 << 20


def region_lba(ns, k: int, nbytes: int = REGION) -> int:
    """The first block of region ``k`` (``nbytes`` must fit in it)."""
    assert nbytes <= REGION and (k + 1) * REGION <= ns.nbytes, (k, ns.nbytes)
    return k * REGION // ns.lba_size


def patterned(seed: int, lba: int, lba_size: int, nbytes: int) -> np.ndarray:
    """The pattern of ``nbytes`` from block ``lba``."""
    return pattern(seed, lba * lba_size, nbytes)
