// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! What a bench measures: completion latencies per direction in HDR
//! histograms (1 ns to 60 s, 3 significant digits), bytes and I/Os, and
//! the CPU time of the workers (getrusage per thread), summarised the way
//! fio does (min, max, mean, stddev, its percentile list, json+ bins).

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use gpunvme::Direction;

/// fio's default `--percentile_list`.
pub const PERCENTILES: [f64; 17] = [
    1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95,
    99.99,
];

/// One direction's latencies (ns) and volume.
#[derive(Clone)]
pub struct Lat {
    pub hist: Histogram<u64>,
    pub bytes: u64,
}

impl Lat {
    pub fn new() -> Self {
        Lat {
            hist: Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds"),
            bytes: 0,
        }
    }

    /// One I/O of `bytes` that took `d`.
    pub fn record(&mut self, d: Duration, bytes: u64) {
        self.hist.saturating_record((d.as_nanos() as u64).max(1));
        self.bytes += bytes;
    }

    pub fn merge(&mut self, other: &Lat) {
        self.hist.add(&other.hist).expect("histograms of one shape");
        self.bytes += other.bytes;
    }

    pub fn ios(&self) -> u64 {
        self.hist.len()
    }

    /// The summary of these latencies.
    pub fn summary(&self) -> LatSummary {
        let h = &self.hist;
        if h.is_empty() {
            return LatSummary::default();
        }
        let percentile = PERCENTILES
            .iter()
            .map(|&p| (p, h.value_at_quantile(p / 100.0)))
            .collect();
        // fio's bins: each distinct (histogram-equivalent) value and its count.
        let bins = h
            .iter_recorded()
            .map(|v| {
                (
                    h.highest_equivalent(v.value_iterated_to()),
                    v.count_at_value(),
                )
            })
            .fold(BTreeMap::new(), |mut m, (ns, n)| {
                *m.entry(ns).or_insert(0) += n;
                m
            });
        LatSummary {
            n: h.len(),
            min: h.min(),
            max: h.max(),
            mean: h.mean(),
            stddev: h.stdev(),
            percentile,
            bins,
        }
    }
}

/// Latency statistics in ns, as fio's `clat_ns` has them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LatSummary {
    pub n: u64,
    pub min: u64,
    pub max: u64,
    pub mean: f64,
    pub stddev: f64,
    /// (percent, ns) for each of [`PERCENTILES`].
    pub percentile: Vec<(f64, u64)>,
    /// ns -> I/Os completed in that histogram bucket.
    pub bins: BTreeMap<u64, u64>,
}

impl LatSummary {
    /// The latency at `p` percent, in ns (0 without samples).
    pub fn at(&self, p: f64) -> u64 {
        self.percentile
            .iter()
            .find(|(q, _)| (q - p).abs() < 1e-9)
            .map_or(0, |&(_, v)| v)
    }
}

/// A worker's (or a cell's) measurement: reads and writes apart, and CPU.
#[derive(Clone)]
pub struct Measured {
    pub read: Lat,
    pub write: Lat,
    pub cpu: Cpu,
}

impl Measured {
    pub fn new() -> Self {
        Measured {
            read: Lat::new(),
            write: Lat::new(),
            cpu: Cpu::default(),
        }
    }

    pub fn dir(&mut self, d: Direction) -> &mut Lat {
        match d {
            Direction::Read => &mut self.read,
            Direction::Write => &mut self.write,
        }
    }

    pub fn merge(&mut self, o: &Measured) {
        self.read.merge(&o.read);
        self.write.merge(&o.write);
        self.cpu.add(&o.cpu);
    }

    /// Both directions in one histogram.
    pub fn all(&self) -> Lat {
        let mut a = self.read.clone();
        a.merge(&self.write);
        a
    }
}

/// CPU a thread used: what fio reports as usr_cpu, sys_cpu, ctx, majf, minf.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Cpu {
    pub user: Duration,
    pub system: Duration,
    pub ctx: u64,
    pub majf: u64,
    pub minf: u64,
}

impl Cpu {
    /// The calling thread's use so far (getrusage(RUSAGE_THREAD)).
    pub fn thread_now() -> Cpu {
        // SAFETY: getrusage fills the zeroed struct it is given.
        let ru = unsafe {
            let mut ru: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
            ru
        };
        let tv = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
        };
        Cpu {
            user: tv(ru.ru_utime),
            system: tv(ru.ru_stime),
            ctx: (ru.ru_nvcsw + ru.ru_nivcsw) as u64,
            majf: ru.ru_majflt as u64,
            minf: ru.ru_minflt as u64,
        }
    }

    /// What was used since `earlier`.
    pub fn since(self, earlier: Cpu) -> Cpu {
        Cpu {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
            ctx: self.ctx.saturating_sub(earlier.ctx),
            majf: self.majf.saturating_sub(earlier.majf),
            minf: self.minf.saturating_sub(earlier.minf),
        }
    }

    pub fn add(&mut self, o: &Cpu) {
        self.user += o.user;
        self.system += o.system;
        self.ctx += o.ctx;
        self.majf += o.majf;
        self.minf += o.minf;
    }

    /// Percent of `wall` in user and system mode, summed over the workers
    /// (fio's group reporting: N busy-polling workers report about N x 100).
    pub fn percent(&self, wall: Duration) -> (f64, f64) {
        let w = wall.as_secs_f64().max(1e-9);
        (
            100.0 * self.user.as_secs_f64() / w,
            100.0 * self.system.as_secs_f64() / w,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known latencies give the statistics fio would print: exact where
    /// HDR's 3 digits keep the value (below 2048 ns), within 0.1% above.
    #[test]
    fn summary_of_known_latencies() {
        let mut l = Lat::new();
        // 1..=1000 us would blur; use ns values HDR keeps exactly.
        for ns in 1..=1000u64 {
            l.record(Duration::from_nanos(ns), 4096);
        }
        let s = l.summary();
        assert_eq!((s.n, s.min, s.max), (1000, 1, 1000));
        assert!((s.mean - 500.5).abs() < 1e-9, "{}", s.mean);
        // Population stddev of 1..=1000: sqrt((1000^2 - 1) / 12).
        assert!((s.stddev - 288.674_990_553_1).abs() < 1e-6, "{}", s.stddev);
        assert_eq!(s.at(50.0), 500);
        assert_eq!(s.at(99.0), 990);
        assert_eq!(s.at(99.99), 1000);
        assert_eq!(s.at(1.0), 10);
        assert_eq!(s.bins.len(), 1000);
        assert!(s.bins.values().all(|&n| n == 1));
        assert_eq!(l.bytes, 4096 * 1000);
        // A large value lands in a bucket within 0.1%.
        let mut l = Lat::new();
        l.record(Duration::from_micros(123_456), 1);
        let s = l.summary();
        assert!((s.max as f64 / 123_456_000.0 - 1.0).abs() < 1e-3);
        assert_eq!(s.bins.values().sum::<u64>(), 1);
        assert_eq!(Lat::new().summary(), LatSummary::default());
    }

    /// Thread time, not process time: a thread that sleeps while another
    /// spins is charged (almost) nothing, the spinner is charged its spin
    /// (waits on CPU time it used, not on the clock, so a loaded machine
    /// cannot fail it), and percent() is of the wall time given.
    #[test]
    fn cpu_time_is_this_threads() {
        let a = Cpu::thread_now();
        let spinner = std::thread::spawn(|| {
            let b = Cpu::thread_now();
            let t = std::time::Instant::now();
            let mut x = 0u64;
            let used = loop {
                x = x.wrapping_add(std::hint::black_box(1));
                let u = Cpu::thread_now().since(b);
                if u.user + u.system >= Duration::from_millis(30)
                    || t.elapsed() > Duration::from_secs(20)
                {
                    break u;
                }
            };
            (used, x)
        });
        std::thread::sleep(Duration::from_millis(50));
        let (spun, x) = spinner.join().unwrap();
        assert!(
            spun.user + spun.system >= Duration::from_millis(30),
            "{spun:?} ({x})"
        );
        let slept = Cpu::thread_now().since(a);
        assert!(
            slept.user + slept.system < Duration::from_millis(20),
            "the sleeping thread was charged {slept:?} (the spinner used {spun:?})"
        );
        let c = Cpu {
            user: Duration::from_millis(30),
            system: Duration::from_millis(10),
            ..Cpu::default()
        };
        let (u, s) = c.percent(Duration::from_millis(200));
        assert!((u - 15.0).abs() < 1e-9 && (s - 5.0).abs() < 1e-9, "{u} {s}");
    }
}
