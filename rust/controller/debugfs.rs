// SPDX-License-Identifier: GPL-2.0-only

//! The controller's debugfs directory, `gpunvme-<bdf>/`: test knobs and
//! fault injection, all off by default (tests/README.md, "Races and faults").
//! Built with the kernel crate's `debugfs::Scope`, so the files go before
//! the data they reach; removed at unbind, when the driver data drops.

use kernel::{
    debugfs::{Scope, ScopedDir},
    fmt,
    prelude::*,
    str::CString,
    sync::{atomic::Relaxed, Arc},
    uaccess::UserSliceReader,
};

use crate::controller::lifecycle::EVENT_NAMES;
use crate::controller::shared::Shared;
use crate::controller::FakeCsts;

/// The names of `FakeCsts`' values (controller.rs), as this directory
/// reads and writes them.
const FAKE_NAMES: [&str; 3] = ["off", "cfs", "ones"];

// The `Writer` debugfs uses to show it: the name.
impl fmt::Debug for FakeCsts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0.load(Relaxed) as usize;
        f.write_str(FAKE_NAMES.get(v).copied().unwrap_or("?"))
    }
}

/// The text a test wrote, trimmed (at most 15 bytes).
fn written<'a>(reader: &mut UserSliceReader, buf: &'a mut [u8; 16]) -> Result<&'a str> {
    let n = reader.len();
    if n >= buf.len() {
        return Err(EINVAL);
    }
    reader.read_slice(&mut buf[..n])?;
    Ok(core::str::from_utf8(&buf[..n]).map_err(|_| EINVAL)?.trim())
}

impl kernel::debugfs::Reader for FakeCsts {
    fn read_from_slice(&self, reader: &mut UserSliceReader) -> Result {
        let mut buf = [0u8; 16];
        let s = written(reader, &mut buf)?;
        let i = FAKE_NAMES
            .iter()
            .position(|n| *n == s)
            .or_else(|| s.parse::<usize>().ok().filter(|i| *i < FAKE_NAMES.len()))
            .ok_or(EINVAL)?;
        self.0.store(i as u32, Relaxed);
        Ok(())
    }
}

/// What the directory's files reach: the controller's shared state (its
/// knobs), which outlives the directory.
pub(crate) struct Knobs {
    shared: Arc<Shared>,
}

/// `pci_event`: run one of the module's PCI callbacks by name, as the PCI
/// core would (the callbacks are in the C shim: 7.3's `pci::Driver` has no
/// error handlers or PM ops).
fn pci_event(k: &Knobs, reader: &mut UserSliceReader) -> Result {
    let mut buf = [0u8; 16];
    let s = written(reader, &mut buf)?;
    let (name, ev) = EVENT_NAMES
        .iter()
        .find(|(n, _)| n.to_bytes() == s.as_bytes())
        .ok_or(EINVAL)?;
    crate::shim::pci_event(&k.shared.dev, *ev, name)
}

/// The directory's name, `gpunvme-<bdf>`.
pub(crate) fn name(shared: &Shared) -> Result<CString> {
    CString::try_from_fmt(fmt!("gpunvme-{}", shared.dev.name()))
}

/// The directory of the controller `shared` is bound to, with its files.
pub(crate) fn directory(
    shared: Arc<Shared>,
    name: &CStr,
) -> impl PinInit<Scope<Knobs>, Error> + '_ {
    Scope::dir(try_init!(Knobs { shared }), name, files)
}

fn files<'a>(k: &'a Knobs, dir: &ScopedDir<'a, '_>) {
    let sh = &*k.shared;
    dir.read_write_file(c"mmap_delay_ms", &sh.mmap_delay_ms);
    dir.read_write_file(c"free_delay_ms", &sh.free_delay_ms);
    dir.read_write_file(c"drop_admin_doorbells", &sh.drop_admin_doorbells);
    dir.read_write_file(c"fake_csts", &sh.fake_csts);
    dir.read_write_file(c"relay_hold_qid", &sh.relay_hold_qid);
    dir.read_only_file(c"qpairs_allocated", &crate::queues::qpair::ALLOCATED);
    dir.write_only_callback_file(c"pci_event", k, &pci_event);
    dir.read_callback_file(c"kept", k, &kept);
    dir.read_callback_file(c"relay_cpu_per_file", k, &relay_cpu_per_file);
}

/// `relay_cpu_per_file`: relay CPU time and commands per open file, over
/// its live shared pairs and those it destroyed (`DmaRegistry::relay_cpu_per_file`).
fn relay_cpu_per_file(k: &Knobs, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    k.shared.dma.lock().relay_cpu_per_file(f)
}

/// `kept`: what the controller's DMA registry holds, by kind (after every
/// file closed, only what importers or the controller may still reach).
fn kept(k: &Knobs, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    k.shared.dma.lock().describe(f)
}
