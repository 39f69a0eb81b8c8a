// SPDX-License-Identifier: GPL-2.0

//! The per-controller character device `/dev/gpunvme<N>` and its ioctls.
//!
//! An open file holds an `Arc<Shared>`, never a reference into the bound
//! driver data: the file may outlive the binding, and after unbind every
//! call on it fails with ENODEV.

use kernel::{
    bindings, container_of,
    device::Device,
    fs::File,
    miscdevice::{MiscDevice, MiscDeviceOptions, MiscDeviceRegistration},
    prelude::*,
    new_mutex,
    pci::DevresBar,
    sync::{
        aref::ARef,
        Mutex,
        atomic::{Acquire, Atomic, Full, Relaxed, Release},
        Arc, ArcBorrow,
    },
    uaccess::{UserPtr, UserSlice},
};

use crate::admin::AdminQueue;
use crate::controller::BAR0_MIN;
use crate::regs::Cap;
use crate::uapi;

/// State shared between the bound device and every open file. Memory the
/// controller may DMA into lives here or in a file's state, so it is freed
/// only after the last file is closed, and by then unbind has disabled the
/// controller.
#[pin_data]
pub(crate) struct Shared {
    /// The PCI device, for log lines; the reference stays valid after unbind.
    pub(crate) dev: ARef<Device>,
    /// Identity read at probe; `size`/`version` are filled per call.
    pub(crate) info: uapi::Info,
    pub(crate) cap: Cap,
    /// BAR0, revoked by the driver core at unbind.
    pub(crate) bar: DevresBar<BAR0_MIN>,
    #[pin]
    pub(crate) admin: Mutex<AdminQueue>,
    /// Set at unbind: from then on the controller is gone for every file.
    gone: Atomic<bool>,
}

impl Shared {
    pub(crate) fn new(
        dev: ARef<Device>,
        info: uapi::Info,
        cap: Cap,
        bar: DevresBar<BAR0_MIN>,
        admin: AdminQueue,
    ) -> Result<Arc<Self>> {
        Arc::pin_init(
            try_pin_init!(Self { dev, info, cap, bar, admin <- new_mutex!(admin), gone: Atomic::new(false) }),
            GFP_KERNEL,
        )
    }

    pub(crate) fn revoke(&self) {
        self.gone.store(true, Release);
    }

    fn alive(&self) -> Result {
        if self.gone.load(Acquire) {
            return Err(ENODEV);
        }
        Ok(())
    }

    fn get_info(&self, arg: usize) -> Result<isize> {
        let (mut reader, mut writer) =
            UserSlice::new(UserPtr::from_addr(arg), size_of::<uapi::Info>()).reader_writer();
        let req: uapi::Info = reader.read()?;
        if let Err(e) = uapi::check_header(req.size, req.version, size_of::<uapi::Info>(), &req.reserved) {
            dev_warn!(self.dev, "GET_INFO: bad argument: {:?}\n", e);
            return Err(EINVAL);
        }
        self.alive()?;
        let mut out = self.info;
        out.size = req.size;
        out.version = req.version;
        writer.write(&out)?;
        Ok(0)
    }
}

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
    type Ptr = Arc<Shared>;

    fn open(_file: &File, misc: &MiscDeviceRegistration<Self>) -> Result<Arc<Shared>> {
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
        Ok(node.shared.clone())
    }

    fn ioctl(shared: ArcBorrow<'_, Shared>, _file: &File, cmd: u32, arg: usize) -> Result<isize> {
        match cmd {
            uapi::IOC_GET_INFO => shared.get_info(arg),
            _ => {
                dev_warn!(shared.dev, "unknown ioctl {:#x}\n", cmd);
                Err(ENOTTY)
            }
        }
    }
}
