// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The bench's fio JSON read by fio's own tool: Debian's fio package's
//! `fio_jsonplus_clat2csv` turns a job built from known latencies into
//! CSV, and every row must be what was recorded (tests/deps.sh installs
//! the package; without it this test fails and says so).

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use super::*;
use gpunvme::Direction;

/// Reads: 100..=1099 ns once each and 500 ns ten times more; writes: 30
/// at 1000 ns and 50 at 2000 ns. HDR keeps every value below 2048 exact.
fn known() -> (Measured, BTreeMap<u64, u64>, BTreeMap<u64, u64>) {
    let mut m = Measured::new();
    let (mut reads, mut writes) = (BTreeMap::new(), BTreeMap::new());
    let rec = |m: &mut Measured, d: Direction, ns: u64, into: &mut BTreeMap<u64, u64>| {
        m.dir(d).record(Duration::from_nanos(ns), 4096);
        *into.entry(ns).or_insert(0) += 1;
    };
    for ns in 100..=1099 {
        rec(&mut m, Direction::Read, ns, &mut reads);
    }
    for _ in 0..10 {
        rec(&mut m, Direction::Read, 500, &mut reads);
    }
    for _ in 0..30 {
        rec(&mut m, Direction::Write, 1000, &mut writes);
    }
    for _ in 0..50 {
        rec(&mut m, Direction::Write, 2000, &mut writes);
    }
    m.cpu.user = Duration::from_millis(600);
    m.cpu.system = Duration::from_millis(100);
    (m, reads, writes)
}

fn info() -> JobInfo {
    JobInfo {
        name: "gpunvme qpairs=1 qd=8".into(),
        options: [("rw", "randrw"), ("bs", "4096"), ("iodepth", "8")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        qd: 8,
        runtime: Duration::from_secs(2),
        gpunvme: json!({"target": "gpunvme"}),
    }
}

/// fio's field names and units, and the numbers recorded.
#[test]
fn a_job_has_fios_fields_and_the_recorded_numbers() {
    let (m, reads, _) = known();
    let j = job(&info(), &m);
    let r = &j["read"];
    assert_eq!(r["total_ios"], 1010);
    assert_eq!(r["io_bytes"], 1010 * 4096);
    assert_eq!(r["bw"], (1010.0 * 4096.0 / 2.0 / 1024.0) as u64);
    assert_eq!(r["iops"], 505.0);
    assert_eq!(r["runtime"], 2000);
    assert_eq!(r["clat_ns"]["min"], 100);
    assert_eq!(r["clat_ns"]["max"], 1099);
    assert_eq!(r["clat_ns"]["N"], 1010);
    let keys: Vec<String> = r["clat_ns"]["percentile"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let mut want = percentile_keys();
    want.sort();
    assert_eq!(keys, want);
    assert!(want.contains(&"99.990000".to_string()));
    let bins = r["clat_ns"]["bins"].as_object().unwrap();
    assert_eq!(bins.len(), reads.len());
    assert_eq!(bins["500"], 11);
    assert_eq!(j["write"]["total_ios"], 80);
    assert!(
        j["trim"]["clat_ns"].get("bins").is_none(),
        "no bins without I/O"
    );
    assert_eq!(j["usr_cpu"], 30.0);
    assert_eq!(j["sys_cpu"], 5.0);
    assert_eq!(j["iodepth_level"]["8"], 100.0);
    assert_eq!(j["job options"]["rw"], "randrw");
    // latency_ns "1000" holds 751..=1000 ns (250 reads, 30 writes),
    // latency_us "2" 1001..=2000 ns (99 reads, 50 writes).
    let ns_1000 = j["latency_ns"]["1000"].as_f64().unwrap();
    let total = 1090.0;
    assert!(
        (ns_1000 - 100.0 * (250.0 + 30.0) / total).abs() < 1e-9,
        "{ns_1000}"
    );
    let us_2 = j["latency_us"]["2"].as_f64().unwrap();
    assert!(
        (us_2 - 100.0 * (99.0 + 50.0) / total).abs() < 1e-9,
        "{us_2}"
    );
}

/// One CSV row's count, cumulative count and percentile of a column group.
fn triple(cols: &[&str], group: usize) -> Option<(u64, u64, f64)> {
    let c = |i: usize| cols.get(1 + group * 3 + i).map(|s| s.trim()).unwrap_or("");
    if c(0).is_empty() {
        return None;
    }
    Some((
        c(0).parse().unwrap(),
        c(1).parse().unwrap(),
        c(2).parse().unwrap(),
    ))
}

#[test]
fn fio_jsonplus_clat2csv_reads_the_bench_json() {
    let tool = "fio_jsonplus_clat2csv";
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        found,
        "{tool} not found: install Debian's fio package (apt-get install fio python3-six; \
         tests/deps.sh does)"
    );
    let (m, reads, writes) = known();
    let mut doc = header(&BTreeMap::new());
    doc.insert("jobs".into(), json!([job(&info(), &m)]));
    let dir = std::env::temp_dir().join(format!("gpunvme-fio-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("bench.json");
    std::fs::write(
        &src,
        serde_json::to_string_pretty(&Value::Object(doc)).unwrap(),
    )
    .unwrap();
    let dest = dir.join("clat.csv");
    let run = |extra: &[&str]| {
        let o = Command::new(tool)
            .arg(&src)
            .arg(&dest)
            .args(extra)
            .output()
            .unwrap();
        let out =
            String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{tool} {extra:?}: {out}");
        out
    };
    run(&[]);
    let out = run(&["--validate"]);
    assert!(out.contains("validated"), "{out}");

    let csv = std::fs::read_to_string(dir.join("clat_job0.csv")).unwrap();
    let mut lines = csv.lines();
    assert!(lines
        .next()
        .unwrap()
        .starts_with("nsec, read_slat_ns_count"));
    // Column groups: read slat, clat, lat; write slat, clat, lat; trim ...
    let (read_clat, write_clat) = (1, 4);
    let (mut got_r, mut got_w) = (BTreeMap::new(), BTreeMap::new());
    let (mut cum_r, mut cum_w) = (0u64, 0u64);
    let (n_r, n_w) = (1010u64, 80u64);
    for l in lines.filter(|l| !l.trim().is_empty()) {
        let cols: Vec<&str> = l.split(',').collect();
        let ns: u64 = cols[0].trim().parse().unwrap();
        for (g, got, cum, n) in [
            (read_clat, &mut got_r, &mut cum_r, n_r),
            (write_clat, &mut got_w, &mut cum_w, n_w),
        ] {
            if let Some((count, cumulative, pct)) = triple(&cols, g) {
                *cum += count;
                assert_eq!(cumulative, *cum, "row {ns}");
                assert!(
                    (pct - *cum as f64 / n as f64).abs() < 1e-9,
                    "row {ns}: {pct}"
                );
                got.insert(ns, count);
            }
        }
        for g in [0, 2, 3, 5, 6, 7, 8] {
            assert!(
                triple(&cols, g).is_none(),
                "row {ns}: column group {g} has data"
            );
        }
    }
    assert_eq!(got_r, reads, "read clat rows");
    assert_eq!(got_w, writes, "write clat rows");
    assert_eq!((cum_r, cum_w), (n_r, n_w));
    std::fs::remove_dir_all(&dir).unwrap();
}
