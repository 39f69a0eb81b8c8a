// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! `gpunvme.Info` and `gpunvme.NamespaceInfo`: a controller's identity as
//! `GPUNVME_IOC_GET_INFO` reports it.

use pyo3::prelude::*;

/// One active namespace.
#[pyclass(module = "gpunvme", frozen, get_all)]
#[derive(Debug, Clone)]
pub(crate) struct NamespaceInfo {
    /// Namespace ID (1-based).
    nsid: u32,
    /// Bytes per logical block.
    lba_size: u32,
    /// Size in blocks.
    capacity: u64,
    /// Size in bytes.
    nbytes: u64,
}

#[pymethods]
impl NamespaceInfo {
    fn __repr__(&self) -> String {
        format!(
            "NamespaceInfo(nsid={}, lba_size={}, capacity={}, nbytes={})",
            self.nsid, self.lba_size, self.capacity, self.nbytes
        )
    }
}

impl From<&gpunvme::Namespace> for NamespaceInfo {
    fn from(n: &gpunvme::Namespace) -> Self {
        NamespaceInfo {
            nsid: n.nsid,
            lba_size: n.lba_size,
            capacity: n.capacity_lbas,
            nbytes: n.capacity_bytes(),
        }
    }
}

/// A controller's identity and limits.
#[pyclass(module = "gpunvme", frozen, get_all)]
#[derive(Debug, Clone)]
pub(crate) struct Info {
    /// PCI address, e.g. ``0000:01:00.0``.
    bdf: String,
    model: String,
    serial: String,
    firmware: String,
    pci_vendor: u16,
    pci_device: u16,
    /// NVMe version, e.g. ``1.4.0``.
    version: String,
    /// Largest transfer of one command (MDTS) in bytes; None: no limit.
    max_transfer_bytes: Option<u32>,
    /// Largest transfer of one command on a shared (validated) pair.
    shared_max_transfer_bytes: Option<u32>,
    /// I/O queue pairs the controller granted.
    io_queues: u32,
    /// Largest queue depth.
    max_queue_entries: u32,
    /// ``none``, ``identity (passthrough)``, ``strict``, ``lazy`` or ``other``.
    iommu_mode: &'static str,
    /// Whether this caller may use shared queue pairs now.
    shared_mode: bool,
    /// Whether this caller may claim owner mode (raw queue pairs).
    owner_mode: bool,
    /// The namespace this node is limited to (a namespace node), or None.
    node_nsid: Option<u32>,
    /// Queue pairs this file may hold at once; None: no limit.
    quota_qpairs: Option<u32>,
    /// Buffers this file may have mapped at once; None: no limit.
    quota_maps: Option<u32>,
    /// The active namespaces, lowest NSID first.
    namespaces: Vec<NamespaceInfo>,
}

impl From<&gpunvme::Info> for Info {
    fn from(i: &gpunvme::Info) -> Self {
        Info {
            bdf: i.bdf.clone(),
            model: i.model.clone(),
            serial: i.serial.clone(),
            firmware: i.firmware.clone(),
            pci_vendor: i.pci_vendor,
            pci_device: i.pci_device,
            version: i.version.to_string(),
            max_transfer_bytes: i.max_transfer_bytes,
            shared_max_transfer_bytes: i.shared_max_transfer_bytes,
            io_queues: i.io_queues,
            max_queue_entries: i.max_queue_entries,
            iommu_mode: i.iommu_mode.name(),
            shared_mode: i.modes.shared,
            owner_mode: i.modes.owner,
            node_nsid: i.node_nsid,
            quota_qpairs: i.quota_qpairs,
            quota_maps: i.quota_maps,
            namespaces: i.namespaces.iter().map(NamespaceInfo::from).collect(),
        }
    }
}

#[pymethods]
impl Info {
    fn __repr__(&self) -> String {
        format!(
            "Info(bdf={:?}, model={:?}, serial={:?}, firmware={:?}, namespaces={})",
            self.bdf,
            self.model,
            self.serial,
            self.firmware,
            self.namespaces.len()
        )
    }
}
