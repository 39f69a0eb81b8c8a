// SPDX-License-Identifier: GPL-2.0-only

//! Memory the controller or a peer may reach: the registry that owns all of
//! it until it is provably unreachable (`registry`), the pages one file may
//! name in its commands (`buffers`), and dma-buf export and import
//! (`dmabuf_exporter.c`, `dmabuf_importer.c`, reached through `crate::shim`).

pub(crate) mod buffers;
pub(crate) mod registry;
