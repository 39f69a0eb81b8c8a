// SPDX-License-Identifier: GPL-2.0-only

//! mmap of a queue pair's memory and doorbells, and the shim's callbacks
//! for its faults and the close of its last VMA.

use kernel::{bindings, mm::virt::VmaNew, prelude::*, sync::atomic::Relaxed};

use super::OpenState;
use crate::queues::qpair::{self, MapKind};
use crate::shim;

impl OpenState {
    pub(crate) fn mmap(&self, vma: &VmaNew) -> Result {
        let sh = &self.shared;
        // SAFETY: `vma` is a valid VMA being set up; reading a field is fine.
        let pgoff = unsafe { (*vma.as_ptr()).vm_pgoff } as u64;
        let len = vma.end() - vma.start();
        // As above: bindgen may type VM_SHARED differently.
        #[allow(clippy::unnecessary_cast)]
        let shared_vma = vma.flags() & bindings::VM_SHARED as usize != 0;
        if !shared_vma {
            dev_warn!(sh.dev, "mmap: must be MAP_SHARED\n");
            return Err(EINVAL);
        }
        let Some((kind, qid)) = qpair::decode_pgoff(pgoff) else {
            dev_warn!(sh.dev, "mmap: offset {:#x} names nothing\n", pgoff * 4096);
            return Err(EINVAL);
        };
        self.alive()?;
        let dma = sh.dma.lock();
        let Some(q) = dma.live_queue(self.id, qid) else {
            dev_warn!(
                sh.dev,
                "mmap: qid {} is not a live queue pair of this file\n",
                qid
            );
            return Err(EINVAL);
        };
        let (want, what) = match (kind, &q.shadow) {
            (MapKind::Sq, _) => (q.visible_sq().size, "SQ"),
            (MapKind::Cq, _) if q.cq_in_map.is_some() => {
                dev_warn!(
                    sh.dev,
                    "mmap: the CQ of qid {} is in a mapping of this file, not the module's\n",
                    qid
                );
                return Err(EINVAL);
            }
            (MapKind::Cq, _) => (q.visible_cq().size, "CQ"),
            (MapKind::Doorbell, _) => (4096, "doorbell page"),
            (MapKind::PrpPool, Some(s)) => (s.pool.size(), "PRP pool"),
            (MapKind::PrpPool, None) => {
                dev_warn!(
                    sh.dev,
                    "mmap: qid {} is a raw pair: it has no PRP pool\n",
                    qid
                );
                return Err(EINVAL);
            }
        };
        if len != want {
            dev_warn!(
                sh.dev,
                "mmap: {} of qid {} is {} bytes, not {}\n",
                what,
                qid,
                want,
                len
            );
            return Err(EINVAL);
        }
        let (gen, mmio) = (q.gen, kind == MapKind::Doorbell && q.shadow.is_none());
        drop(dma);
        let delay = sh.mmap_delay_ms.load(Relaxed);
        if delay != 0 {
            // Test knob: hold this mmap after its checks (see `Shared`).
            kernel::time::delay::fsleep(kernel::time::Delta::from_millis(delay.into()));
        }
        // Counted before the VMA can fault, so a destroy keeps the pair
        // (a pair destroyed meanwhile is freed; its faults are SIGBUS).
        let mut dma = sh.dma.lock();
        dma.reserve_mapping()?;
        shim::mmap_setup(
            vma,
            core::ptr::from_ref(self).cast(),
            gen,
            kind as u32,
            mmio,
        )?;
        dma.map_opened(gen);
        Ok(())
    }

    /// The last VMA of an mmap of queue pair `gen` went: a retired pair
    /// nothing else reaches is freed.
    fn mapping_closed(&self, gen: u64) {
        self.shared.dma.lock().map_closed(gen);
        self.shared.free_unreached();
    }

    /// A fault on a mapping of this file: insert page `index` of object
    /// `gen`/`kind`, or refuse (SIGBUS) once the controller is gone or the
    /// object is. Under the `dma` lock, where unbind marks the controller
    /// gone, so nothing is inserted after unbind's zap.
    fn fault(
        &self,
        gen: u64,
        kind: u32,
        index: u64,
        vma: *mut core::ffi::c_void,
        addr: usize,
    ) -> u32 {
        let sh = &self.shared;
        let dma = sh.dma.lock();
        if self.alive().is_err() {
            return shim::fault_sigbus();
        }
        // Live or retired (a destroyed pair stays while it is mapped).
        let Some(q) = dma
            .queues
            .iter()
            .find(|e| e.file == self.id && e.q.gen == gen)
            .map(|e| &e.q)
        else {
            return shim::fault_sigbus();
        };
        let mem = match kind {
            k if k == MapKind::Sq as u32 => Some(q.visible_sq()),
            k if k == MapKind::Cq as u32 && q.cq_in_map.is_none() => Some(q.visible_cq()),
            k if k == MapKind::PrpPool as u32 => q.shadow.as_ref().map(|s| qpair::bytes(&s.pool)),
            k if k == MapKind::Doorbell as u32 => match &q.shadow {
                Some(s) => Some(qpair::bytes(&s.cells)),
                None => {
                    if index != 0 {
                        return shim::fault_sigbus();
                    }
                    let Some((page, _, _)) = qpair::doorbell_page(sh.cap, q.qid) else {
                        return shim::fault_sigbus();
                    };
                    // SAFETY: `vma` is faulting; the device is bound (not
                    // gone, under the lock unbind takes first), and unbind
                    // zaps this mapping before the BAR is released.
                    return unsafe { shim::insert_bar(vma, addr, &sh.dev, page) };
                }
            },
            _ => None,
        };
        let Some(mem) = mem else {
            return shim::fault_sigbus();
        };
        let off = index as usize * crate::controller::regs::PAGE_SIZE;
        if off >= mem.size {
            return shim::fault_sigbus();
        }
        // SAFETY: `vma` is faulting; `off` is inside `mem`, which is freed
        // only once no mmap of it is left (counted under this lock from
        // mmap to its last VMA's close, see `mapping_closed`), or after a
        // failure or unbind, after the zap that follows marking the
        // controller gone under this lock.
        unsafe { shim::insert_coherent(vma, addr, mem.cpu, off) }
    }
}

/// Called by the shim when the last VMA of an mmap of this file goes.
#[no_mangle]
extern "C" fn gpunvme_mmap_closed(state: *const core::ffi::c_void, gen: u64) {
    // SAFETY: `state` is the `OpenState` of the file the VMA mapped, set
    // at mmap; the VMA holds a reference on that file until after this.
    let me = unsafe { &*state.cast::<OpenState>() };
    me.mapping_closed(gen)
}

/// Called by the shim's fault handler.
#[no_mangle]
extern "C" fn gpunvme_mmap_fault(
    state: *const core::ffi::c_void,
    gen: u64,
    kind: u32,
    index: u64,
    vma: *mut core::ffi::c_void,
    addr: usize,
) -> u32 {
    // SAFETY: `state` is the `OpenState` of the file the VMA maps, set at
    // mmap; the VMA holds a reference on that file, so it is alive.
    let me = unsafe { &*state.cast::<OpenState>() };
    me.fault(gen, kind, index, vma, addr)
}
