// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! An array's memory as DLPack or the CUDA array interface describes it:
//! where it starts, how long it is, on which device, and what keeps it
//! alive while a transfer uses it.

use pyo3::prelude::*;

/// Where memory lives, as far as a transfer is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeviceKind {
    /// Host memory (DLPack kDLCPU).
    Cpu,
    /// Host memory pinned by CUDA (kDLCUDAHost): the CPU can read it.
    CudaHost,
    /// Host memory pinned by ROCm (kDLROCMHost).
    RocmHost,
    /// CUDA device memory (kDLCUDA, and every `__cuda_array_interface__`).
    Cuda,
    /// CUDA managed memory (kDLCUDAManaged).
    CudaManaged,
    /// ROCm device memory (kDLROCM).
    Rocm,
}

impl DeviceKind {
    /// Whether the CPU can address it (the host path copies it).
    pub(crate) fn is_host(self) -> bool {
        matches!(
            self,
            DeviceKind::Cpu | DeviceKind::CudaHost | DeviceKind::RocmHost
        )
    }

    /// The name `BufferInfo.device` reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::CudaHost => "cuda_host",
            DeviceKind::RocmHost => "rocm_host",
            DeviceKind::Cuda => "cuda",
            DeviceKind::CudaManaged => "cuda_managed",
            DeviceKind::Rocm => "rocm",
        }
    }
}

/// One dense run of an array's memory.
#[derive(Debug)]
pub(crate) struct ArrayMem {
    /// Address of the first byte (data pointer plus any byte offset).
    pub(crate) ptr: u64,
    /// Bytes.
    pub(crate) nbytes: usize,
    /// The producer said it must not be written.
    pub(crate) readonly: bool,
    pub(crate) kind: DeviceKind,
    /// The device's ordinal (-1: not said, e.g. the CUDA array interface,
    /// whose pointer names its device).
    pub(crate) device_id: i32,
    /// "dlpack" or "cuda_array_interface".
    pub(crate) protocol: &'static str,
    /// What keeps the memory alive: the DLPack capsule, or the object.
    pub(crate) keep: Py<PyAny>,
}
