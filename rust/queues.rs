// SPDX-License-Identifier: GPL-2.0-only

//! I/O queue pairs: their memory and mmap layout (`qpair`), and the NVMe
//! commands and completions the module builds and reads (`command`).

pub(crate) mod command;
pub(crate) mod qpair;
