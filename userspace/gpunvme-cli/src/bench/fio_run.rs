// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! `gpunvme bench --fio`: fio itself as a second baseline for the
//! passthrough back end, nobody here wrote it: fio's `io_uring_cmd`
//! engine (NVMe passthrough, `cmd_type=nvme`) on the same `/dev/ngXnY`,
//! the same blocks (the window's offset and the bench's range), the
//! bench's workload (`--rw`, `--rwmixread`, `--bs`, `--runtime` or
//! `--ops`, `--ramp-time`, `--cpus-allowed`, `--randseed`; sequential
//! jobs each on their own slice of the range, as the bench's workers),
//! `iodepth` = QD, `numjobs` = queue pairs, polled (`hipri`) when the
//! namespace has poll queues, fixed buffers and registered files as fio's
//! fastest setting. Latency is fio's total latency (`lat_ns`, submission
//! to completion, as ours is) over both directions
//! (`unified_rw_reporting=both`). Its cells carry fio's own figures, not
//! histograms, so they have no json+ job of ours in `jobs[]`. A cell fio
//! cannot run (no fio, no io_uring_cmd engine) is skipped with fio's
//! words, not a failed bench.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{check_interrupt, skipped, BenchArgs, Cell, Run, Rw, TARGET_FIO};

/// How long a cell measures (after the ramp), as the bench's own cells.
fn runtime(a: &BenchArgs) -> Duration {
    a.runtime
        .or(a.duration_ms.map(Duration::from_millis))
        .unwrap_or(Duration::from_secs(1))
}

/// fio's arguments for one cell.
pub(super) fn args(
    a: &BenchArgs,
    ng: &Path,
    offset: u64,
    polled: bool,
    range: u64,
    qpairs: u32,
    qd: u32,
) -> Vec<String> {
    let bs = a.bs.max(1);
    // Sequential: job i walks its own slice, as worker i does here.
    let (size, increment) = match a.rw {
        Rw::Read | Rw::Write => {
            let per = (range / bs / u64::from(qpairs.max(1))).max(1) * bs;
            (per, Some(per))
        }
        _ => (range, None),
    };
    let mut v = vec![
        "--name=gpunvme-bench".to_string(),
        format!("--filename={}", ng.display()),
        "--ioengine=io_uring_cmd".into(),
        "--cmd_type=nvme".into(),
        format!("--rw={}", a.rw.name()),
        format!("--bs={bs}"),
        format!("--iodepth={qd}"),
        format!("--numjobs={qpairs}"),
        "--thread=1".into(),
        "--group_reporting=1".into(),
        format!("--offset={offset}"),
        format!("--size={size}"),
        "--norandommap=1".into(),
        format!("--randseed={}", a.randseed),
        "--fixedbufs=1".into(),
        "--registerfiles=1".into(),
        format!("--hipri={}", u8::from(polled)),
        "--unified_rw_reporting=both".into(),
        "--lat_percentiles=1".into(),
        "--output-format=json".into(),
    ];
    if let Some(i) = increment {
        v.push(format!("--offset_increment={i}"));
    }
    if a.rw == Rw::Randrw {
        v.push(format!("--rwmixread={}", a.rwmixread));
    }
    match a.ops {
        Some(o) => v.push(format!("--number_ios={}", o.div_ceil(u64::from(qpairs)))),
        None => {
            v.push("--time_based=1".into());
            v.push(format!("--runtime={}ms", runtime(a).as_millis().max(1)));
        }
    }
    if !a.ramp_time.is_zero() {
        v.push(format!("--ramp_time={}ms", a.ramp_time.as_millis().max(1)));
    }
    if let Some(cpus) = &a.cpus_allowed {
        let list: Vec<String> = cpus.iter().map(usize::to_string).collect();
        v.push(format!("--cpus_allowed={}", list.join(",")));
        // One CPU of the set per job, as the bench pins its workers.
        v.push("--cpus_allowed_policy=split".into());
    }
    v
}

/// One cell from fio's JSON: the `mixed` section (both directions) where
/// fio wrote one, else the direction that moved data.
pub(super) fn parse(json: &str, qpairs: u32, qd: u32) -> Result<Cell, String> {
    // fio may print notes before the JSON document.
    let start = json.find('{').ok_or("no JSON in fio's output")?;
    let v: serde_json::Value =
        serde_json::from_str(&json[start..]).map_err(|e| format!("fio's JSON: {e}"))?;
    let job = &v["jobs"][0];
    let ios = |d: &str| job[d]["total_ios"].as_u64();
    let dir = ["mixed", "read", "write"]
        .into_iter()
        .find(|d| ios(d).is_some_and(|n| n > 0))
        .or_else(|| ["mixed", "read"].into_iter().find(|d| ios(d).is_some()))
        .ok_or("fio's JSON has no jobs[0].read.total_ios")?;
    let r = &job[dir];
    let lat = if r["lat_ns"]["percentile"].is_object() {
        &r["lat_ns"]
    } else {
        &r["clat_ns"]
    };
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or(0.0);
    let us = |v: &serde_json::Value| f(v) / 1000.0;
    let pct = |k: &str| us(&lat["percentile"][k]);
    let bw = f(&r["bw_bytes"]);
    Ok(Cell {
        qpairs,
        qd,
        ops: r["total_ios"].as_u64().unwrap_or(0),
        seconds: f(&r["runtime"]) / 1000.0,
        iops: f(&r["iops"]),
        read_iops: f(&job["read"]["iops"]),
        write_iops: f(&job["write"]["iops"]),
        mib_per_s: bw / (1 << 20) as f64,
        gb_per_s: bw / 1e9,
        lat_us_min: us(&lat["min"]),
        lat_us_mean: us(&lat["mean"]),
        lat_us_stddev: us(&lat["stddev"]),
        lat_us_p50: pct("50.000000"),
        lat_us_p99: pct("99.000000"),
        lat_us_p999: pct("99.900000"),
        lat_us_p9999: pct("99.990000"),
        lat_us_max: us(&lat["max"]),
        usr_cpu: f(&job["usr_cpu"]),
        sys_cpu: f(&job["sys_cpu"]),
        skipped: None,
        measured: None,
    })
}

/// Runs `fio` for every cell, with a deadline (fio's own ramp and run time
/// plus 60 s; past it fio is killed and the cell skipped).
pub(super) fn run(
    a: &BenchArgs,
    fio: &Path,
    ng: &Path,
    offset: u64,
    polled: bool,
    range: u64,
) -> Result<Run, Box<dyn std::error::Error>> {
    let mut results = Vec::new();
    for &qpairs in &a.qpairs {
        for &qd in &a.qd {
            check_interrupt(&results)?;
            let child = Command::new(fio)
                .args(args(a, ng, offset, polled, range, qpairs, qd))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn();
            let mut child = match child {
                Ok(c) => c,
                Err(e) => {
                    results.push(skipped(
                        qpairs,
                        qd,
                        format!("cannot run {}: {e}", fio.display()),
                    ));
                    continue;
                }
            };
            let limit = runtime(a) + a.ramp_time + Duration::from_secs(60);
            let t0 = Instant::now();
            let status = loop {
                match child.try_wait() {
                    Ok(Some(st)) => break Some(st),
                    Ok(None) if t0.elapsed() < limit => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break None;
                    }
                }
            };
            let out = child.wait_with_output().ok();
            let text = |b: &Option<std::process::Output>, err: bool| {
                b.as_ref()
                    .map(|o| {
                        String::from_utf8_lossy(if err { &o.stderr } else { &o.stdout })
                            .into_owned()
                    })
                    .unwrap_or_default()
            };
            let cell = match status {
                None => skipped(qpairs, qd, format!("fio did not finish within {limit:?}")),
                Some(st) if !st.success() => {
                    let e = text(&out, true);
                    let e = e.lines().last().unwrap_or("no message").trim().to_string();
                    skipped(qpairs, qd, format!("fio failed ({st}): {e}"))
                }
                Some(_) => {
                    parse(&text(&out, false), qpairs, qd).unwrap_or_else(|e| skipped(qpairs, qd, e))
                }
            };
            results.push(cell);
        }
    }
    Ok(Run {
        target: TARGET_FIO,
        device: ng.display().to_string(),
        method: format!(
            "fio {} --ioengine=io_uring_cmd --cmd_type=nvme on the same blocks, the same \
             workload, iodepth=QD numjobs=QPAIRS, fixedbufs, registerfiles, hipri={}; fio's \
             figures (usr/sys CPU as fio reports them)",
            fio.display(),
            u8::from(polled)
        ),
        range_bytes: range,
        results,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: BenchArgs,
    }

    fn bench_args(argv: &[&str]) -> BenchArgs {
        Cli::try_parse_from(std::iter::once("bench").chain(argv.iter().copied()))
            .unwrap()
            .a
    }

    #[test]
    fn fios_json_becomes_a_cell() {
        let j = r#"note: a line fio prints first
{"jobs": [{"usr_cpu": 3.5, "sys_cpu": 41.0,
  "read": {"total_ios": 1000, "runtime": 500, "iops": 2000.5, "bw_bytes": 8194048,
  "lat_ns": {"min": 4000, "max": 90000.0, "mean": 12000.0, "stddev": 2000.0,
             "percentile": {"50.000000": 10000, "99.000000": 40000, "99.900000": 80000,
                            "99.990000": 85000}},
  "clat_ns": {"max": 1.0, "mean": 1.0}},
  "write": {"total_ios": 0, "runtime": 0, "iops": 0.0, "bw_bytes": 0}}]}"#;
        let c = parse(j, 2, 8).unwrap();
        assert_eq!((c.qpairs, c.qd, c.ops), (2, 8, 1000));
        assert_eq!((c.iops, c.read_iops, c.write_iops), (2000.5, 2000.5, 0.0));
        assert_eq!(c.seconds, 0.5);
        assert_eq!(c.mib_per_s, 8194048.0 / 1048576.0);
        assert_eq!(
            (c.lat_us_p50, c.lat_us_p99, c.lat_us_p999, c.lat_us_p9999),
            (10.0, 40.0, 80.0, 85.0)
        );
        assert_eq!(
            (c.lat_us_min, c.lat_us_mean, c.lat_us_stddev, c.lat_us_max),
            (4.0, 12.0, 2.0, 90.0)
        );
        assert_eq!((c.usr_cpu, c.sys_cpu), (3.5, 41.0));
        assert!(c.measured.is_none() && c.skipped.is_none());
        assert!(parse("fio: engine io_uring_cmd not loadable", 1, 1).is_err());
    }

    /// A mix: the cell's figures are fio's `mixed` section, the split
    /// IOPS its read and write sections.
    #[test]
    fn a_mixed_workload_is_read_from_fios_unified_section() {
        let j = r#"{"jobs": [{"usr_cpu": 1.0, "sys_cpu": 2.0,
  "read": {"total_ios": 700, "runtime": 1000, "iops": 700.0, "bw_bytes": 1,
           "lat_ns": {"min": 1, "max": 2, "mean": 1, "stddev": 0, "percentile": {"50.000000": 1000}}},
  "write": {"total_ios": 300, "runtime": 1000, "iops": 300.0, "bw_bytes": 1,
            "lat_ns": {"min": 1, "max": 2, "mean": 1, "stddev": 0, "percentile": {"50.000000": 9000}}},
  "mixed": {"total_ios": 1000, "runtime": 1000, "iops": 1000.0, "bw_bytes": 4096000,
            "lat_ns": {"min": 1000, "max": 30000, "mean": 5000, "stddev": 10,
                       "percentile": {"50.000000": 3000}}}}]}"#;
        let c = parse(j, 1, 4).unwrap();
        assert_eq!((c.ops, c.iops), (1000, 1000.0));
        assert_eq!((c.read_iops, c.write_iops), (700.0, 300.0));
        assert_eq!((c.lat_us_p50, c.lat_us_max), (3.0, 30.0));
        assert_eq!(c.gb_per_s, 4096000.0 / 1e9);
    }

    /// fio runs the bench's workload: every knob is passed on, the
    /// window's offset is where it starts, sequential jobs get their own
    /// slices, and fixed I/O counts replace the runtime.
    #[test]
    fn fio_gets_the_benchs_workload_knobs() {
        let a = bench_args(&[
            "--rw",
            "randrw",
            "--rwmixread",
            "70",
            "--bs",
            "16k",
            "--runtime",
            "2s",
            "--ramp-time",
            "500ms",
            "--cpus-allowed",
            "2-3,6",
            "--randseed",
            "9",
        ]);
        let v = args(&a, Path::new("/dev/ng0n1"), 1 << 20, true, 64 << 20, 2, 8);
        for want in [
            "--filename=/dev/ng0n1",
            "--ioengine=io_uring_cmd",
            "--rw=randrw",
            "--rwmixread=70",
            "--bs=16384",
            "--iodepth=8",
            "--numjobs=2",
            "--offset=1048576",
            "--size=67108864",
            "--randseed=9",
            "--hipri=1",
            "--time_based=1",
            "--runtime=2000ms",
            "--ramp_time=500ms",
            "--cpus_allowed=2,3,6",
            "--cpus_allowed_policy=split",
            "--unified_rw_reporting=both",
        ] {
            assert!(v.iter().any(|x| x == want), "{want} missing from {v:?}");
        }
        assert!(!v.iter().any(|x| x.starts_with("--offset_increment")));

        let a = bench_args(&["--rw", "write", "--bs", "4k", "--ops", "1000"]);
        let v = args(&a, Path::new("/dev/ng0n1"), 0, false, 1 << 20, 4, 1);
        for want in [
            "--rw=write",
            "--size=262144",
            "--offset_increment=262144",
            "--number_ios=250",
            "--hipri=0",
        ] {
            assert!(v.iter().any(|x| x == want), "{want} missing from {v:?}");
        }
        assert!(!v.iter().any(|x| x.starts_with("--runtime")
            || x.starts_with("--ramp_time")
            || x.starts_with("--rwmixread")
            || x.starts_with("--cpus_allowed")));
    }
}
