// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The options of a namespace used through the passthrough back end
//! (DEVICE /dev/ngXnY, /dev/nvmeXnY or a partition): the window, polling,
//! fixed buffers, relay threads; shared by read, write, verify, bench and
//! gpu-run.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use gpunvme::passthrough::{Options, PollMode, WindowSpec};
use gpunvme::sysfs::Sysfs;

use crate::habits::Device;

/// `--poll`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Poll {
    /// Polled when every path to the namespace has poll queues.
    Auto,
    /// Polled; refused without poll queues.
    On,
    /// Interrupt completions.
    Off,
}

/// How a kernel namespace is served (only with such a DEVICE).
#[derive(Args, Debug, Clone)]
pub struct PassthroughArgs {
    /// The LBA window: this partition of the namespace (start and size from
    /// sysfs; LBAs are then relative to it, and it is held O_EXCL, so it
    /// must not be mounted or in use). A DEVICE that is a partition is the
    /// same.
    #[arg(long, value_name = "PARTITION", conflicts_with = "lba_window")]
    pub partition: Option<PathBuf>,
    /// The LBA window as START:COUNT logical blocks of the namespace
    /// (LBAs are then relative to START; every partition it overlaps, or
    /// the whole disk, is held O_EXCL).
    #[arg(long, value_name = "START:COUNT", value_parser = WindowSpec::parse_lbas)]
    pub lba_window: Option<WindowSpec>,
    /// Polled completions (IORING_SETUP_IOPOLL): auto (when the namespace
    /// has poll queues, nvme.ko's poll_queues=N, and every path is PCIe:
    /// nvme-tcp's poll is not safe on 7.3), on, off.
    #[arg(long, value_enum, default_value_t = Poll::Auto, value_name = "MODE")]
    pub poll: Poll,
    /// Do not register buffers as io_uring fixed buffers (every command
    /// then pins its pages).
    #[arg(long)]
    pub no_fixed_buffers: bool,
    /// Relay threads at most (default: one per CPU).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        conflicts_with = "relay_inline"
    )]
    pub relay_threads: usize,
    /// No relay thread: the threads that wait for completions run the
    /// relay themselves (one CPU per client, not two). For CPU clients
    /// (read, write, verify, bench); gpu-run refuses it, since nothing
    /// would relay a GPU's commands.
    #[arg(long)]
    pub relay_inline: bool,
    /// Microseconds a relay thread keeps polling after its last command
    /// before it sleeps (up to 1 ms; the GPU cannot wake it): less saves
    /// CPU when idle, less than a command's round trip slows QD1.
    #[arg(long, value_name = "US", default_value_t = 20_000)]
    pub relay_spin_us: u64,
}

impl PassthroughArgs {
    /// The back end's options; an error if one is given for a DEVICE that
    /// is not a kernel namespace.
    pub fn options(&self, sysfs: &Sysfs, d: &Device) -> Result<Options, String> {
        let given = self.partition.is_some() || self.lba_window.is_some();
        if given && !matches!(d, Device::Namespace(_)) {
            return Err(format!(
                "--partition and --lba-window are for a namespace the kernel drives \
                 (/dev/ngXnY, /dev/nvmeXnY), not {d}"
            ));
        }
        Ok(Options {
            window: match (&self.partition, &self.lba_window) {
                (Some(p), _) => WindowSpec::Partition(p.clone()),
                (None, Some(w)) => w.clone(),
                (None, None) => WindowSpec::Whole,
            },
            poll: match self.poll {
                Poll::Auto => PollMode::Auto,
                Poll::On => PollMode::On,
                Poll::Off => PollMode::Off,
            },
            fixed_buffers: !self.no_fixed_buffers,
            relay_threads: self.relay_threads,
            relay_inline: self.relay_inline,
            relay_spin: std::time::Duration::from_micros(self.relay_spin_us),
            sysfs: sysfs.clone(),
            ..Options::default()
        })
    }
}

/// What a passthrough controller serves, for summaries (JSON).
pub fn describe(ctrl: &gpunvme::Controller) -> Option<serde_json::Value> {
    let d = ctrl.passthrough()?;
    let w = d.window();
    Some(serde_json::json!({
        "backend": "passthrough",
        "window": d.window_claim().map(|r| r.describe.clone()),
        "window_start_lba": w.start,
        "window_lbas": w.blocks,
        "polled": d.polled(),
        "relay": if d.relay_inline() { "inline" } else { "threads" },
        "fixed_buffers_error": d.fixed_buffer_error(),
    }))
}

/// The same in words, for stderr.
pub fn describe_line(ctrl: &gpunvme::Controller) -> Option<String> {
    let d = ctrl.passthrough()?;
    let w = d.window();
    Some(format!(
        "passthrough on {}: window {} ({} blocks from LBA {}; LBAs below are relative to it), \
         completions {}, relay {}{}",
        ctrl.path().display(),
        d.window_claim().map_or("?".into(), |r| r.describe.clone()),
        w.blocks,
        w.start,
        if d.polled() { "polled" } else { "by interrupt" },
        if d.relay_inline() {
            "inline (run by the waiting threads)"
        } else {
            "threads"
        },
        d.fixed_buffer_error()
            .map(|e| format!("; no fixed buffers: {e}"))
            .unwrap_or_default()
    ))
}
