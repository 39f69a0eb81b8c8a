// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The passthrough relay on a model namespace, timed (no device, no
//! kernel, no module): commands per second one relay thread checks,
//! translates and submits, per command mix, single-threaded and with the
//! GPU's part on another thread. Prints a table; `--out FILE` writes the
//! same as JSON. Exits 1 only if a check failed, never because of a time.
//!
//!   cargo run --release -p gpunvme --example passthrough_relay_bench -- --seconds 1 --out relay.json

use gpunvme::passthrough::relay_bench::{describe, run, standard};

fn main() {
    let mut seconds = 0.5;
    let mut out = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--seconds", Some(v)) => seconds = v.parse().expect("--seconds S"),
            ("--out", Some(v)) => out = Some(v),
            _ => {
                eprintln!("usage: passthrough_relay_bench [--seconds S] [--out FILE.json]");
                std::process::exit(2);
            }
        }
    }
    // Warm-up (caches, first touch): not reported, still checked.
    let mut ok = standard(0.1).iter().take(1).all(|c| run(c).ok());
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Cross runs need two idle CPUs: a loaded machine starves one of the
    // two spinning threads, and the figure says more about the load.
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().next().unwrap_or("?").to_string())
        .unwrap_or_else(|_| "?".into());
    println!("passthrough relay on a model namespace, {seconds} s per run, {cpus} CPUs, load average {load}");
    let mut runs = Vec::new();
    for c in standard(seconds) {
        let o = run(&c);
        println!("{}", describe(&o));
        ok &= o.ok();
        runs.push(o);
    }
    let target = 3e6;
    let best = runs
        .iter()
        .filter(|o| o.mode == "single")
        .map(|o| o.commands_per_second)
        .fold(f64::INFINITY, f64::min);
    println!(
        "slowest single-thread mix: {:.2} M commands/s per relay thread ({:.2}x the 3 M/s target)",
        best / 1e6,
        best / target
    );
    if let Some(path) = out {
        let v = serde_json::json!({
            "what": "passthrough relay on a model namespace (gpunvme::passthrough::relay_bench)",
            "cpus": cpus,
            "load_average_1min": load,
            "seconds": seconds,
            "target_commands_per_second": target,
            "runs": runs,
        });
        std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap() + "\n")
            .unwrap_or_else(|e| panic!("write {path}: {e}"));
        println!("JSON: {path}");
    }
    if !ok {
        eprintln!("a check failed");
        std::process::exit(1);
    }
}
