// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! `gpunvme bench --fio`: fio itself as a second baseline for the
//! passthrough back end, nobody here wrote it: fio's `io_uring_cmd`
//! engine (NVMe passthrough, `cmd_type=nvme`) on the same `/dev/ngXnY`,
//! the same blocks (the window's offset and the bench's range), 4 KiB
//! random reads, `iodepth` = QD, `numjobs` = queue pairs, polled
//! (`hipri`) when the namespace has poll queues, fixed buffers and
//! registered files as fio's fastest setting. Latency is fio's total
//! latency (`lat_ns`, submission to completion, as ours is). A cell fio
//! cannot run (no fio, no io_uring_cmd engine) is skipped with fio's
//! words, not a failed bench.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::bench::{check_interrupt, skipped, worker_seed, BenchArgs, Cell, Run, BS, TARGET_FIO};

/// fio's arguments for one cell.
pub(crate) fn args(
    a: &BenchArgs,
    ng: &Path,
    offset: u64,
    polled: bool,
    range: u64,
    qpairs: u32,
    qd: u32,
) -> Vec<String> {
    let mut v = vec![
        "--name=gpunvme-bench".to_string(),
        format!("--filename={}", ng.display()),
        "--ioengine=io_uring_cmd".into(),
        "--cmd_type=nvme".into(),
        "--rw=randread".into(),
        format!("--bs={BS}"),
        format!("--iodepth={qd}"),
        format!("--numjobs={qpairs}"),
        "--thread=1".into(),
        "--group_reporting=1".into(),
        format!("--offset={offset}"),
        format!("--size={range}"),
        "--norandommap=1".into(),
        "--randrepeat=0".into(),
        format!("--randseed={}", worker_seed(a, 0)),
        "--fixedbufs=1".into(),
        "--registerfiles=1".into(),
        format!("--hipri={}", u8::from(polled)),
        "--lat_percentiles=1".into(),
        "--output-format=json".into(),
    ];
    match a.ops {
        Some(o) => v.push(format!("--number_ios={}", o.div_ceil(u64::from(qpairs)))),
        None => {
            v.push("--time_based=1".into());
            v.push(format!("--runtime={}ms", a.duration_ms.max(1)));
        }
    }
    v
}

/// One cell from fio's JSON.
pub(crate) fn parse(json: &str, qpairs: u32, qd: u32) -> Result<Cell, String> {
    // fio may print notes before the JSON document.
    let start = json.find('{').ok_or("no JSON in fio's output")?;
    let v: serde_json::Value =
        serde_json::from_str(&json[start..]).map_err(|e| format!("fio's JSON: {e}"))?;
    let r = &v["jobs"][0]["read"];
    let lat = if r["lat_ns"]["percentile"].is_object() {
        &r["lat_ns"]
    } else {
        &r["clat_ns"]
    };
    let pct = |k: &str| lat["percentile"][k].as_f64().unwrap_or(0.0) / 1000.0;
    let ops = r["total_ios"]
        .as_u64()
        .ok_or("fio's JSON has no read.total_ios")?;
    let secs = r["runtime"].as_f64().unwrap_or(0.0) / 1000.0;
    Ok(Cell {
        qpairs,
        qd,
        ops,
        seconds: secs,
        iops: r["iops"].as_f64().unwrap_or(0.0),
        mib_per_s: r["bw_bytes"].as_f64().unwrap_or(0.0) / (1 << 20) as f64,
        lat_us_p50: pct("50.000000"),
        lat_us_p99: pct("99.000000"),
        lat_us_p999: pct("99.900000"),
        lat_us_max: lat["max"].as_f64().unwrap_or(0.0) / 1000.0,
        lat_us_mean: lat["mean"].as_f64().unwrap_or(0.0) / 1000.0,
        skipped: None,
    })
}

/// Runs `fio` for every cell, with a deadline (fio's own run time plus
/// 60 s; past it fio is killed and the cell skipped).
pub(crate) fn run(
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
            let limit = Duration::from_millis(a.duration_ms) + Duration::from_secs(60);
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
            "fio {} --ioengine=io_uring_cmd --cmd_type=nvme on the same blocks, randread 4k, \
             iodepth=QD numjobs=QPAIRS, fixedbufs, registerfiles, hipri={}",
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

    #[test]
    fn fios_json_becomes_a_cell() {
        let j = r#"note: a line fio prints first
{"jobs": [{"read": {"total_ios": 1000, "runtime": 500, "iops": 2000.5, "bw_bytes": 8194048,
  "lat_ns": {"max": 90000.0, "mean": 12000.0,
             "percentile": {"50.000000": 10000, "99.000000": 40000, "99.900000": 80000}},
  "clat_ns": {"max": 1.0, "mean": 1.0}}}]}"#;
        let c = parse(j, 2, 8).unwrap();
        assert_eq!((c.qpairs, c.qd, c.ops), (2, 8, 1000));
        assert_eq!((c.iops, c.seconds), (2000.5, 0.5));
        assert_eq!(
            (c.lat_us_p50, c.lat_us_p99, c.lat_us_p999),
            (10.0, 40.0, 80.0)
        );
        assert_eq!((c.lat_us_max, c.lat_us_mean), (90.0, 12.0));
        assert!(parse("fio: engine io_uring_cmd not loadable", 1, 1).is_err());
    }
}
