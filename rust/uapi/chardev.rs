// SPDX-License-Identifier: GPL-2.0-only

//! The per-controller character device `/dev/gpunvme<N>`, one node per
//! namespace (`/dev/gpunvme<N>n<NSID>`, NSID 1..=4) whose files may address
//! only that namespace (shared mode only), and their ioctls.
//!
//! Opening needs no capability: the nodes' file modes decide who may use
//! shared mode (a udev rule can hand a namespace node to a group); owner
//! mode asks for CAP_SYS_RAWIO itself (`owner.rs`).
//!
//! An open file holds an `Arc<Shared>`, never a reference into the bound
//! driver data: the file may outlive the binding, and after unbind every
//! call on it fails with ENODEV. A file belongs to the controller's epoch
//! at open: once the controller fails (see `Shared::fail`) its calls fail
//! too, and `poll()` on it reports EPOLLERR | EPOLLHUP.

use kernel::{
    container_of,
    fs::File,
    miscdevice::{MiscDevice, MiscDeviceOptions, MiscDeviceRegistration},
    mm::virt::VmaNew,
    prelude::*,
    sync::{
        atomic::{Atomic, Full, Relaxed},
        Arc,
    },
};

use crate::controller::shared::Shared;
use crate::uapi;
use crate::uapi::file::OpenState;

/// Device-node numbers in use, one bit each; names are static strings.
static SLOTS: Atomic<u32> = Atomic::new(0);
const NAMES: [&CStr; 8] = [
    c"gpunvme0",
    c"gpunvme1",
    c"gpunvme2",
    c"gpunvme3",
    c"gpunvme4",
    c"gpunvme5",
    c"gpunvme6",
    c"gpunvme7",
];

/// Namespace nodes per controller (NSIDs 1..=NS_NODES).
pub(crate) const NS_NODES: usize = 4;
/// `NS_NAMES[slot * NS_NODES + nsid - 1]`.
const NS_NAMES: [&CStr; 8 * NS_NODES] = [
    c"gpunvme0n1",
    c"gpunvme0n2",
    c"gpunvme0n3",
    c"gpunvme0n4",
    c"gpunvme1n1",
    c"gpunvme1n2",
    c"gpunvme1n3",
    c"gpunvme1n4",
    c"gpunvme2n1",
    c"gpunvme2n2",
    c"gpunvme2n3",
    c"gpunvme2n4",
    c"gpunvme3n1",
    c"gpunvme3n2",
    c"gpunvme3n3",
    c"gpunvme3n4",
    c"gpunvme4n1",
    c"gpunvme4n2",
    c"gpunvme4n3",
    c"gpunvme4n4",
    c"gpunvme5n1",
    c"gpunvme5n2",
    c"gpunvme5n3",
    c"gpunvme5n4",
    c"gpunvme6n1",
    c"gpunvme6n2",
    c"gpunvme6n3",
    c"gpunvme6n4",
    c"gpunvme7n1",
    c"gpunvme7n2",
    c"gpunvme7n3",
    c"gpunvme7n4",
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

/// The registered device nodes. Fields drop in order: the nodes
/// disappear before their number is released. They are initialised in the
/// other order, the controller node last: once registered it can be opened
/// at once, and `open` reads `shared` through it.
#[pin_data]
pub(crate) struct Node {
    #[pin]
    misc: MiscDeviceRegistration<OpenFile>,
    namespaces: KVec<Pin<KBox<NsNode>>>,
    shared: Arc<Shared>,
    slot: Slot,
}

impl Node {
    pub(crate) fn new(shared: Arc<Shared>, slot: Slot) -> impl PinInit<Self, Error> {
        let name = slot.name();
        // Fields are initialized in the order written here: the node is
        // registered last, because an open() can run as soon as it is and
        // reads `shared` through it (found by tests/fuzz: an open racing a
        // bind read the field before it was written).
        try_pin_init!(Self {
            namespaces: NsNode::all(&shared, &slot)?,
            shared,
            slot,
            misc <- MiscDeviceRegistration::register(MiscDeviceOptions { name }),
        })
        .pin_chain(|node| crate::shim::add_poll(node.misc.as_raw()))
    }

    pub(crate) fn name(&self) -> &'static CStr {
        self.slot.name()
    }
}

/// The node of one namespace.
#[pin_data]
pub(crate) struct NsNode {
    #[pin]
    misc: MiscDeviceRegistration<NsFile>,
    shared: Arc<Shared>,
    nsid: u32,
}

impl NsNode {
    /// A node for each active namespace with an NSID of 1..=NS_NODES.
    fn all(shared: &Arc<Shared>, slot: &Slot) -> Result<KVec<Pin<KBox<NsNode>>>> {
        let mut nodes = KVec::new();
        let info = &shared.info;
        for ns in &info.ns[..info.num_namespaces as usize] {
            let Some(i) = (ns.nsid as usize).checked_sub(1).filter(|&i| i < NS_NODES) else {
                dev_info!(
                    shared.dev,
                    "namespace {}: no namespace node (only NSIDs 1..={} get one)\n",
                    ns.nsid,
                    NS_NODES
                );
                continue;
            };
            let name = NS_NAMES[slot.0 * NS_NODES + i];
            let node = KBox::pin_init(
                // The node last: it can be opened as soon as it exists.
                try_pin_init!(NsNode {
                    shared: shared.clone(),
                    nsid: ns.nsid,
                    misc <- MiscDeviceRegistration::register(MiscDeviceOptions { name }),
                })
                .pin_chain(|node| crate::shim::add_poll(node.misc.as_raw())),
                GFP_KERNEL,
            )?;
            nodes.push(node, GFP_KERNEL)?;
        }
        Ok(nodes)
    }
}

fn dispatch(me: &OpenState, cmd: u32, arg: usize) -> Result<isize> {
    match cmd {
        uapi::IOC_GET_INFO => me.get_info(arg),
        uapi::IOC_CREATE_QPAIR => me.create_qpair(arg),
        uapi::IOC_DESTROY_QPAIR => me.destroy_qpair(arg),
        uapi::IOC_MAP_HOST => me.map_host(arg),
        uapi::IOC_UNMAP => me.unmap(arg),
        uapi::IOC_EXPORT => me.export(arg),
        uapi::IOC_MAP_DMABUF => me.map_dmabuf(arg),
        uapi::IOC_CLAIM_OWNER => me.claim_owner(arg),
        _ => {
            dev_warn!(me.shared.dev, "unknown ioctl {:#x}\n", cmd);
            Err(ENOTTY)
        }
    }
}

/// The file-operations side of the controller node.
pub(crate) struct OpenFile;

#[vtable]
impl MiscDevice for OpenFile {
    type Ptr = KBox<OpenState>;

    fn open(file: &File, misc: &MiscDeviceRegistration<Self>) -> Result<KBox<OpenState>> {
        // SAFETY: `misc` is always the `misc` field of a pinned `Node` (the
        // only place an `OpenFile` registration is created), whose other
        // fields were initialised before it registered (`Node::new`), and
        // misc_open() holds the misc lock, so the registration (and its
        // `Node`) cannot be dropped while this runs.
        let node = unsafe {
            &*container_of!(
                core::ptr::from_ref::<MiscDeviceRegistration<Self>>(misc),
                Node,
                misc
            )
        };
        OpenState::new(node.shared.clone(), file, 0)
    }

    fn ioctl(me: &OpenState, _file: &File, cmd: u32, arg: usize) -> Result<isize> {
        dispatch(me, cmd, arg)
    }

    fn mmap(me: &OpenState, _file: &File, vma: &VmaNew) -> Result {
        me.mmap(vma)
    }
}

/// The file-operations side of a namespace node.
pub(crate) struct NsFile;

#[vtable]
impl MiscDevice for NsFile {
    type Ptr = KBox<OpenState>;

    fn open(file: &File, misc: &MiscDeviceRegistration<Self>) -> Result<KBox<OpenState>> {
        // SAFETY: `misc` is always the `misc` field of a pinned `NsNode`
        // (the only place an `NsFile` registration is created), whose other
        // fields were initialised before it registered (`NsNode::all`), and
        // misc_open() holds the misc lock, so it cannot be dropped meanwhile.
        let node = unsafe {
            &*container_of!(
                core::ptr::from_ref::<MiscDeviceRegistration<Self>>(misc),
                NsNode,
                misc
            )
        };
        node.shared.namespace_usable(node.nsid)?;
        OpenState::new(node.shared.clone(), file, node.nsid)
    }

    fn ioctl(me: &OpenState, _file: &File, cmd: u32, arg: usize) -> Result<isize> {
        dispatch(me, cmd, arg)
    }

    fn mmap(me: &OpenState, _file: &File, vma: &VmaNew) -> Result {
        me.mmap(vma)
    }
}
