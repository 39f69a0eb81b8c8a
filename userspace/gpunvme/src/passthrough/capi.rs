// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The C ABI (`userspace/gpunvme/include/gpunvme_passthrough.h`): the
//! passthrough back end behind an opaque handle, for C and C++ programs
//! that speak the module's UAPI (`kernels/hostrun` built with
//! `-DGPUNVME_HOSTRUN_PASSTHROUGH`). The handle is a [`crate::Controller`]:
//! ioctls go where the controller sends its own.

use std::ffi::{c_char, c_int, c_longlong, c_ulong, c_ushort, c_void, CStr};
use std::path::PathBuf;

use super::{Options, PollMode, WindowSpec};
use crate::Controller;

/// The opaque handle.
pub struct GpunvmePt {
    ctrl: Controller,
}

fn parse_options(s: &str) -> Result<Options, String> {
    let mut o = Options::default();
    for kv in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("option `{kv}`: expected key=value"))?;
        match k {
            "partition" => o.window = WindowSpec::Partition(PathBuf::from(v)),
            "lba" => o.window = WindowSpec::parse_lbas(v)?,
            "poll" => {
                o.poll = match v {
                    "auto" => PollMode::Auto,
                    "on" => PollMode::On,
                    "off" => PollMode::Off,
                    _ => return Err(format!("poll={v}: auto, on or off")),
                }
            }
            "fixed" => o.fixed_buffers = v != "0",
            "threads" => {
                o.relay_threads = v.parse().map_err(|_| format!("threads={v}: a number"))?
            }
            _ => return Err(format!("unknown option `{k}`")),
        }
    }
    Ok(o)
}

/// `model:BLOCKS:LBA_SIZE`: a RAM-disk model namespace (nsid 1, the whole
/// disk the window), for running a UAPI program's tests through the relay
/// without a device (`make -C kernels hostrun-pt-model`).
fn open_model_spec(spec: &str, o: &Options) -> Result<Controller, String> {
    let (b, l) = spec
        .split_once(':')
        .ok_or_else(|| format!("model:{spec}: expected model:BLOCKS:LBA_SIZE"))?;
    let (blocks, lba): (u64, usize) = (
        b.parse()
            .map_err(|_| format!("model: `{b}` is not a number of blocks"))?,
        l.parse()
            .map_err(|_| format!("model: `{l}` is not a block size"))?,
    );
    if !(512..=4096).contains(&lba) || !lba.is_power_of_two() || blocks == 0 || blocks > 1 << 24 {
        return Err(format!("model:{spec}: 1..16M blocks of 512 to 4096 bytes"));
    }
    let disk = super::ModelDisk::with_data(blocks, lba);
    let threads = if o.relay_threads == 0 {
        2
    } else {
        o.relay_threads
    };
    let dev = super::open_model(
        disk,
        1,
        super::Window { start: 0, blocks },
        128 << 10,
        threads,
    )
    .map_err(|e| e.to_string())?;
    Controller::with_passthrough(dev).map_err(|e| e.to_string())
}

fn put_err(err: *mut c_char, errlen: usize, msg: &str) {
    if err.is_null() || errlen == 0 {
        return;
    }
    let b = msg.as_bytes();
    let n = b.len().min(errlen - 1);
    // SAFETY: the caller gave `errlen` writable bytes at `err`.
    unsafe {
        std::ptr::copy_nonoverlapping(b.as_ptr(), err.cast::<u8>(), n);
        *err.add(n) = 0;
    }
}

/// `gpunvme_pt_open`: see the header.
///
/// # Safety
/// `device` is a NUL-terminated string; `options` one or NULL; `err` NULL
/// or `errlen` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn gpunvme_pt_open(
    device: *const c_char,
    options: *const c_char,
    err: *mut c_char,
    errlen: usize,
) -> *mut GpunvmePt {
    let go = || -> Result<GpunvmePt, String> {
        if device.is_null() {
            return Err("no device".into());
        }
        // SAFETY: the caller passes NUL-terminated strings.
        let dev = unsafe { CStr::from_ptr(device) }
            .to_str()
            .map_err(|_| "the device path is not UTF-8".to_string())?;
        let opts = if options.is_null() {
            String::new()
        } else {
            // SAFETY: as above.
            unsafe { CStr::from_ptr(options) }
                .to_str()
                .map_err(|_| "the options are not UTF-8".to_string())?
                .to_string()
        };
        let o = parse_options(&opts)?;
        let ctrl = match dev.strip_prefix("model:") {
            Some(spec) => open_model_spec(spec, &o)?,
            None => Controller::open_passthrough(dev, &o).map_err(|e| e.to_string())?,
        };
        Ok(GpunvmePt { ctrl })
    };
    match go() {
        Ok(h) => Box::into_raw(Box::new(h)),
        Err(m) => {
            put_err(err, errlen, &m);
            std::ptr::null_mut()
        }
    }
}

/// `gpunvme_pt_fd`: see the header.
///
/// # Safety
/// `pt` came from `gpunvme_pt_open` and is not closed.
#[no_mangle]
pub unsafe extern "C" fn gpunvme_pt_fd(pt: *const GpunvmePt) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { (*pt).ctrl.raw_fd() }
}

/// `gpunvme_pt_ioctl`: see the header.
///
/// # Safety
/// `pt` is open; `arg` points to the struct `request` encodes (uapi/gpunvme.h).
#[no_mangle]
pub unsafe extern "C" fn gpunvme_pt_ioctl(
    pt: *mut GpunvmePt,
    request: c_ulong,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: the caller's contract; the controller checks the process.
    let r = unsafe {
        (*pt)
            .ctrl
            .ioctl("gpunvme_pt_ioctl", request as crate::sys::IoctlRequest, arg)
    };
    match r {
        Ok(v) => v,
        Err(e) => {
            // SAFETY: errno is this thread's.
            unsafe { *libc::__errno_location() = e.errno().unwrap_or(libc::EIO) };
            -1
        }
    }
}

/// `gpunvme_pt_counter`: see the header.
///
/// # Safety
/// `pt` is open; `name` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn gpunvme_pt_counter(
    pt: *const GpunvmePt,
    qid: c_ushort,
    name: *const c_char,
) -> c_longlong {
    // SAFETY: the caller's contract.
    let (d, n) = unsafe { ((*pt).ctrl.passthrough(), CStr::from_ptr(name)) };
    let (Some(d), Ok(n)) = (d, n.to_str()) else {
        return -1;
    };
    d.counters(qid)
        .and_then(|c| c.get(n))
        .map_or(-1, |v| v as c_longlong)
}

/// `gpunvme_pt_polled`: see the header.
///
/// # Safety
/// `pt` is open.
#[no_mangle]
pub unsafe extern "C" fn gpunvme_pt_polled(pt: *const GpunvmePt) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { (*pt).ctrl.passthrough() }.is_some_and(|d| d.polled()) as c_int
}

/// `gpunvme_pt_close`: see the header.
///
/// # Safety
/// `pt` came from `gpunvme_pt_open`; it is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn gpunvme_pt_close(pt: *mut GpunvmePt) {
    if !pt.is_null() {
        // SAFETY: the caller's contract: ours since gpunvme_pt_open.
        drop(unsafe { Box::from_raw(pt) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_and_refuse_what_they_do_not_know() {
        let o = parse_options("partition=/dev/nvme0n1p2, poll=off,fixed=0,threads=3").unwrap();
        assert_eq!(o.window, WindowSpec::Partition("/dev/nvme0n1p2".into()));
        assert_eq!(
            (o.poll, o.fixed_buffers, o.relay_threads),
            (PollMode::Off, false, 3)
        );
        assert_eq!(
            parse_options("lba=8:16").unwrap().window,
            WindowSpec::Lbas {
                start: 8,
                count: 16
            }
        );
        assert!(parse_options("").is_ok());
        assert!(parse_options("poll=sometimes").is_err());
        assert!(parse_options("color=blue").unwrap_err().contains("unknown"));
        assert!(parse_options("partition").is_err());
    }

    #[test]
    fn open_says_why_it_failed() {
        let mut buf = [0 as c_char; 256];
        let dev = c"/dev/gpunvme0";
        // SAFETY: NUL-terminated strings, a 256-byte buffer.
        let h =
            unsafe { gpunvme_pt_open(dev.as_ptr(), std::ptr::null(), buf.as_mut_ptr(), buf.len()) };
        assert!(h.is_null());
        // SAFETY: put_err NUL-terminated it.
        let msg = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy();
        assert!(msg.contains("not a kernel NVMe namespace"), "{msg}");
    }
}
