// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The bench's measurements as fio writes them with
//! `--output-format=json+`: one `jobs[]` entry per measured cell, with
//! fio's field names and units (`read`/`write`/`trim` with `io_bytes`,
//! `bw` in KiB/s, `iops`, `runtime` in ms, `clat_ns` with `percentile`
//! and json+'s `bins`; `usr_cpu`/`sys_cpu` in percent, `ctx`, `majf`,
//! `minf`; `iodepth_level`, `latency_ns/us/ms`), so fio's own tools
//! (`fio_jsonplus_clat2csv`) and tools built for fio's JSON read it.
//!
//! What differs from fio: the latency measured is from the command's
//! submission to its completion being seen, reported as both `clat_ns`
//! and `lat_ns` (`slat_ns` is zero: submission is not timed apart); the
//! bandwidth and IOPS statistics (`bw_min` .. `iops_samples`) come from
//! one sample, the whole run, since the bench keeps no time series.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::stats::{Lat, LatSummary, Measured};

/// What a job entry says about the run, besides its measurements.
pub struct JobInfo {
    pub name: String,
    /// fio's `job options`: rw, bs, iodepth, numjobs, runtime, ...
    pub options: BTreeMap<String, String>,
    pub qd: u32,
    /// The wall time measured (after the ramp).
    pub runtime: Duration,
    /// gpunvme's own description (target, device, method).
    pub gpunvme: Value,
}

fn lat_json(s: &LatSummary, with_dist: bool) -> Value {
    let mut v = json!({
        "min": s.min, "max": s.max, "mean": s.mean, "stddev": s.stddev, "N": s.n,
    });
    if with_dist && s.n > 0 {
        let p: Map<String, Value> = s
            .percentile
            .iter()
            .map(|&(q, ns)| (format!("{q:.6}"), json!(ns)))
            .collect();
        let b: Map<String, Value> = s
            .bins
            .iter()
            .map(|(ns, n)| (ns.to_string(), json!(n)))
            .collect();
        v["percentile"] = Value::Object(p);
        v["bins"] = Value::Object(b);
    }
    v
}

/// One direction (fio's `read`, `write` or `trim` object).
pub fn dir_json(l: &Lat, runtime: Duration) -> Value {
    let secs = runtime.as_secs_f64().max(1e-9);
    let s = l.summary();
    let bw_bytes = l.bytes as f64 / secs;
    let bw = (bw_bytes / 1024.0).round() as u64;
    let iops = s.n as f64 / secs;
    let one = if s.n > 0 { 1 } else { 0 };
    json!({
        "io_bytes": l.bytes,
        "io_kbytes": l.bytes / 1024,
        "bw_bytes": bw_bytes.round() as u64,
        "bw": bw,
        "iops": iops,
        "runtime": runtime.as_millis() as u64,
        "total_ios": s.n,
        "short_ios": 0,
        "drop_ios": 0,
        "slat_ns": {"min": 0, "max": 0, "mean": 0.0, "stddev": 0.0, "N": 0},
        "clat_ns": lat_json(&s, true),
        "lat_ns": lat_json(&s, false),
        "bw_min": bw, "bw_max": bw, "bw_agg": if s.n > 0 { 100.0 } else { 0.0 },
        "bw_mean": bw as f64, "bw_dev": 0.0, "bw_samples": one,
        "iops_min": iops.round() as u64, "iops_max": iops.round() as u64, "iops_mean": iops,
        "iops_stddev": 0.0, "iops_samples": one,
    })
}

/// fio's coarse latency distribution: percent of I/Os at or below each
/// bound of the unit and above the bound before it.
fn latency_buckets(l: &Lat, unit_ns: u64, top: bool) -> Value {
    const BOUNDS: [u64; 10] = [2, 4, 10, 20, 50, 100, 250, 500, 750, 1000];
    let total = l.ios();
    let mut m = Map::new();
    let pct = |lo: u64, hi: u64| -> f64 {
        if total == 0 {
            return 0.0;
        }
        let n = l.hist.count_between(lo, hi);
        100.0 * n as f64 / total as f64
    };
    let mut lo = if unit_ns == 1 { 0 } else { unit_ns + 1 };
    for b in BOUNDS {
        let hi = b * unit_ns;
        m.insert(b.to_string(), json!(pct(lo, hi)));
        lo = hi + 1;
    }
    if top {
        m.insert("2000".into(), json!(pct(lo, 2000 * unit_ns)));
        m.insert(">=2000".into(), json!(pct(2000 * unit_ns + 1, u64::MAX)));
    }
    Value::Object(m)
}

/// fio's `iodepth_level`: the bench keeps `qd` in flight all the time.
fn iodepth_level(qd: u32) -> Value {
    let keys = ["1", "2", "4", "8", "16", "32", ">=64"];
    let at = match qd {
        0..=1 => 0,
        2..=3 => 1,
        4..=7 => 2,
        8..=15 => 3,
        16..=31 => 4,
        32..=63 => 5,
        _ => 6,
    };
    Value::Object(
        keys.iter()
            .enumerate()
            .map(|(i, k)| (k.to_string(), json!(if i == at { 100.0 } else { 0.0 })))
            .collect(),
    )
}

/// One `jobs[]` entry.
pub fn job(info: &JobInfo, m: &Measured) -> Value {
    let (usr, sys) = m.cpu.percent(info.runtime);
    let all = m.all();
    let options: Map<String, Value> = info
        .options
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    json!({
        "jobname": info.name,
        "groupid": 0,
        "error": 0,
        "eta": 0,
        "elapsed": info.runtime.as_secs().max(1),
        "job options": options,
        "read": dir_json(&m.read, info.runtime),
        "write": dir_json(&m.write, info.runtime),
        "trim": dir_json(&Lat::new(), info.runtime),
        "sync": {"total_ios": 0, "lat_ns": {"min": 0, "max": 0, "mean": 0.0, "stddev": 0.0, "N": 0}},
        "job_runtime": info.runtime.as_millis() as u64,
        "usr_cpu": usr,
        "sys_cpu": sys,
        "ctx": m.cpu.ctx,
        "majf": m.cpu.majf,
        "minf": m.cpu.minf,
        "iodepth_level": iodepth_level(info.qd),
        "latency_ns": latency_buckets(&all, 1, false),
        "latency_us": latency_buckets(&all, 1_000, false),
        "latency_ms": latency_buckets(&all, 1_000_000, true),
        "latency_depth": info.qd,
        "latency_target": 0,
        "latency_percentile": 100.0,
        "latency_window": 0,
        "gpunvme": info.gpunvme,
    })
}

/// The top level fio writes around `jobs` (merged into the bench's JSON).
pub fn header(global: &BTreeMap<String, String>) -> Map<String, Value> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let mut m = Map::new();
    m.insert(
        "fio version".into(),
        json!(format!("gpunvme-bench-{}", env!("CARGO_PKG_VERSION"))),
    );
    m.insert("timestamp".into(), json!(now.as_secs()));
    m.insert("timestamp_ms".into(), json!(now.as_millis() as u64));
    m.insert(
        "global options".into(),
        Value::Object(global.iter().map(|(k, v)| (k.clone(), json!(v))).collect()),
    );
    m.insert("disk_util".into(), json!([]));
    m
}

#[cfg(test)]
/// The percent keys fio writes (`"99.990000"`), for tests and readers.
pub fn percentile_keys() -> Vec<String> {
    super::stats::PERCENTILES
        .iter()
        .map(|q| format!("{q:.6}"))
        .collect()
}

#[cfg(test)]
mod tests;
