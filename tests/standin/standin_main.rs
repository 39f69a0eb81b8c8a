// SPDX-License-Identifier: GPL-2.0-only

//! gpunvme_standin: a test-only GPU stand-in built on QEMU's `edu` device.
//!
//! It binds edu (1234:11e8, only through driver_override, like gpunvme),
//! imports dma-bufs for it the way a GPU driver does (standin_shim.c:
//! dynamic attach, peer2peer allowed, revocable) and drives edu's DMA engine
//! to write 4 bytes to / read bytes from the DMA addresses of those imports.
//! So "the peer rang the NVMe doorbell" is proven by a real device's DMA
//! through the vIOMMU, never by a CPU store. The ioctl ABI is
//! tests/standin/standin_uapi.h.
//!
//! edu facts (QEMU hw/misc/edu.c): BAR0 0x80 src, 0x88 dst, 0x90 count, 0x98
//! cmd (bit0 run, bit1 edu->bus, bit2 irq); its 4 KiB buffer lives at edu
//! address 0x40000 and is reachable only by DMA, so each operation is two
//! transfers through a coherent bounce page; a range outside the buffer
//! aborts QEMU (hw_error), so every count is checked here first. QEMU 7.2's
//! range check is off by one (a transfer ending exactly at 0x41000 aborts
//! QEMU), so no transfer is longer than `XFER_MAX`; READ goes in chunks.
//!
//! Lock order: `Shared::state` (held across a whole operation, so one edu
//! transfer at a time), then the dma-buf reservation lock, then an import's
//! own lock (see standin_shim.c).

use core::ffi::c_void;
use core::ptr::NonNull;
use kernel::{
    bindings, container_of,
    device::{Core, Device},
    dma::{Coherent, Device as _, DmaMask},
    fs::File,
    io::{poll::read_poll_timeout, Io},
    ioctl::{_IOW, _IOWR},
    miscdevice::{MiscDevice, MiscDeviceOptions, MiscDeviceRegistration},
    new_mutex, pci,
    pci::DevresBar,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{Acquire, Atomic, Relaxed, Release},
        Arc, Mutex,
    },
    time::Delta,
    transmute::{AsBytes, FromBytes},
    uaccess::{UserPtr, UserSlice},
};

const EDU_VENDOR: u16 = 0x1234;
const EDU_DEVICE: u16 = 0x11e8;
const BAR0_SIZE: usize = 0x100;
const REG_IDENT: usize = 0x00;
const REG_DMA_SRC: usize = 0x80;
const REG_DMA_DST: usize = 0x88;
const REG_DMA_CNT: usize = 0x90;
const REG_DMA_CMD: usize = 0x98;
const CMD_RUN: u64 = 1;
const CMD_TO_BUS: u64 = 2;
/// edu's internal buffer, in edu's own address space.
const EDU_BUF: u64 = 0x40000;
const EDU_BUF_LEN: usize = 4096;
/// Longest single edu transfer (see above: 4096 would abort QEMU 7.2).
const XFER_MAX: usize = 2048;
/// One transfer takes ~100 ms of virtual time; never wait longer than this.
const DMA_TIMEOUT: Delta = Delta::from_secs(2);

// ---- ABI mirror of standin_uapi.h (numbers checked against C at probe) ----

const IOC_MAGIC: u32 = 0xB8;

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct ImportArg {
    fd: i32,
    handle: u32,
    dma_addr: u64,
    len: u64,
    nents: u32,
    pad: u32,
}
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct Write32Arg {
    handle: u32,
    value: u32,
    offset: u64,
}
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct ReadArg {
    handle: u32,
    len: u32,
    offset: u64,
    buf: u64,
}
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct RawWrite32Arg {
    dma_addr: u64,
    value: u32,
    pad: u32,
}
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct ReleaseArg {
    handle: u32,
    pad: u32,
}

macro_rules! plain {
    ($($t:ty),*) => {$(
        // SAFETY: `repr(C)` integers only, no padding holes.
        unsafe impl FromBytes for $t {}
        // SAFETY: as above.
        unsafe impl AsBytes for $t {}
    )*};
}
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct KmemleakControlArg {
    tag: u32,
    flags: u32,
}

plain!(ImportArg, Write32Arg, ReadArg, RawWrite32Arg, ReleaseArg, KmemleakControlArg);

const IOC_IMPORT: u32 = _IOWR::<ImportArg>(IOC_MAGIC, 0x00);
const IOC_WRITE32: u32 = _IOW::<Write32Arg>(IOC_MAGIC, 0x01);
const IOC_READ: u32 = _IOW::<ReadArg>(IOC_MAGIC, 0x02);
const IOC_RAW_WRITE32: u32 = _IOW::<RawWrite32Arg>(IOC_MAGIC, 0x03);
const IOC_RELEASE: u32 = _IOW::<ReleaseArg>(IOC_MAGIC, 0x04);
const IOC_EXPORT_NO_P2P: u32 = kernel::ioctl::_IO(IOC_MAGIC, 0x05);
const IOC_KMEMLEAK_CONTROL: u32 = _IOW::<KmemleakControlArg>(IOC_MAGIC, 0x06);

/// STANDIN_KMEMLEAK_CONTROL_SIZE and _MAGIC of standin_uapi.h.
const KMEMLEAK_CONTROL_SIZE: usize = 5000;
const KMEMLEAK_CONTROL_MAGIC: &[u8; 32] = b"gpunvme_standin kmemleak control";

/// Test only: leak one object on purpose (STANDIN_IOC_KMEMLEAK_CONTROL), the
/// positive control of the kmemleak checks. Not inlined: its name is the
/// allocation site the checks look for in kmemleak's backtrace. The pointer
/// is stored nowhere (no log line prints it), so only stale copies (a live
/// task's stack) can hide it from kmemleak.
#[inline(never)]
fn kmemleak_control(tag: u32) -> Result {
    let mut obj = KVec::<u8>::with_capacity(KMEMLEAK_CONTROL_SIZE, GFP_KERNEL)?;
    obj.extend_from_slice(KMEMLEAK_CONTROL_MAGIC, GFP_KERNEL)?;
    obj.extend_from_slice(&tag.to_le_bytes(), GFP_KERNEL)?;
    obj.resize(KMEMLEAK_CONTROL_SIZE, 0, GFP_KERNEL)?;
    // Forgotten on purpose: nothing frees it.
    let _ = obj.into_raw_parts();
    Ok(())
}

// ---- the C importer (standin_shim.c) ----

extern "C" {
    static standin_uapi_ioc: [u32; 5];
    fn standin_imp_new(dev: *mut c_void, fd: i32, err: *mut i32) -> *mut c_void;
    fn standin_imp_info(imp: *mut c_void, dma_addr: *mut u64, len: *mut u64, nents: *mut u32);
    fn standin_imp_begin(imp: *mut c_void, offset: u64, len: u64, addr: *mut u64) -> i32;
    fn standin_imp_end(imp: *mut c_void);
    fn standin_imp_release(imp: *mut c_void);
    fn standin_export_no_p2p() -> i32;
    fn standin_probe_hold(dev: *mut c_void);
}

/// One dma-buf import, owned by the file that made it; released on drop.
struct Import {
    imp: NonNull<c_void>,
    handle: u32,
    owner: u64,
}

// SAFETY: the import is plain kernel state behind its own locks; it may be
// released from any thread.
unsafe impl Send for Import {}

impl Import {
    /// Run `f` with the bus address of `[offset, offset + len)`; fails with
    /// ENODEV once the exporter revoked the import (no DMA happens then).
    fn with_addr<R>(&self, offset: u64, len: u64, f: impl FnOnce(u64) -> Result<R>) -> Result<R> {
        let mut addr = 0u64;
        // SAFETY: `imp` is live until drop; on success the shim holds the
        // import's lock, released by standin_imp_end() below.
        let ret = unsafe { standin_imp_begin(self.imp.as_ptr(), offset, len, &mut addr) };
        if ret < 0 {
            return Err(Error::from_errno(ret));
        }
        let r = f(addr);
        // SAFETY: paired with the successful begin above.
        unsafe { standin_imp_end(self.imp.as_ptr()) };
        r
    }
}

impl Drop for Import {
    fn drop(&mut self) {
        // SAFETY: from standin_imp_new, released exactly once; the caller
        // holds `Shared::state`, so no transfer uses it.
        unsafe { standin_imp_release(self.imp.as_ptr()) }
    }
}

struct State {
    imports: KVec<Import>,
    /// `None` after unbind.
    bounce: Option<Coherent<[u8]>>,
    next_handle: u32,
}

#[pin_data]
struct Shared {
    dev: ARef<Device>,
    bar: DevresBar<BAR0_SIZE>,
    #[pin]
    state: Mutex<State>,
    gone: Atomic<bool>,
    next_file: Atomic<u64>,
}

impl Shared {
    fn reg_read(&self, off: usize) -> Result<u64> {
        self.bar.try_access().ok_or(ENODEV)?.try_read64(off)
    }

    fn reg_write(&self, off: usize, v: u64) -> Result {
        self.bar.try_access().ok_or(ENODEV)?.try_write64(v, off)
    }

    fn wait_idle(&self, what: &str) -> Result {
        read_poll_timeout(|| self.reg_read(REG_DMA_CMD), |c: &u64| c & CMD_RUN == 0, Delta::from_millis(1), DMA_TIMEOUT)
            .map(|_| ())
            .map_err(|e| {
                dev_err!(self.dev, "edu DMA ({}) not done after {} ms: {:?}\n", what, DMA_TIMEOUT.as_millis(), e);
                if e == ENODEV { ENODEV } else { ETIMEDOUT }
            })
    }

    /// One edu transfer of `count` bytes between `bus` and edu's buffer.
    fn transfer(&self, bus: u64, count: usize, to_bus: bool) -> Result {
        // Outside edu's buffer QEMU aborts: never let it get there.
        if count == 0 || count > XFER_MAX {
            return Err(EINVAL);
        }
        self.wait_idle("previous")?;
        let (src, dst) = if to_bus { (EDU_BUF, bus) } else { (bus, EDU_BUF) };
        self.reg_write(REG_DMA_SRC, src)?;
        self.reg_write(REG_DMA_DST, dst)?;
        self.reg_write(REG_DMA_CNT, count as u64)?;
        self.reg_write(REG_DMA_CMD, CMD_RUN | if to_bus { CMD_TO_BUS } else { 0 })?;
        self.wait_idle(if to_bus { "edu -> bus" } else { "bus -> edu" })
    }

    /// Put `value` in edu's buffer (bounce page -> edu).
    fn stage32(&self, st: &State, value: u32) -> Result {
        let bounce = st.bounce.as_ref().ok_or(ENODEV)?;
        // SAFETY: the bounce page is 4096 bytes of coherent memory that only
        // this code (under `state`) and edu (not running now) touch.
        unsafe { core::ptr::write_volatile(bounce.as_mut_ptr().cast::<u32>(), value.to_le()) };
        self.transfer(bounce.dma_address(), 4, false)
    }

    fn alive(&self) -> Result {
        if self.gone.load(Acquire) { Err(ENODEV) } else { Ok(()) }
    }
}

fn find(st: &State, handle: u32, owner: u64) -> Result<&Import> {
    st.imports.iter().find(|i| i.handle == handle && i.owner == owner).ok_or(ENOENT)
}

// ---- the device node ----

struct OpenFile {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for OpenFile {
    fn drop(&mut self) {
        let id = self.id;
        self.shared.state.lock().imports.retain(|i| i.owner != id);
    }
}

macro_rules! arg {
    ($ty:ty, $arg:expr) => {{
        let (mut r, w) = UserSlice::new(UserPtr::from_addr($arg), size_of::<$ty>()).reader_writer();
        let a: $ty = r.read()?;
        (a, w)
    }};
}

impl OpenFile {
    fn import(&self, arg: usize) -> Result<isize> {
        let (mut a, mut w) = arg!(ImportArg, arg);
        let sh = &self.shared;
        let mut st = sh.state.lock();
        sh.alive()?;
        st.imports.reserve(1, GFP_KERNEL)?;
        let mut err = 0i32;
        // SAFETY: `dev` is edu's `struct device`, bound (not `gone`, and
        // unbind takes `state` before it finishes).
        let p = unsafe { standin_imp_new(core::ptr::from_ref::<Device>(&sh.dev).cast_mut().cast(), a.fd, &mut err) };
        let imp = NonNull::new(p).ok_or_else(|| Error::from_errno(err))?;
        let handle = st.next_handle;
        st.next_handle = st.next_handle.wrapping_add(1).max(1);
        let i = Import { imp, handle, owner: self.id };
        // SAFETY: `imp` is live.
        unsafe { standin_imp_info(imp.as_ptr(), &mut a.dma_addr, &mut a.len, &mut a.nents) };
        a.handle = handle;
        st.imports.push(i, GFP_KERNEL)?;
        drop(st);
        w.write(&a)?;
        Ok(0)
    }

    fn write32(&self, arg: usize) -> Result<isize> {
        let (a, _) = arg!(Write32Arg, arg);
        if a.offset % 4 != 0 {
            return Err(EINVAL);
        }
        let sh = &self.shared;
        let st = sh.state.lock();
        sh.alive()?;
        let imp = find(&st, a.handle, self.id)?;
        // Refuse before any DMA once revoked (the staging transfer too).
        imp.with_addr(a.offset, 4, |_| Ok(()))?;
        sh.stage32(&st, a.value)?;
        imp.with_addr(a.offset, 4, |addr| sh.transfer(addr, 4, true))?;
        Ok(0)
    }

    fn read(&self, arg: usize) -> Result<isize> {
        let (a, _) = arg!(ReadArg, arg);
        let len = a.len as usize;
        if len == 0 || len > EDU_BUF_LEN {
            return Err(EINVAL);
        }
        let sh = &self.shared;
        let mut out = KVec::<u8>::with_capacity(len, GFP_KERNEL)?;
        {
            let st = sh.state.lock();
            sh.alive()?;
            let imp = find(&st, a.handle, self.id)?;
            let bounce = st.bounce.as_ref().ok_or(ENODEV)?;
            // Whole range checked (and revocation) before the first transfer.
            imp.with_addr(a.offset, len as u64, |_| Ok(()))?;
            let mut pos = 0;
            while pos < len {
                let n = (len - pos).min(XFER_MAX);
                imp.with_addr(a.offset + pos as u64, n as u64, |addr| sh.transfer(addr, n, false))?;
                sh.transfer(bounce.dma_address() + pos as u64, n, true)?;
                pos += n;
            }
            for i in 0..len {
                // SAFETY: i < len <= 4096, the bounce page's size; edu is idle.
                let b = unsafe { core::ptr::read_volatile(bounce.as_ptr().cast::<u8>().add(i)) };
                out.push(b, GFP_KERNEL)?;
            }
        }
        UserSlice::new(UserPtr::from_addr(a.buf as usize), len).writer().write_slice(&out)?;
        Ok(0)
    }

    fn raw_write32(&self, arg: usize) -> Result<isize> {
        let (a, _) = arg!(RawWrite32Arg, arg);
        let sh = &self.shared;
        let st = sh.state.lock();
        sh.alive()?;
        dev_info!(sh.dev, "RAW_WRITE32 {:#x} to bus address {:#x} (no import maps it)\n", a.value, a.dma_addr);
        sh.stage32(&st, a.value)?;
        sh.transfer(a.dma_addr, 4, true)?;
        Ok(0)
    }

    fn release(&self, arg: usize) -> Result<isize> {
        let (a, _) = arg!(ReleaseArg, arg);
        let mut st = self.shared.state.lock();
        let id = self.id;
        let pos = st.imports.iter().position(|i| i.handle == a.handle && i.owner == id).ok_or(ENOENT)?;
        drop(st.imports.remove(pos)?);
        Ok(0)
    }
}

/// The device node. Fields drop in declaration order (the node disappears
/// first) but initialise in the order probe() names them, `misc` last but
/// for the test point: an open() can run as soon as it registers, and reads
/// `shared` (as gpunvme's own node, rust/uapi/chardev.rs; found by the
/// fuzzer on the KASAN kernel, an open racing an edu rebind).
#[pin_data]
struct Node {
    #[pin]
    misc: MiscDeviceRegistration<Misc>,
    /// The `hold_probe` test point, just after `misc` registered.
    held: (),
    shared: Arc<Shared>,
}

struct Misc;

#[vtable]
impl MiscDevice for Misc {
    type Ptr = KBox<OpenFile>;

    fn open(_file: &File, misc: &MiscDeviceRegistration<Self>) -> Result<KBox<OpenFile>> {
        // SAFETY: every `Misc` registration is the `misc` field of a pinned
        // `Node` whose other fields were initialised before it registered
        // (probe()), and misc_open() holds the misc lock, so it stays alive.
        let node = unsafe { &*container_of!(misc as *const MiscDeviceRegistration<Self>, Node, misc) };
        // SAFETY: capable() only reads the current task's credentials.
        if !unsafe { bindings::capable(bindings::CAP_SYS_RAWIO as i32) } {
            return Err(EPERM);
        }
        node.shared.alive()?;
        let id = node.shared.next_file.fetch_add(1, Relaxed);
        KBox::new(OpenFile { shared: node.shared.clone(), id }, GFP_KERNEL).map_err(Into::into)
    }

    fn ioctl(me: &OpenFile, _file: &File, cmd: u32, arg: usize) -> Result<isize> {
        match cmd {
            IOC_IMPORT => me.import(arg),
            IOC_WRITE32 => me.write32(arg),
            IOC_READ => me.read(arg),
            IOC_RAW_WRITE32 => me.raw_write32(arg),
            IOC_RELEASE => me.release(arg),
            IOC_KMEMLEAK_CONTROL => {
                let (a, _) = arg!(KmemleakControlArg, arg);
                if a.flags != 0 {
                    return Err(EINVAL);
                }
                kmemleak_control(a.tag)?;
                dev_info!(me.shared.dev, "KMEMLEAK_CONTROL: leaked {} bytes on purpose (tag {:#x})\n", KMEMLEAK_CONTROL_SIZE, a.tag);
                Ok(0)
            }
            IOC_EXPORT_NO_P2P => {
                // SAFETY: creates a dma-buf and installs an fd in the caller.
                let fd = unsafe { standin_export_no_p2p() };
                if fd < 0 {
                    Err(Error::from_errno(fd))
                } else {
                    Ok(fd as isize)
                }
            }
            _ => Err(ENOTTY),
        }
    }
}

// ---- the PCI driver ----

struct StandinDriver;

#[pin_data]
struct Bound {
    #[pin]
    node: Node,
    shared: Arc<Shared>,
}

// Deliberately empty: edu is handed over through driver_override only.
kernel::pci_device_table!(PCI_TABLE, <StandinDriver as pci::Driver>::IdInfo, []);

impl pci::Driver for StandinDriver {
    type IdInfo = ();
    type Data<'bound> = Bound;

    const ID_TABLE: pci::IdTable<Self::IdInfo> = &PCI_TABLE;

    fn probe<'bound>(
        pdev: &'bound pci::Device<Core<'_>>,
        _info: Option<&'bound Self::IdInfo>,
    ) -> impl PinInit<Self::Data<'bound>, Error> + 'bound {
        pin_init::pin_init_scope(move || {
            let (vendor, device) = (pdev.vendor_id().as_raw(), pdev.device_id());
            if vendor != EDU_VENDOR || device != EDU_DEVICE {
                dev_err!(pdev, "not QEMU's edu ({:04x}:{:04x}); refusing to bind\n", vendor, device);
                return Err(ENODEV);
            }
            // SAFETY: a constant table in standin_shim.c.
            let c_ioc = unsafe { standin_uapi_ioc };
            if c_ioc != [IOC_IMPORT, IOC_WRITE32, IOC_READ, IOC_RAW_WRITE32, IOC_RELEASE] {
                dev_err!(pdev, "ioctl numbers differ between standin_uapi.h and the Rust mirror\n");
                return Err(EINVAL);
            }
            pdev.enable_device_mem()?;
            pdev.set_master();
            // SAFETY: nothing is allocated for DMA on this device yet.
            unsafe { pdev.dma_set_mask_and_coherent(DmaMask::new::<64>())? };
            let bar = pdev.iomap_region_sized::<BAR0_SIZE>(0, c"gpunvme_standin/bar0")?.into_devres()?;
            let ident = bar.access(pdev.as_ref())?.try_read32(REG_IDENT)?;
            if ident & 0xff != 0xed {
                dev_err!(pdev, "edu ident register reads {:#x}\n", ident);
                return Err(ENODEV);
            }
            let bounce: Coherent<[u8]> = Coherent::zeroed_slice(pdev.as_ref(), EDU_BUF_LEN, GFP_KERNEL)?;
            let shared = Arc::pin_init(
                try_pin_init!(Shared {
                    dev: ARef::from(pdev.as_ref()),
                    bar,
                    state <- new_mutex!(State { imports: KVec::new(), bounce: Some(bounce), next_handle: 1 }),
                    gone: Atomic::new(false),
                    next_file: Atomic::new(1),
                }),
                GFP_KERNEL,
            )?;
            dev_info!(pdev, "edu {}.{} bound: /dev/gpunvme_standin\n", ident >> 24, (ident >> 16) & 0xff);
            let for_node = shared.clone();
            let dev = core::ptr::from_ref::<Device>(pdev.as_ref()).cast_mut().cast();
            Ok(try_pin_init!(Bound {
                shared,
                // Registered last: an open() can run from here on.
                node <- try_pin_init!(Node {
                    shared: for_node,
                    misc <- MiscDeviceRegistration::register(MiscDeviceOptions { name: c"gpunvme_standin" }),
                    // SAFETY: `dev` is edu's bound `struct device`; the shim
                    // only logs through it.
                    held: unsafe { standin_probe_hold(dev) },
                }),
            }))
        })
    }

    fn unbind<'bound>(pdev: &'bound pci::Device<Core<'_>>, this: Pin<&Self::Data<'bound>>) {
        let sh = &this.shared;
        sh.gone.store(true, Release);
        // Waits out a transfer in flight (bounded), then drops every import
        // and the bounce page while edu is still bound.
        let mut st = sh.state.lock();
        let n = st.imports.len();
        if sh.wait_idle("at unbind").is_err() {
            dev_err!(pdev, "edu DMA engine busy at unbind\n");
        }
        st.imports.clear();
        st.bounce = None;
        dev_info!(pdev, "unbound; released {} import(s)\n", n);
    }
}

kernel::module_pci_driver! {
    type: StandinDriver,
    name: "gpunvme_standin",
    authors: ["gpunvme developers"],
    description: "Test-only GPU stand-in: QEMU edu DMA through imported dma-bufs",
    license: "GPL",
}
