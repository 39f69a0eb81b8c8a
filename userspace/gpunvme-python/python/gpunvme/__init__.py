# SPDX-License-Identifier: MIT OR GPL-2.0-only
"""NVMe SSD transfers into host and GPU memory, through the gpunvme module.

    import numpy as np
    import gpunvme

    with gpunvme.open("/dev/gpunvme0") as dev:
        ns = dev.namespace(1)
        buf = np.zeros(16 * ns.lba_size, dtype=np.uint8)
        ns.read(buf, lba=0)                       # 16 blocks from LBA 0
        fut = ns.write_async(buf, lba=1024)       # AsyncFuture: a concurrent.futures.Future
        fut.result(timeout=10)

Buffers: anything with the buffer protocol (NumPy arrays, bytearray,
memoryview: copied through a DMA bounce buffer), ``Device.alloc()``
(:class:`HostBuffer`, zero copy), dma-bufs (``Device.register_dmabuf``,
zero copy) and GPU arrays speaking DLPack or ``__cuda_array_interface__``
(PyTorch, CuPy, JAX), which ``Device.register`` maps where this build
can export GPU memory (``GPU_ARRAYS``). Errors are :class:`GpunvmeError`
subclasses carrying ``errno`` and the NVMe ``status``. The GIL is released
while the device works. In a child of ``fork()`` every object of the
parent raises :class:`ForkedError`; open the device again there.
"""

from ._errors import (
    AlignmentError,
    BufferBusyError,
    ClosedError,
    DeviceError,
    DeviceTimeoutError,
    ForkedError,
    GpuUnavailableError,
    GpunvmeError,
    InvalidArgumentError,
    NotFoundError,
    NvmeError,
    OutOfRangeError,
    PoisonedError,
    ReadOnlyBufferError,
    RefusedError,
    UnsupportedBufferError,
)
from ._future import AsyncFuture
from ._native import (
    GPU_EXPORT as _GPU_EXPORT,
    BufferInfo,
    Device,
    HostBuffer,
    Info,
    Namespace,
    NamespaceInfo,
    NvmeStatus,
    RegisteredBuffer,
    inspect_buffer,
    open,
)

__version__ = "0.1.0"

#: Whether GPU arrays (DLPack/CUDA array interface pointers into device
#: memory) can be registered by this build; dma-bufs always can.
GPU_ARRAYS: bool = _GPU_EXPORT

__all__ = [
    "open",
    "inspect_buffer",
    "Device",
    "Namespace",
    "HostBuffer",
    "RegisteredBuffer",
    "Info",
    "NamespaceInfo",
    "NvmeStatus",
    "BufferInfo",
    "AsyncFuture",
    "GPU_ARRAYS",
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
