// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! What a bench worker does next, in fio's terms: `--rw` (random or
//! sequential, reads, writes or a mix of `--rwmixread` percent reads),
//! `--bs`, over the first `--range` bytes; and fio's duration syntax.

use std::time::Duration;

use clap::ValueEnum;

use gpunvme::Direction;

/// fio's `--rw`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Rw {
    /// Random reads.
    Randread,
    /// Random writes (destroys the data in the range).
    Randwrite,
    /// Sequential reads.
    Read,
    /// Sequential writes (destroys the data in the range).
    Write,
    /// Random reads and writes, --rwmixread percent reads.
    Randrw,
}

impl Rw {
    /// fio's name.
    pub fn name(self) -> &'static str {
        match self {
            Rw::Randread => "randread",
            Rw::Randwrite => "randwrite",
            Rw::Read => "read",
            Rw::Write => "write",
            Rw::Randrw => "randrw",
        }
    }

    pub fn random(self) -> bool {
        matches!(self, Rw::Randread | Rw::Randwrite | Rw::Randrw)
    }

    /// Whether any I/O of the workload writes.
    pub fn writes(self) -> bool {
        !matches!(self, Rw::Randread | Rw::Read)
    }

    /// Percent of reads.
    pub fn read_percent(self, rwmixread: u8) -> u8 {
        match self {
            Rw::Randread | Rw::Read => 100,
            Rw::Randwrite | Rw::Write => 0,
            Rw::Randrw => rwmixread,
        }
    }
}

/// xorshift64: a fixed sequence per seed (fio's `randseed`).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// One worker's I/O sequence: direction and byte offset of each I/O.
/// Random I/O is uniform over the whole range (with replacement, fio's
/// `norandommap`); sequential I/O walks worker `i` of `n`'s own slice of
/// the range and wraps, so workers do not read the same blocks.
pub struct OpGen {
    rng: Rng,
    random: bool,
    read_percent: u8,
    bs: u64,
    slots: u64,
    first: u64,
    span: u64,
    next: u64,
}

impl OpGen {
    /// `range` bytes (a multiple of `bs`, at least one block of it).
    pub fn new(
        rw: Rw,
        rwmixread: u8,
        bs: u64,
        range: u64,
        seed: u64,
        worker: u64,
        workers: u64,
    ) -> Self {
        let slots = (range / bs).max(1);
        let per = (slots / workers.max(1)).max(1);
        let first = (worker * per) % slots;
        OpGen {
            rng: Rng::new(seed),
            random: rw.random(),
            read_percent: rw.read_percent(rwmixread),
            bs,
            slots,
            first,
            span: per.min(slots - first),
            next: 0,
        }
    }

    /// The next I/O: its direction and byte offset.
    pub fn next_op(&mut self) -> (Direction, u64) {
        let dir = match self.read_percent {
            100 => Direction::Read,
            0 => Direction::Write,
            p if (self.rng.next() % 100) < p as u64 => Direction::Read,
            _ => Direction::Write,
        };
        let slot = if self.random {
            self.rng.next() % self.slots
        } else {
            let s = self.first + self.next;
            self.next = (self.next + 1) % self.span;
            s
        };
        (dir, slot * self.bs)
    }
}

/// fio's time syntax for `--runtime` and `--ramp-time`: a number with an
/// optional unit, `us`/`usec`, `ms`/`msec`, `s`/`sec`, `m`/`min`, `h`,
/// `d`; a bare number is seconds, as in fio.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || format!("`{s}` is not a duration: expected e.g. 30, 30s, 500ms, 2m, 1h");
    let n: f64 = num.parse().map_err(|_| bad())?;
    let secs = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "s" | "sec" | "secs" => n,
        "us" | "usec" => n / 1e6,
        "ms" | "msec" => n / 1e3,
        "m" | "min" | "mins" => n * 60.0,
        "h" | "hour" | "hours" => n * 3600.0,
        "d" | "day" | "days" => n * 86400.0,
        _ => return Err(bad()),
    };
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A CPU list as `taskset -c` and fio's `--cpus_allowed` write it: `0-3,6`.
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, String> {
    let bad = || format!("`{s}` is not a CPU list: expected e.g. 0-3,6");
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<usize>(), b.parse::<usize>()),
            None => (part.parse::<usize>(), part.parse::<usize>()),
        };
        let (a, b) = (a.map_err(|_| bad())?, b.map_err(|_| bad())?);
        if a > b || b >= libc::CPU_SETSIZE as usize {
            return Err(bad());
        }
        out.extend(a..=b);
    }
    if out.is_empty() {
        return Err(bad());
    }
    Ok(out)
}

/// Pins the calling thread to `cpu`.
pub fn pin_to(cpu: usize) -> Result<(), String> {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET stays inside it
    // (cpu < CPU_SETSIZE, checked by parse_cpu_list); pid 0 is this thread.
    let r = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if r != 0 {
        return Err(format!(
            "pinning a worker to CPU {cpu}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_fios_units() {
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        for bad in ["", "s", "10x", "-1", "1e3"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cpu_lists_take_ranges() {
        assert_eq!(parse_cpu_list("0-3,6"), Ok(vec![0, 1, 2, 3, 6]));
        assert_eq!(parse_cpu_list("2"), Ok(vec![2]));
        for bad in ["", "3-1", "a", "0-", "99999"] {
            assert!(parse_cpu_list(bad).is_err(), "{bad}");
        }
    }

    /// Sequential workers walk disjoint slices in order and wrap; random
    /// offsets stay aligned and in range; the mix follows --rwmixread.
    #[test]
    fn offsets_and_directions_follow_the_workload() {
        let bs = 4096;
        let mut g = OpGen::new(Rw::Read, 50, bs, 16 * bs, 1, 1, 2);
        let offs: Vec<u64> = (0..10).map(|_| g.next_op().1 / bs).collect();
        assert_eq!(offs, [8, 9, 10, 11, 12, 13, 14, 15, 8, 9]);
        let mut g = OpGen::new(Rw::Randrw, 70, bs, 1 << 20, 7, 0, 1);
        let mut reads = 0;
        for _ in 0..10_000 {
            let (d, o) = g.next_op();
            assert_eq!(o % bs, 0);
            assert!(o < 1 << 20);
            reads += (d == Direction::Read) as u32;
        }
        assert!(
            (6500..7500).contains(&reads),
            "{reads} reads of 10000 at 70%"
        );
        let mut g = OpGen::new(Rw::Randwrite, 70, bs, 1 << 20, 7, 0, 1);
        assert!((0..100).all(|_| g.next_op().0 == Direction::Write));
        assert_eq!(Rw::Randrw.read_percent(30), 30);
        assert!(Rw::Write.writes() && !Rw::Randread.writes());
    }
}
