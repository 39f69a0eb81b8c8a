// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The passthrough back end behind a [`crate::Controller`]: it answers the
//! module's ioctls (`uapi/gpunvme.h`) the way the module answers them for
//! a file on a namespace node, so the library's queue pairs, buffers and
//! [`crate::Io`] (and code that speaks the UAPI, `kernels/hostrun`) work
//! on it unchanged; a pair's mmap offsets are offsets of the back end's
//! memfd ([`super::shadow::Arena`]).
//!
//! | ioctl | here |
//! | --- | --- |
//! | GET_INFO | one namespace, the window's size; shared mode only; `bdf` is the `ng` name |
//! | CREATE_QPAIR | a shadow pair (flags 0 only; raw: EPERM), on a relay thread; ENOSPC beyond [`MAX_PAIRS`] |
//! | DESTROY_QPAIR | off its relay once its commands came back (ETIMEDOUT if they do not within [`DRAIN_DEADLINE`]) |
//! | MAP_HOST | a payload region, page IOVAs for PRPs; an io_uring fixed buffer |
//! | UNMAP | EBUSY while pairs live, as in the module |
//! | MAP_DMABUF, EXPORT | EOPNOTSUPP (see [`super::dmabuf_support`]) |
//! | CLAIM_OWNER | EPERM: there are no raw queues behind a passthrough back end |

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpunvme_sys as sys;

use super::addr::{Kind, Region, Table};
use super::check::{list_entries, Limits, Window};
use super::model_ns::{ModelDisk, ModelSubmit};
use super::relay::Counters;
use super::relay_thread::{Drivers, MakeSubmit, PairShared, RelayPool, TableCell};
use super::shadow::{Arena, PairMemory, CQ_HEAD_CELL, SQ_TAIL_CELL};
use super::uring::Uring;

/// Queue pairs one back end serves at most (GET_INFO's `io_queues`).
pub const MAX_PAIRS: u32 = 256;
/// Largest queue depth (GET_INFO's `max_queue_entries`).
pub const MAX_DEPTH: u32 = 4096;
/// How long DESTROY_QPAIR waits for a pair's commands to come back.
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(10);
/// io_uring submission entries per relay thread.
const RING_ENTRIES: u32 = 256;

/// Where commands go.
pub(crate) enum Target {
    /// The kernel: NVMe passthrough on this open `/dev/ngXnY`.
    Kernel {
        ng: File,
        iopoll: bool,
        timeout_ms: u32,
        fixed_buffers: bool,
    },
    /// A model namespace (tests, the relay benchmark).
    Model(Arc<ModelDisk>),
}

/// What GET_INFO reports besides the namespace.
#[derive(Debug, Clone, Default)]
pub(crate) struct Identity {
    /// `ng0n1` (GET_INFO's bdf field).
    pub(crate) name: String,
    pub(crate) serial: String,
    pub(crate) model: String,
    pub(crate) firmware: String,
}

struct PairRec {
    shared: Arc<PairShared>,
    worker: usize,
    pool_region: usize,
    /// Its commands did not all come back at DESTROY_QPAIR: kept (and
    /// counted as live) until the back end is closed.
    kept: bool,
}

#[derive(Default)]
struct State {
    maps: BTreeMap<u32, usize>,
    pairs: BTreeMap<u16, PairRec>,
    next_handle: u32,
}

/// One passthrough back end: a namespace window, its pairs and buffers.
pub struct Device {
    pub(crate) identity: Identity,
    pub(crate) limits: Limits,
    pub(crate) iopoll: bool,
    arena: Arena,
    table: Arc<TableCell>,
    state: Mutex<State>,
    // Dropped before the arena and the claim: the relay threads stop first.
    pool: RelayPool,
    pub(crate) model: Option<Arc<ModelDisk>>,
    /// What is held for the window (the O_EXCL claim); dropped last.
    pub(crate) hold: Option<super::window::Resolved>,
    pub(crate) path: PathBuf,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("identity", &self.identity)
            .field("limits", &self.limits)
            .field("iopoll", &self.iopoll)
            .finish_non_exhaustive()
    }
}

impl Device {
    pub(crate) fn new(
        path: PathBuf,
        identity: Identity,
        limits: Limits,
        target: Target,
        drivers: Drivers,
        relay_spin: std::time::Duration,
        hold: Option<super::window::Resolved>,
    ) -> std::io::Result<Self> {
        let table = Arc::new(TableCell::default());
        let (make, iopoll, model): (MakeSubmit, bool, Option<Arc<ModelDisk>>) = match target {
            Target::Kernel {
                ng,
                iopoll,
                timeout_ms,
                fixed_buffers,
            } => {
                // The closure (and so the descriptor) lives as long as the
                // relay pool, whose threads use it.
                let ng = Arc::new(ng);
                (
                    Arc::new(move || {
                        let u = Uring::new(
                            ng.as_raw_fd(),
                            RING_ENTRIES,
                            iopoll,
                            timeout_ms,
                            fixed_buffers,
                        )?;
                        Ok(Box::new(u) as Box<dyn super::submit::Submit + Send>)
                    }),
                    iopoll,
                    None,
                )
            }
            Target::Model(disk) => {
                let d = disk.clone();
                (
                    Arc::new(move || {
                        Ok(Box::new(ModelSubmit::new(d.clone(), RING_ENTRIES as usize))
                            as Box<dyn super::submit::Submit + Send>)
                    }),
                    false,
                    Some(disk),
                )
            }
        };
        Ok(Device {
            identity,
            limits,
            iopoll,
            arena: Arena::new()?,
            pool: RelayPool::new(drivers, relay_spin, table.clone(), make),
            table,
            state: Mutex::new(State {
                next_handle: 1,
                ..Default::default()
            }),
            model,
            hold,
            path,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The memfd every pair's shadow memory is in (what a `Controller`
    /// mmaps at CREATE_QPAIR's offsets).
    pub(crate) fn memfd(&self) -> &File {
        self.arena.file()
    }

    /// The window served.
    pub fn window(&self) -> Window {
        self.limits.window
    }

    /// Whether completions are polled (IORING_SETUP_IOPOLL).
    pub fn polled(&self) -> bool {
        self.iopoll
    }

    /// Relay threads running (none with an inline relay).
    pub fn relay_threads(&self) -> usize {
        self.pool.threads()
    }

    /// Whether the threads that wait on pairs run the relay
    /// (`Options::relay_inline`).
    pub fn relay_inline(&self) -> bool {
        self.pool.is_inline()
    }

    /// With an inline relay: one pass over every pair (nothing when
    /// another thread is making one, or with relay threads).
    pub(crate) fn drive(&self) {
        self.pool.drive();
    }

    /// Why io_uring fixed buffers are not in use, if they failed.
    pub fn fixed_buffer_error(&self) -> Option<String> {
        self.pool
            .fixed_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The counters of pair `qid`, while it lives.
    pub fn counters(&self, qid: u16) -> Option<Arc<Counters>> {
        self.lock()
            .pairs
            .get(&qid)
            .map(|p| p.shared.counters.clone())
    }

    /// The window and what holds it (a kernel namespace's back end).
    pub fn window_claim(&self) -> Option<&super::window::Resolved> {
        self.hold.as_ref()
    }

    /// The model namespace behind this back end, if it is one.
    pub fn model(&self) -> Option<&Arc<ModelDisk>> {
        self.model.as_ref()
    }

    /// Answers a gpunvme ioctl.
    ///
    /// # Safety
    /// `arg` must point to the struct `request` encodes (and, for
    /// MAP_HOST, its `dma_addrs` to room for `len / 4096` u64s).
    pub(crate) unsafe fn ioctl(
        &self,
        request: sys::IoctlRequest,
        arg: *mut libc::c_void,
    ) -> Result<libc::c_int, i32> {
        // SAFETY (each arm): the caller guarantees `arg` is the struct the
        // request names, live and exclusively ours for the call.
        unsafe {
            match request {
                sys::GPUNVME_IOC_GET_INFO => self.get_info(&mut *arg.cast()),
                sys::GPUNVME_IOC_CREATE_QPAIR => self.create(&mut *arg.cast()),
                sys::GPUNVME_IOC_DESTROY_QPAIR => self.destroy(&*arg.cast()),
                sys::GPUNVME_IOC_MAP_HOST => self.map_host(&mut *arg.cast()),
                sys::GPUNVME_IOC_UNMAP => self.unmap(&*arg.cast()),
                sys::GPUNVME_IOC_MAP_DMABUF | sys::GPUNVME_IOC_EXPORT => Err(libc::EOPNOTSUPP),
                sys::GPUNVME_IOC_CLAIM_OWNER => Err(libc::EPERM),
                _ => Err(libc::ENOTTY),
            }
        }
        .map(|()| 0)
    }

    fn get_info(&self, i: &mut sys::gpunvme_info) -> Result<(), i32> {
        if i.size as usize != std::mem::size_of::<sys::gpunvme_info>()
            || i.version != sys::GPUNVME_UAPI_VERSION
        {
            return Err(libc::EINVAL);
        }
        let (size, version) = (i.size, i.version);
        *i = sys::gpunvme_info {
            size,
            version,
            ..Default::default()
        };
        // CAP: MQES (0-based), CSS: NVM command set; DSTRD 0, TO 0 (there
        // is no register: the fields the library checks agree with it).
        i.cap = u64::from(MAX_DEPTH - 1) | (1 << 37);
        i.max_queue_entries = MAX_DEPTH;
        i.doorbell_stride = 4;
        let fill = |dst: &mut [core::ffi::c_char], s: &str| {
            let n = dst.len() - 1;
            for (d, b) in dst.iter_mut().zip(s.bytes().take(n)) {
                *d = b as core::ffi::c_char;
            }
        };
        fill(&mut i.bdf, &self.identity.name);
        fill(&mut i.serial, &self.identity.serial);
        fill(&mut i.model, &self.identity.model);
        fill(&mut i.firmware, &self.identity.firmware);
        let mt = self.limits.max_transfer as u32;
        i.mdts_bytes = mt;
        i.io_queues = MAX_PAIRS;
        i.num_namespaces = 1;
        i.page_size = 4096;
        i.ns[0] = sys::gpunvme_ns_info {
            nsid: self.limits.nsid,
            lba_size: 1 << self.limits.lba_shift,
            capacity_lbas: self.limits.window.blocks,
        };
        i.iommu_mode = sys::GPUNVME_IOMMU_OTHER;
        i.modes = sys::GPUNVME_MODE_SHARED;
        i.shared_max_transfer = mt;
        i.node_nsid = self.limits.nsid;
        i.quota_qpairs = MAX_PAIRS;
        Ok(())
    }

    fn create(&self, c: &mut sys::gpunvme_qpair_create) -> Result<(), i32> {
        if c.size as usize != std::mem::size_of::<sys::gpunvme_qpair_create>()
            || c.version != sys::GPUNVME_UAPI_VERSION
            || c.__pad2 != 0
        {
            return Err(libc::EINVAL);
        }
        if c.flags & sys::GPUNVME_QPAIR_RAW != 0 {
            return Err(libc::EPERM);
        }
        if c.flags != 0 || c.cq_handle != 0 {
            return Err(libc::EINVAL);
        }
        if !(sys::GPUNVME_MIN_QUEUE_DEPTH..=MAX_DEPTH).contains(&c.depth) {
            return Err(libc::EINVAL);
        }
        let mut st = self.lock();
        if st.pairs.len() >= MAX_PAIRS as usize {
            return Err(libc::ENOSPC);
        }
        let qid = (1..=u16::MAX)
            .find(|q| !st.pairs.contains_key(q))
            .ok_or(libc::ENOSPC)?;
        let entries = list_entries(self.limits.max_transfer);
        let mem = PairMemory::new(&self.arena, c.depth, entries).map_err(|_| libc::ENOMEM)?;
        let layout = mem.layout();
        let (pool_host, pool_len) = mem.pool();
        let pool_region = self
            .table
            .update(|t| {
                t.insert(Region {
                    host: pool_host,
                    len: pool_len,
                    kind: Kind::Pool(qid),
                })
            })
            .ok_or(libc::ENOSPC);
        let pool_region = match pool_region {
            Ok(r) => r,
            Err(e) => {
                drop(mem);
                self.arena.release(layout.base, layout.len());
                return Err(e);
            }
        };
        let shared = Arc::new(PairShared {
            qid,
            depth: c.depth,
            mem,
            counters: Arc::new(Counters::default()),
            limits: Limits { qid, ..self.limits },
        });
        let worker = match self.pool.add(shared.clone()) {
            Ok(w) => w,
            Err(e) => {
                self.table.update(|t| t.remove(pool_region));
                drop(shared);
                self.arena.release(layout.base, layout.len());
                return Err(e.raw_os_error().unwrap_or(libc::ENOMEM));
            }
        };
        st.pairs.insert(
            qid,
            PairRec {
                shared,
                worker,
                pool_region,
                kept: false,
            },
        );
        c.qid = qid;
        c.sq_offset = layout.sq.0;
        c.sq_size = layout.sq.1;
        c.cq_offset = layout.cq.0;
        c.cq_size = layout.cq.1;
        c.db_offset = layout.db.0;
        c.sq_db = SQ_TAIL_CELL;
        c.cq_db = CQ_HEAD_CELL;
        c.prp_offset = layout.pool.0;
        c.prp_size = layout.pool.1;
        c.prp_dma = Table::base(pool_region);
        Ok(())
    }

    fn destroy(&self, d: &sys::gpunvme_qpair_destroy) -> Result<(), i32> {
        let (worker, shared) = {
            let st = self.lock();
            match st.pairs.get(&d.qid) {
                Some(p) if !p.kept => (p.worker, p.shared.clone()),
                _ => return Err(libc::ENOENT),
            }
        };
        // Not under the state lock: other pairs go on meanwhile.
        let drained = self.pool.remove(worker, d.qid, DRAIN_DEADLINE);
        let mut st = self.lock();
        if !drained {
            if let Some(p) = st.pairs.get_mut(&d.qid) {
                p.kept = true;
            }
            return Err(libc::ETIMEDOUT);
        }
        let rec = st.pairs.remove(&d.qid).expect("looked up above");
        drop(st);
        self.table.update(|t| t.remove(rec.pool_region));
        let layout = shared.mem.layout();
        drop((rec, shared));
        self.arena.release(layout.base, layout.len());
        Ok(())
    }

    fn map_host(&self, m: &mut sys::gpunvme_map_host) -> Result<(), i32> {
        if m.size as usize != std::mem::size_of::<sys::gpunvme_map_host>()
            || m.version != sys::GPUNVME_UAPI_VERSION
            || m.reserved.iter().any(|&r| r != 0)
        {
            return Err(libc::EINVAL);
        }
        if m.addr % 4096 != 0
            || m.len == 0
            || m.len % 4096 != 0
            || m.len > sys::GPUNVME_MAX_MAP_BYTES as u64
        {
            return Err(libc::EINVAL);
        }
        if m.dma_addrs == 0 {
            return Err(libc::EFAULT);
        }
        // The range must be mapped: msync fails with ENOMEM where it is
        // not (the module's pin fails with EFAULT there). Not madvise,
        // which kernels without CONFIG_ADVISE_SYSCALLS do not have.
        // SAFETY: MS_ASYNC writes nothing back and changes no mapping.
        if unsafe { libc::msync(m.addr as *mut libc::c_void, m.len as usize, libc::MS_ASYNC) } != 0
        {
            return Err(libc::EFAULT);
        }
        let mut st = self.lock();
        let index = self
            .table
            .update(|t| {
                t.insert(Region {
                    host: m.addr,
                    len: m.len,
                    kind: Kind::Payload,
                })
            })
            .ok_or(libc::EDQUOT)?;
        let base = Table::base(index);
        for p in 0..m.len / 4096 {
            // SAFETY: the caller gave room for len / 4096 entries.
            unsafe { *(m.dma_addrs as *mut u64).add(p as usize) = base + p * 4096 };
        }
        let h = st.next_handle;
        st.next_handle += 1;
        st.maps.insert(h, index);
        m.handle = h;
        Ok(())
    }

    fn unmap(&self, u: &sys::gpunvme_unmap) -> Result<(), i32> {
        let mut st = self.lock();
        if !st.pairs.is_empty() {
            return Err(libc::EBUSY);
        }
        let index = st.maps.remove(&u.handle).ok_or(libc::ENOENT)?;
        self.table.update(|t| t.remove(index));
        Ok(())
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // Kept pairs may still have commands in flight: their memory (the
        // relay's mapping, the arena) is never unmapped while the kernel
        // may name it. The pool stops its threads when it drops, after
        // this; what they served stays mapped if commands were in flight.
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        for (_, p) in std::mem::take(&mut st.pairs) {
            if p.kept {
                std::mem::forget(p.shared);
            }
        }
    }
}
