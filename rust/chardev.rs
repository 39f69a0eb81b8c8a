// SPDX-License-Identifier: GPL-2.0

//! The per-controller character device `/dev/gpunvme<N>` and its ioctls.
//!
//! An open file holds an `Arc<Shared>`, never a reference into the bound
//! driver data: the file may outlive the binding, and after unbind every
//! call on it fails with ENODEV.

use kernel::{
    bindings, container_of,
    fs::File,
    miscdevice::{MiscDevice, MiscDeviceOptions, MiscDeviceRegistration},
    mm::virt::VmaNew,
    prelude::*,
    sync::{
        atomic::{Atomic, Full, Relaxed},
        Arc,
    },
};

use crate::file::OpenState;
use crate::shared::Shared;
use crate::uapi;

/// Device-node numbers in use, one bit each; names are static strings.
static SLOTS: Atomic<u32> = Atomic::new(0);
const NAMES: [&CStr; 8] = [
    c"gpunvme0", c"gpunvme1", c"gpunvme2", c"gpunvme3",
    c"gpunvme4", c"gpunvme5", c"gpunvme6", c"gpunvme7",
];

/// A claimed device-node number, released on drop.
pub(crate) struct Slot(usize);

impl Slot {
    pub(crate) fn claim() -> Result<Self> {
        let mut cur = SLOTS.load(Relaxed);
        loop {
            let free = (!cur).trailing_zeros() as usize;
            if free >= NAMES.len() {
                pr_err!("gpunvme: all {} device nodes are in use\n", NAMES.len());
                return Err(ENOSPC);
            }
            match SLOTS.cmpxchg(cur, cur | (1 << free), Full) {
                Ok(_) => return Ok(Self(free)),
                Err(now) => cur = now,
            }
        }
    }

    pub(crate) fn name(&self) -> &'static CStr {
        NAMES[self.0]
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut cur = SLOTS.load(Relaxed);
        while let Err(now) = SLOTS.cmpxchg(cur, cur & !(1 << self.0), Full) {
            cur = now;
        }
    }
}

/// The registered device node. Fields drop in order: the node disappears
/// before its number is released.
#[pin_data]
pub(crate) struct Node {
    #[pin]
    misc: MiscDeviceRegistration<OpenFile>,
    shared: Arc<Shared>,
    slot: Slot,
}

impl Node {
    pub(crate) fn new(shared: Arc<Shared>, slot: Slot) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            misc <- MiscDeviceRegistration::register(MiscDeviceOptions { name: slot.name() }),
            shared,
            slot,
        })
    }

    pub(crate) fn name(&self) -> &'static CStr {
        self.slot.name()
    }
}

/// The file-operations side of the node.
pub(crate) struct OpenFile;

#[vtable]
impl MiscDevice for OpenFile {
    type Ptr = KBox<OpenState>;

    fn open(file: &File, misc: &MiscDeviceRegistration<Self>) -> Result<KBox<OpenState>> {
        // SAFETY: `misc` is always the `misc` field of a pinned `Node` (the
        // only place an `OpenFile` registration is created), and misc_open()
        // holds the misc lock, so the registration (and its `Node`) cannot be
        // dropped while this runs.
        let node = unsafe { &*container_of!(misc as *const MiscDeviceRegistration<Self>, Node, misc) };
        // SAFETY: capable() only reads the current task's credentials.
        if !unsafe { bindings::capable(bindings::CAP_SYS_RAWIO as i32) } {
            dev_warn!(node.shared.dev, "open refused: CAP_SYS_RAWIO required\n");
            return Err(EPERM);
        }
        node.shared.alive()?;
        OpenState::new(node.shared.clone(), file)
    }

    fn ioctl(me: &OpenState, _file: &File, cmd: u32, arg: usize) -> Result<isize> {
        match cmd {
            uapi::IOC_GET_INFO => me.get_info(arg),
            uapi::IOC_CREATE_QPAIR => me.create_qpair(arg),
            uapi::IOC_DESTROY_QPAIR => me.destroy_qpair(arg),
            uapi::IOC_MAP_HOST => me.map_host(arg),
            uapi::IOC_UNMAP => me.unmap(arg),
            uapi::IOC_EXPORT => me.export(arg),
            uapi::IOC_MAP_DMABUF => me.map_dmabuf(arg),
            _ => {
                dev_warn!(me.shared.dev, "unknown ioctl {:#x}\n", cmd);
                Err(ENOTTY)
            }
        }
    }

    fn mmap(me: &OpenState, _file: &File, vma: &VmaNew) -> Result {
        me.mmap(vma)
    }
}
