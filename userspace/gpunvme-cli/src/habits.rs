// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! What every command shares: naming a device, sizes with suffixes, lists,
//! human units, `-o json`, exit codes, Ctrl-C and the progress bar.

use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use gpunvme::sysfs::{normalize_bdf, Sysfs, GPUNVME_DRIVER};

// ---- devices ----------------------------------------------------------------

/// A device as the user names it. Every command that takes a controller
/// takes any of these forms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Device {
    /// A PCI address, normalized (`01:00.0` gets domain `0000`).
    Bdf(String),
    /// A gpunvme node: `/dev/gpunvmeN`, `/dev/gpunvmeNnM` (one namespace),
    /// from `gpunvmeN`/`gpunvmeNnM` or any path.
    Node(PathBuf),
    /// A kernel nvme controller (`/dev/nvmeN` or `nvmeN`), by its name.
    KernelNvme(String),
    /// A namespace the kernel drives, used through the passthrough back
    /// end: `/dev/ngXnY`, `/dev/nvmeXnY` or a partition `/dev/nvmeXnYpZ`
    /// (also without `/dev/`).
    Namespace(PathBuf),
}

/// `gpunvme<digits>` or `gpunvme<digits>n<digits>`.
fn is_gpunvme_name(s: &str) -> bool {
    let Some(rest) = s.strip_prefix("gpunvme") else {
        return false;
    };
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    match rest.split_once('n') {
        Some((c, n)) => digits(c) && digits(n),
        None => digits(rest),
    }
}

/// `nvme<digits>`: a kernel nvme controller's name.
fn is_nvme_name(s: &str) -> bool {
    s.strip_prefix("nvme")
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// The usage text of a device argument.
pub const DEVICE_FORMS: &str =
    "a PCI address (0000:01:00.0 or 01:00.0), /dev/gpunvmeN, gpunvmeN or /dev/gpunvmeNnM, \
     or a kernel namespace /dev/ngXnY, /dev/nvmeXnY, /dev/nvmeXnYpZ";

/// A kernel namespace's path or name, as `/dev/...`.
fn namespace_path(s: &str) -> Option<PathBuf> {
    let p = PathBuf::from(s);
    gpunvme::passthrough::namespace::parse_name(&p)?;
    Some(if s.starts_with('/') {
        p
    } else {
        PathBuf::from("/dev").join(s)
    })
}

/// Parses a device argument (clap value parser).
pub fn parse_device(s: &str) -> Result<Device, String> {
    if s.starts_with("/dev/") || !s.contains('/') {
        if let Some(p) = namespace_path(s) {
            return Ok(Device::Namespace(p));
        }
    }
    if s.starts_with('/') || s.starts_with("./") || s.starts_with("../") {
        let p = PathBuf::from(s);
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if s.starts_with("/dev/") && is_nvme_name(name) {
            return Ok(Device::KernelNvme(name.to_string()));
        }
        return Ok(Device::Node(p));
    }
    if is_gpunvme_name(s) {
        return Ok(Device::Node(PathBuf::from("/dev").join(s)));
    }
    if is_nvme_name(s) {
        return Ok(Device::KernelNvme(s.to_string()));
    }
    normalize_bdf(s)
        .map(Device::Bdf)
        .map_err(|_| format!("`{s}` is not a device: expected {DEVICE_FORMS}"))
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Bdf(b) => write!(f, "{b}"),
            Device::Node(p) => write!(f, "{}", p.display()),
            Device::KernelNvme(n) => write!(f, "/dev/{n}"),
            Device::Namespace(p) => write!(f, "{}", p.display()),
        }
    }
}

/// The controller node a gpunvme namespace node belongs to
/// (`/dev/gpunvme0n2` -> `/dev/gpunvme0`).
fn controller_node(p: &std::path::Path) -> PathBuf {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    match name.strip_prefix("gpunvme").and_then(|r| r.split_once('n')) {
        Some((c, _)) => p.with_file_name(format!("gpunvme{c}")),
        None => p.to_path_buf(),
    }
}

/// The PCI address of `d`, looked up in sysfs for a node or a kernel
/// nvme name (for bind, unbind, sriov).
pub fn device_bdf(sysfs: &Sysfs, d: &Device) -> Result<String, Box<dyn std::error::Error>> {
    match d {
        Device::Bdf(b) => Ok(b.clone()),
        Device::Node(p) => {
            let ctrl = controller_node(p);
            sysfs
                .list()?
                .into_iter()
                .find(|c| {
                    c.driver.as_deref() == Some(GPUNVME_DRIVER) && c.node.as_ref() == Some(&ctrl)
                })
                .map(|c| c.bdf)
                .ok_or_else(|| {
                    format!(
                        "no controller bound to gpunvme has the node {}",
                        ctrl.display()
                    )
                    .into()
                })
        }
        Device::KernelNvme(n) => sysfs
            .list()?
            .into_iter()
            .find(|c| c.nvme_name.as_deref() == Some(n.as_str()))
            .map(|c| c.bdf)
            .ok_or_else(|| format!("no kernel nvme controller is named {n}").into()),
        Device::Namespace(p) => Err(format!(
            "{} is a namespace the kernel drives; this command takes a controller (its PCI address \
             or /dev/nvmeN)",
            p.display()
        )
        .into()),
    }
}

// ---- sizes, lists, human units -------------------------------------------------

/// Parses a byte size: a number with an optional binary suffix, k/K/KiB
/// (1024), m/M/MiB, g/G/GiB, t/T/TiB; `B` alone or a trailing `B` is
/// allowed (`4KB` is 4096, as with dd and nvme-cli, not 4000).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suf) = t.split_at(split);
    let bad = || format!("`{s}` is not a size: expected e.g. 512, 4k, 1M, 1MiB, 2G");
    let n: u64 = num.parse().map_err(|_| bad())?;
    let shift = match suf.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad()),
    };
    n.checked_mul(1 << shift).ok_or_else(bad)
}

/// A queue depth or queue-pair count of a list (`--qd 1,8,32` or
/// `--qd 1 8 32`); a value that is a device says to put the device first.
pub fn parse_count(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) if parse_device(s).is_ok() => Err(format!(
            "`{s}` is a device, not a number: name the device first, right after the command \
             (e.g. `gpunvme bench {s} --qd 1 8 32`)"
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// Bytes with a binary unit: `512 B`, `4 KiB`, `1.5 MiB`.
pub fn human_bytes(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 || v.fract() == 0.0 {
        format!("{v:.0} {}", U[i])
    } else {
        format!("{v:.1} {}", U[i])
    }
}

/// A rate with a decimal unit: `950`, `12.3K`, `1.20M`.
pub fn human_count(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.1}K", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// A latency given in microseconds: `850ns`, `85.2us`, `1.23ms`, `2.00s`.
pub fn human_us(us: f64) -> String {
    if us < 1.0 {
        format!("{:.0}ns", us * 1e3)
    } else if us < 1e3 {
        format!("{us:.1}us")
    } else if us < 1e6 {
        format!("{:.2}ms", us / 1e3)
    } else {
        format!("{:.2}s", us / 1e6)
    }
}

// ---- output format -------------------------------------------------------------

/// nvme-cli's output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Default)]
pub enum Format {
    /// Tables and sentences for people.
    #[default]
    Normal,
    /// One JSON document on stdout (messages still go to stderr).
    Json,
}

/// `-o/--output-format`, as nvme-cli names it.
#[derive(Args, Debug, Clone, Copy)]
pub struct Output {
    /// Output format: normal (tables) or json (one JSON document on stdout).
    #[arg(
        short = 'o',
        long = "output-format",
        value_enum,
        default_value_t = Format::Normal,
        value_name = "FMT"
    )]
    pub format: Format,
}

impl Output {
    pub fn json(&self) -> bool {
        self.format == Format::Json
    }
}

// ---- exit codes ------------------------------------------------------------------

/// Everything worked.
pub const EXIT_OK: u8 = 0;
/// The command could not run or failed (I/O error, no device, ...).
pub const EXIT_FAILED: u8 = 1;
/// Usage error (bad option or value): clap's code.
pub const EXIT_USAGE: u8 = 2;
/// It ran, and the data did not match the pattern (verify, gpu-run's
/// read-verify).
pub const EXIT_MISMATCH: u8 = 3;
/// Stopped by Ctrl-C (SIGINT) after an orderly teardown: 128 + 2.
pub const EXIT_INTERRUPTED: u8 = 130;

/// The text of `--help`'s exit-code section.
pub const EXIT_CODES_HELP: &str = "Exit status:\n  0    success\n  1    could not run, or failed (no device, I/O error, refused)\n  2    usage error (unknown option, bad value)\n  3    data mismatch (verify, gpu-run --kernel read-verify)\n  130  interrupted by Ctrl-C, after an orderly stop";

/// The data read does not match the pattern (exit 3).
#[derive(Debug)]
pub struct DataMismatch(pub String);
impl std::fmt::Display for DataMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for DataMismatch {}

/// Ctrl-C stopped the command after it reaped what was in flight (exit 130).
#[derive(Debug)]
pub struct Interrupted(pub String);
impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "interrupted: {}", self.0)
    }
}
impl std::error::Error for Interrupted {}

/// The exit status for an error.
pub fn exit_code(e: &(dyn std::error::Error + 'static)) -> u8 {
    if e.is::<DataMismatch>() {
        EXIT_MISMATCH
    } else if e.is::<Interrupted>() {
        EXIT_INTERRUPTED
    } else {
        EXIT_FAILED
    }
}

// ---- Ctrl-C ---------------------------------------------------------------------

/// SIGINTs seen since [`catch_sigint`].
static SIGINTS: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_sigint(_: libc::c_int) {
    // Async-signal-safe only: an atomic add and write(2).
    if SIGINTS.fetch_add(1, Ordering::SeqCst) >= 1 {
        let msg = b"\ngpunvme: still stopping in order (nothing the device may still use is freed); kill -9 leaves that to the kernel\n";
        // SAFETY: write(2) on stderr from a buffer that lives forever.
        unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
    }
}

/// From now on Ctrl-C does not kill the process: it sets a flag the long
/// commands poll ([`interrupted`]) to stop submitting, reap what is in
/// flight (or raise the GPU's stop flag) and tear down in order.
pub fn catch_sigint() {
    // SAFETY: a zeroed sigaction is valid; the handler only touches an
    // atomic and calls write(2), both async-signal-safe; SA_RESTART keeps
    // the blocking calls of the rest of the program as they were.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
    }
}

/// Whether Ctrl-C was pressed.
pub fn interrupted() -> bool {
    SIGINTS.load(Ordering::Relaxed) > 0
}

// ---- progress -----------------------------------------------------------------------

/// What a progress bar counts.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Bytes,
    Items,
    Seconds,
}

/// A one-line progress bar on stderr, drawn only when stderr is a
/// terminal (silent when piped or redirected), at most 10 times a second.
pub struct Progress {
    what: String,
    total: u64,
    unit: Unit,
    on: bool,
    t0: Instant,
    last: Option<Instant>,
}

impl Progress {
    pub fn new(what: impl Into<String>, total: u64, unit: Unit) -> Self {
        Progress {
            what: what.into(),
            total,
            unit,
            on: std::io::stderr().is_terminal(),
            t0: Instant::now(),
            last: None,
        }
    }

    pub fn set_what(&mut self, what: impl Into<String>) {
        self.what = what.into();
    }

    fn amount(&self, v: u64) -> String {
        match self.unit {
            Unit::Bytes => human_bytes(v),
            Unit::Items => v.to_string(),
            Unit::Seconds => format!("{v} s"),
        }
    }

    /// `done` of `total` so far.
    pub fn set(&mut self, done: u64) {
        if !self.on {
            return;
        }
        let now = Instant::now();
        if self
            .last
            .is_some_and(|l| now - l < Duration::from_millis(100))
        {
            return;
        }
        self.last = Some(now);
        let frac = if self.total == 0 {
            0.0
        } else {
            (done as f64 / self.total as f64).min(1.0)
        };
        let filled = (frac * 30.0) as usize;
        let mut line = format!(
            "\r\x1b[K{} [{}{}] {:3.0}% {}/{}",
            self.what,
            "#".repeat(filled),
            " ".repeat(30 - filled),
            frac * 100.0,
            self.amount(done),
            self.amount(self.total)
        );
        let secs = (now - self.t0).as_secs_f64();
        if self.unit == Unit::Bytes && secs > 0.0 {
            line.push_str(&format!(" {}/s", human_bytes((done as f64 / secs) as u64)));
        }
        let mut e = std::io::stderr().lock();
        let _ = e.write_all(line.as_bytes());
        let _ = e.flush();
    }

    /// Clears the line.
    pub fn finish(&mut self) {
        if self.on && self.last.is_some() {
            let _ = std::io::stderr().write_all(b"\r\x1b[K");
        }
        self.last = None;
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_namespaces_and_partitions_are_devices_too() {
        let ns = |p: &str| Ok(Device::Namespace(p.into()));
        assert_eq!(parse_device("/dev/ng0n1"), ns("/dev/ng0n1"));
        assert_eq!(parse_device("ng3n2"), ns("/dev/ng3n2"));
        assert_eq!(parse_device("/dev/nvme0n1"), ns("/dev/nvme0n1"));
        assert_eq!(parse_device("nvme0n1p3"), ns("/dev/nvme0n1p3"));
        // A controller stays a controller; a multipath path is no device.
        assert_eq!(
            parse_device("/dev/nvme0"),
            Ok(Device::KernelNvme("nvme0".into()))
        );
        assert!(parse_device("nvme0c1n1").is_err());
        let e = device_bdf(
            &Sysfs::with_root("/nonexistent"),
            &Device::Namespace("/dev/ng0n1".into()),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("takes a controller"), "{e}");
    }

    #[test]
    fn devices_in_every_form() {
        let bdf = Device::Bdf("0000:00:04.0".into());
        assert_eq!(parse_device("0000:00:04.0"), Ok(bdf.clone()));
        assert_eq!(parse_device("00:04.0"), Ok(bdf.clone()));
        assert_eq!(
            parse_device("0000:00:04.0").unwrap().to_string(),
            "0000:00:04.0"
        );
        assert_eq!(
            parse_device("0000:AB:1f.7"),
            Ok(Device::Bdf("0000:ab:1f.7".into()))
        );
        let node = Device::Node("/dev/gpunvme0".into());
        assert_eq!(parse_device("/dev/gpunvme0"), Ok(node.clone()));
        assert_eq!(parse_device("gpunvme0"), Ok(node));
        assert_eq!(
            parse_device("gpunvme12n3"),
            Ok(Device::Node("/dev/gpunvme12n3".into()))
        );
        assert_eq!(
            parse_device("/dev/nvme1"),
            Ok(Device::KernelNvme("nvme1".into()))
        );
        assert_eq!(
            parse_device("nvme1"),
            Ok(Device::KernelNvme("nvme1".into()))
        );
        assert_eq!(
            parse_device("./my/node"),
            Ok(Device::Node("./my/node".into()))
        );
        for bad in [
            "8",
            "gpunvme",
            "gpunvmex",
            "0000:00:04",
            "00:04.8",
            "nvme",
            "",
        ] {
            let e = parse_device(bad).unwrap_err();
            assert!(e.contains("not a device"), "{bad}: {e}");
        }
        assert_eq!(
            controller_node(std::path::Path::new("/dev/gpunvme3n2")),
            PathBuf::from("/dev/gpunvme3")
        );
    }

    #[test]
    fn sizes_with_suffixes() {
        for (s, v) in [
            ("512", 512),
            ("4k", 4096),
            ("4K", 4096),
            ("4KiB", 4096),
            ("4kb", 4096),
            ("1M", 1 << 20),
            ("1MiB", 1 << 20),
            ("2G", 2 << 30),
            ("1t", 1 << 40),
            ("0", 0),
            ("7B", 7),
        ] {
            assert_eq!(parse_size(s), Ok(v), "{s}");
        }
        for bad in ["", "k", "4x", "1.5M", "-1", "4 K", "99999999999T"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn counts_and_the_device_hint() {
        assert_eq!(parse_count("8"), Ok(8));
        assert!(parse_count("0").is_err());
        assert!(parse_count("x").is_err());
        let e = parse_count("0000:01:00.0").unwrap_err();
        assert!(e.contains("device first"), "{e}");
    }

    #[test]
    fn human_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(4096), "4 KiB");
        assert_eq!(human_bytes(3 << 19), "1.5 MiB");
        assert_eq!(human_bytes(1 << 30), "1 GiB");
        assert_eq!(human_count(950.0), "950");
        assert_eq!(human_count(12_345.0), "12.3K");
        assert_eq!(human_count(1_200_000.0), "1.20M");
        assert_eq!(human_us(0.85), "850ns");
        assert_eq!(human_us(85.24), "85.2us");
        assert_eq!(human_us(1234.0), "1.23ms");
        assert_eq!(human_us(2e6), "2.00s");
    }

    #[test]
    fn exit_codes_are_distinct() {
        let m: Box<dyn std::error::Error> = Box::new(DataMismatch("x".into()));
        let i: Box<dyn std::error::Error> = Box::new(Interrupted("x".into()));
        let o: Box<dyn std::error::Error> = "other".into();
        assert_eq!(exit_code(m.as_ref()), EXIT_MISMATCH);
        assert_eq!(exit_code(i.as_ref()), EXIT_INTERRUPTED);
        assert_eq!(exit_code(o.as_ref()), EXIT_FAILED);
        let all = [
            EXIT_OK,
            EXIT_FAILED,
            EXIT_USAGE,
            EXIT_MISMATCH,
            EXIT_INTERRUPTED,
        ];
        for (i, a) in all.iter().enumerate() {
            assert!(!all[i + 1..].contains(a));
            assert!(EXIT_CODES_HELP.contains(&format!("  {a} ")));
        }
    }
}
