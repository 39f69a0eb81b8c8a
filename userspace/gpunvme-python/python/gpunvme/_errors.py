# SPDX-License-Identifier: MIT OR GPL-2.0-only
"""The exceptions gpunvme raises.

Every one is a :class:`GpunvmeError` and carries ``errno`` (the OS error
number, or ``None``) and ``status`` (the NVMe completion status as an
:class:`~gpunvme.NvmeStatus`, or ``None``). Each also derives from the
built-in exception a Python programmer would catch for it:
``DeviceError`` is an ``OSError``, ``DeviceTimeoutError`` a
``TimeoutError``, argument errors are ``ValueError`` (alignment, bounds,
read-only and unsupported buffers among them).
"""

from __future__ import annotations

from typing import Any, Optional

__all__ = [
    "GpunvmeError",
    "DeviceError",
    "NvmeError",
    "DeviceTimeoutError",
    "PoisonedError",
    "ForkedError",
    "RefusedError",
    "NotFoundError",
    "InvalidArgumentError",
    "AlignmentError",
    "OutOfRangeError",
    "ReadOnlyBufferError",
    "UnsupportedBufferError",
    "BufferBusyError",
    "ClosedError",
    "GpuUnavailableError",
]


class GpunvmeError(Exception):
    """Base class of every gpunvme error.

    ``errno``: the OS error number when a system call failed, else None.
    ``status``: the NVMe status when the controller failed a command
    (:class:`NvmeError`), else None. Other keyword arguments become
    attributes (``qid``, ``cid``, ``command``, ``path``, ...).
    """

    errno: Optional[int]
    status: Any

    def __init__(self, message: str, *, errno: Optional[int] = None,
                 status: Any = None, **details: Any) -> None:
        super().__init__(message)
        self.errno = errno
        self.status = status
        for name, value in details.items():
            setattr(self, name, value)

    def __reduce__(self):
        # Pickled whole (multiprocessing sends exceptions between
        # processes): OSError's errno is not in __dict__.
        details = {k: v for k, v in vars(self).items() if k not in ("errno", "status")}
        message = self.args[0] if self.args else ""
        return (_rebuild, (type(self), message, self.errno, self.status, details))


def _rebuild(cls, message, errno, status, details):
    return cls(message, errno=errno, status=status, **details)


class DeviceError(GpunvmeError, OSError):
    """Opening the device node or an ioctl on it failed (``errno``;
    ``ioctl`` names the request, ``path`` the node)."""


class NvmeError(GpunvmeError):
    """The controller completed a command with an error status:
    ``status`` (SCT, SC, DNR, ...), ``qid``, ``cid`` and ``command``."""


class DeviceTimeoutError(GpunvmeError, TimeoutError):
    """A command did not complete before its deadline. The queue pair is
    poisoned and replaced; host memory was never the DMA target (see the
    package docs), so no buffer of yours can still be written."""


class PoisonedError(GpunvmeError):
    """A queue pair refuses new commands after a timeout (``qid``)."""


class ForkedError(GpunvmeError):
    """The device was opened by another process (this is a child of
    ``fork()``): a child never uses its parent's queues. Open the device
    again in the child. ``opened_by`` and ``pid`` are the two processes."""


class RefusedError(GpunvmeError):
    """The library refused something that would be unsafe."""


class NotFoundError(GpunvmeError, LookupError):
    """No such device, node or namespace."""


class InvalidArgumentError(GpunvmeError, ValueError):
    """An argument cannot work (the message says which and why)."""


class AlignmentError(InvalidArgumentError):
    """A byte offset or length is not a whole number of logical blocks, or
    a buffer offset the DMA path cannot use."""


class OutOfRangeError(InvalidArgumentError, IndexError):
    """A block range beyond the namespace, or a transfer beyond the end of
    the buffer."""


class ReadOnlyBufferError(InvalidArgumentError, BufferError):
    """A read (into memory) was given a buffer that cannot be written."""


class UnsupportedBufferError(InvalidArgumentError, TypeError):
    """An object that is not usable as a buffer: no buffer protocol, DLPack
    or CUDA array interface, not contiguous, or of an unsupported kind."""


class BufferBusyError(GpunvmeError, BufferError):
    """A :class:`~gpunvme.HostBuffer` cannot be used now: views of it
    (memoryview, NumPy arrays) are alive during a transfer, or a transfer
    holds it while a view is asked for."""


class ClosedError(GpunvmeError, ValueError):
    """The device or namespace was closed."""


class GpuUnavailableError(GpunvmeError, NotImplementedError):
    """GPU memory (a CUDA or ROCm pointer) cannot be registered in this
    build: register its dma-buf with ``Device.register_dmabuf`` instead."""
