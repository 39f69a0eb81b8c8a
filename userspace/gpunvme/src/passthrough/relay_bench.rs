// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The passthrough relay on a model namespace, timed: how many commands
//! one relay thread checks, translates and submits per second, with no
//! device and no kernel (the model completes every command at once and
//! moves no data). Run by `examples/passthrough_relay_bench.rs`, which
//! prints the table and writes JSON; nothing here asserts a time.
//!
//! Per pair, in a back end's memfd as a real pair: a shadow SQ, the cells,
//! a CQ mirror and a PRP pool; payload is one registered buffer of 64
//! pages (made-up addresses that the model never dereferences). Around
//! the relay:
//!   client  plays the GPU: keeps depth - 1 commands outstanding from a
//!           fixed list of templates (the mix), reaps the mirror and checks
//!           every completion (its own command ID back, the status the
//!           template must get);
//!   model   completes what the relay submitted at its flush.
//! Modes:
//!   single  one thread runs client, relay and model for every pair in
//!           turn; only the relay's part (a pass over the pair, the
//!           submitter's flush and reap, the completions) is timed;
//!   cross   the relay alone on one thread over every pair, as a relay
//!           thread runs, while a client thread on another CPU plays the
//!           GPU: every shadow SQE the relay reads was written by another
//!           core. Commands per second of wall time.
//! After the timed window every pair is drained; submitted == reaped and
//! no check failed, or the result says so.

use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::addr::{Kind, Region, Table};
use super::check::{check, check_cost, Limits, Reach, Reject, Window};
use super::model_ns::{ModelDisk, ModelSubmit};
use super::relay::{untag, Counters, Relay};
use super::shadow::{Arena, PairMemory, CQ_HEAD_CELL, SQ_TAIL_CELL};
use super::submit::{Done, Submit};

const PAGE: u64 = 4096;
const PAYLOAD_PAGES: u64 = 64;

/// The commands the client sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mix {
    /// 4 KiB reads, PRP1 only.
    Read4k,
    /// 8 KiB reads: PRP1 and PRP2.
    Read8kPrp2,
    /// 128 KiB reads: a list of 31 entries in the pool, each checked.
    Read128kList,
    /// 4 KiB reads and writes, 8 KiB reads, 128 KiB reads, flushes and
    /// one refused command (Compare) in every eight.
    Mixed,
}

/// One run.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    /// The commands.
    pub mix: Mix,
    /// Queue pairs on the relay.
    pub pairs: u32,
    /// Entries per queue (depth - 1 commands in flight per pair).
    pub depth: u32,
    /// Timed window.
    pub seconds: f64,
    /// Relay and client on two threads (mode "cross").
    pub cross: bool,
}

/// What a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// The run.
    pub config: Config,
    /// "single" or "cross".
    pub mode: &'static str,
    /// Commands completed in the timed window (refused ones included).
    pub commands: u64,
    /// Of them, refused by the checks (as the mix expects).
    pub rejected: u64,
    /// Nanoseconds the relay worked (single: its timed part; cross: the
    /// window's wall time, the relay thread being busy all along).
    pub relay_ns: u64,
    /// Wall time of the window, ns.
    pub wall_ns: u64,
    /// Commands per second of relay time: one relay thread's throughput.
    pub commands_per_second: f64,
    /// Relay nanoseconds per command.
    pub ns_per_command: f64,
    /// Completions that were wrong (command ID, status), or commands lost
    /// in the drain: 0 unless the relay is broken.
    pub check_failures: u64,
}

impl Outcome {
    /// Whether every check held.
    pub fn ok(&self) -> bool {
        self.check_failures == 0
    }
}

/// The standard set: each mix single, then 4 KiB reads and the mix cross.
pub fn standard(seconds: f64) -> Vec<Config> {
    let c = |mix, cross| Config {
        mix,
        pairs: 8,
        depth: 32,
        seconds,
        cross,
    };
    vec![
        c(Mix::Read4k, false),
        c(Mix::Read8kPrp2, false),
        c(Mix::Read128kList, false),
        c(Mix::Mixed, false),
        c(Mix::Read4k, true),
        c(Mix::Mixed, true),
    ]
}

/// One template: the SQE (command ID 0) and the status it must get.
#[derive(Clone, Copy)]
struct Template {
    sqe: [u32; 16],
    status: u16,
}

fn sqe(op: u8, nsid: u32, slba: u64, blocks: u32, prp1: u64, prp2: u64) -> [u32; 16] {
    let mut dw = [0u32; 16];
    dw[0] = u32::from(op);
    dw[1] = nsid;
    dw[6] = prp1 as u32;
    dw[7] = (prp1 >> 32) as u32;
    dw[8] = prp2 as u32;
    dw[9] = (prp2 >> 32) as u32;
    dw[10] = slba as u32;
    dw[11] = (slba >> 32) as u32;
    dw[12] = blocks - 1;
    dw
}

/// The templates of `mix` for a pair whose pool lists start at `list`.
fn templates(mix: Mix, nsid: u32, payload: u64, list: u64) -> Vec<Template> {
    let ok = |sqe| Template { sqe, status: 0 };
    let r4 = ok(sqe(0x02, nsid, 8, 8, payload + 5 * PAGE, 0));
    let r8 = ok(sqe(
        0x02,
        nsid,
        64,
        16,
        payload + 9 * PAGE,
        payload + 10 * PAGE,
    ));
    let r128 = ok(sqe(0x02, nsid, 256, 256, payload + 16 * PAGE, list));
    match mix {
        Mix::Read4k => vec![r4],
        Mix::Read8kPrp2 => vec![r8],
        Mix::Read128kList => vec![r128],
        Mix::Mixed => vec![
            r4,
            ok(sqe(0x01, nsid, 16, 8, payload + 6 * PAGE, 0)),
            r8,
            r128,
            r4,
            ok(sqe(0x00, nsid, 0, 1, 0, 0)),
            Template {
                sqe: sqe(0x05, nsid, 8, 8, payload + 5 * PAGE, 0),
                status: Reject::Opcode.status(),
            },
            r4,
        ],
    }
}

/// The client's side of one pair.
struct Client {
    sq: *mut u32,
    cq: *const u32,
    db: *mut u32,
    depth: u32,
    tail: u32,
    head: u32,
    phase: u32,
    outstanding: u32,
    next: u64,
    /// Template index of each command ID in flight.
    inflight: Vec<Option<usize>>,
    free: Vec<u16>,
    templates: Vec<Template>,
    completed: u64,
    rejected: u64,
    failures: u64,
}

// SAFETY: the pointers are into the pair's shared memory, which outlives
// the client; one thread at a time plays it.
unsafe impl Send for Client {}

impl Client {
    /// Fills the SQ up to depth - 1 outstanding; rings once.
    fn submit(&mut self, go: bool) {
        let mut rung = false;
        while go && self.outstanding < self.depth - 1 {
            let Some(cid) = self.free.pop() else { break };
            let t = (self.next % self.templates.len() as u64) as usize;
            self.next += 1;
            let mut e = self.templates[t].sqe;
            e[0] |= u32::from(cid) << 16;
            for (i, w) in e.iter().enumerate() {
                // SAFETY: tail < depth, the SQ holds depth entries.
                unsafe {
                    std::ptr::write_volatile(self.sq.add(self.tail as usize * 16 + i), w.to_le())
                };
            }
            self.inflight[cid as usize] = Some(t);
            self.tail = (self.tail + 1) % self.depth;
            self.outstanding += 1;
            rung = true;
        }
        if rung {
            fence(Ordering::Release);
            // SAFETY: the SQ tail cell of the live page.
            unsafe { std::ptr::write_volatile(self.db.add(SQ_TAIL_CELL as usize / 4), self.tail) };
        }
    }

    /// Takes every completion in the mirror, checks it, rings the head.
    fn reap(&mut self) {
        let mut n = 0;
        loop {
            // SAFETY: head < depth, the mirror holds depth entries.
            let dw3 = unsafe { std::ptr::read_volatile(self.cq.add(self.head as usize * 4 + 3)) };
            if (dw3 >> 16) & 1 != self.phase {
                break;
            }
            fence(Ordering::Acquire);
            let cid = (dw3 & 0xffff) as u16;
            let status = (dw3 >> 17) as u16;
            match self.inflight.get_mut(cid as usize).and_then(Option::take) {
                Some(t) if self.templates[t].status == status => {
                    if status != 0 {
                        self.rejected += 1;
                    }
                }
                _ => self.failures += 1,
            }
            self.free.push(cid);
            self.outstanding = self.outstanding.saturating_sub(1);
            self.completed += 1;
            self.head += 1;
            if self.head == self.depth {
                self.head = 0;
                self.phase ^= 1;
            }
            n += 1;
        }
        if n > 0 {
            // SAFETY: the CQ head cell of the live page.
            unsafe { std::ptr::write_volatile(self.db.add(CQ_HEAD_CELL as usize / 4), self.head) };
        }
    }
}

struct Pair {
    mem: PairMemory,
    relay: Relay,
    limits: Limits,
    counters: Counters,
}

/// One relay pass over `p` (index `i`), the model's flush and reap, and
/// the completions.
fn relay_pass(p: &mut Pair, i: u32, table: &Table, sub: &mut ModelSubmit, dones: &mut Vec<Done>) {
    let lim = p.limits;
    p.relay.step(&p.mem, i, sub, &p.counters, |sqe, scratch| {
        (
            check(
                sqe,
                &lim,
                &Reach {
                    table,
                    qid: lim.qid,
                },
                scratch,
            ),
            check_cost(sqe, &lim),
        )
    });
    let _ = sub.flush(false);
    dones.clear();
    sub.reap(dones);
    for d in dones.iter() {
        let (_, slot) = untag(d.tag);
        p.relay.complete(&p.mem, slot, d, &p.counters);
    }
}

/// Runs one configuration.
pub fn run(cfg: &Config) -> Outcome {
    let nsid = 1;
    let arena = Arena::new().expect("memfd for the benchmark");
    let payload = vec![0u8; (PAYLOAD_PAGES * PAGE) as usize + PAGE as usize];
    let host = (payload.as_ptr() as u64).div_ceil(PAGE) * PAGE;
    let mut table = Table::default();
    let pi = table
        .insert(Region {
            host,
            len: PAYLOAD_PAGES * PAGE,
            kind: Kind::Payload,
        })
        .expect("a region");
    let iova = Table::base(pi);
    let entries = 32u64; // a 128 KiB list needs 31
    let mut pairs = Vec::new();
    let mut clients = Vec::new();
    for q in 0..cfg.pairs {
        let qid = q as u16 + 1;
        let mem = PairMemory::new(&arena, cfg.depth, entries).expect("pair memory");
        let (ph, plen) = mem.pool();
        let pool_region = table
            .insert(Region {
                host: ph,
                len: plen,
                kind: Kind::Pool(qid),
            })
            .expect("a region");
        let pool_iova = Table::base(pool_region);
        let [sq, cq, db, pool] = mem.parts();
        // One list that every 128 KiB read names (the relay only reads
        // it): the 31 pages after PRP1's.
        for k in 0..31 {
            // SAFETY: inside the pool (depth x 32 entries, 8 bytes each).
            unsafe {
                pool.cast::<u64>()
                    .add(k as usize)
                    .write(iova + (17 + k) * PAGE)
            };
        }
        let templates = templates(cfg.mix, nsid, iova, pool_iova);
        let lim = Limits {
            nsid,
            lba_shift: 9,
            window: Window {
                start: 0,
                blocks: 1 << 30,
            },
            max_transfer: 128 << 10,
            qid,
        };
        clients.push(Client {
            sq: sq.cast(),
            cq: cq.cast(),
            db: db.cast(),
            depth: cfg.depth,
            tail: 0,
            head: 0,
            phase: 1,
            outstanding: 0,
            next: 0,
            inflight: vec![None; cfg.depth as usize],
            free: (0..(cfg.depth - 1) as u16).rev().collect(),
            templates,
            completed: 0,
            rejected: 0,
            failures: 0,
        });
        pairs.push(Pair {
            relay: Relay::new(qid, cfg.depth),
            mem,
            limits: lim,
            counters: Counters::default(),
        });
    }
    let disk = ModelDisk::without_data(1 << 30, 512);
    let mut sub = ModelSubmit::new(disk, 4096);
    let mut dones = Vec::with_capacity(4096);
    let window = Duration::from_secs_f64(cfg.seconds);
    let (mut relay_ns, wall_ns, commands, rejected);
    if !cfg.cross {
        relay_ns = 0u64;
        let start = Instant::now();
        let c0: u64 = clients.iter().map(|c| c.completed).sum();
        while start.elapsed() < window {
            for (i, (p, c)) in pairs.iter_mut().zip(clients.iter_mut()).enumerate() {
                c.submit(true);
                let t0 = Instant::now();
                relay_pass(p, i as u32, &table, &mut sub, &mut dones);
                relay_ns += t0.elapsed().as_nanos() as u64;
                c.reap();
            }
        }
        wall_ns = start.elapsed().as_nanos() as u64;
        commands = clients.iter().map(|c| c.completed).sum::<u64>() - c0;
        rejected = clients.iter().map(|c| c.rejected).sum();
    } else {
        let stop = AtomicBool::new(false);
        let done_cmds = AtomicU64::new(0);
        let start = Instant::now();
        let moved = std::mem::take(&mut clients);
        clients = std::thread::scope(|s| {
            let (stop, done_cmds) = (&stop, &done_cmds);
            let cl = s.spawn(move || {
                let mut clients = moved;
                while !stop.load(Ordering::Relaxed) {
                    for c in clients.iter_mut() {
                        c.reap();
                        c.submit(true);
                    }
                }
                done_cmds.store(clients.iter().map(|c| c.completed).sum(), Ordering::Relaxed);
                clients
            });
            while start.elapsed() < window {
                for (i, p) in pairs.iter_mut().enumerate() {
                    relay_pass(p, i as u32, &table, &mut sub, &mut dones);
                }
            }
            stop.store(true, Ordering::Relaxed);
            cl.join().expect("client thread")
        });
        wall_ns = start.elapsed().as_nanos() as u64;
        relay_ns = wall_ns;
        commands = done_cmds.load(Ordering::Relaxed);
        rejected = clients.iter().map(|c| c.rejected).sum();
    }
    // Drain: no more submissions; everything outstanding must come back.
    let deadline = Instant::now() + Duration::from_secs(5);
    while clients.iter().any(|c| c.outstanding > 0) && Instant::now() < deadline {
        for (i, (p, c)) in pairs.iter_mut().zip(clients.iter_mut()).enumerate() {
            relay_pass(p, i as u32, &table, &mut sub, &mut dones);
            c.reap();
        }
    }
    let lost: u64 = clients.iter().map(|c| u64::from(c.outstanding)).sum();
    let failures: u64 = clients.iter().map(|c| c.failures).sum::<u64>() + lost;
    relay_ns = relay_ns.max(1);
    drop(payload);
    Outcome {
        config: cfg.clone(),
        mode: if cfg.cross { "cross" } else { "single" },
        commands,
        rejected,
        relay_ns,
        wall_ns,
        commands_per_second: commands as f64 * 1e9 / relay_ns as f64,
        ns_per_command: relay_ns as f64 / commands.max(1) as f64,
        check_failures: failures,
    }
}

/// One line per outcome.
pub fn describe(o: &Outcome) -> String {
    format!(
        "{:<6} {:<14} {:>3} pairs x {:>3}: {:>10} commands ({:>8} refused) {:>7.2} M/s per relay thread, {:>6.1} ns/command{}",
        o.mode,
        format!("{:?}", o.config.mix),
        o.config.pairs,
        o.config.depth,
        o.commands,
        o.rejected,
        o.commands_per_second / 1e6,
        o.ns_per_command,
        if o.ok() {
            String::new()
        } else {
            format!("  CHECK FAILURES: {}", o.check_failures)
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every configuration runs its checks (no time asserted): every
    /// completion had the right command ID and status, refused commands
    /// were refused, nothing was lost in the drain.
    #[test]
    fn every_mix_relays_checked_completions() {
        for mut c in standard(0.02) {
            let mut o = run(&c);
            // The cross mode needs both threads to run: on a loaded
            // machine a 20 ms window can pass with the client never
            // scheduled. A longer window then, not a pass with nothing
            // checked.
            while o.commands == 0 && c.seconds < 2.0 {
                c.seconds *= 4.0;
                o = run(&c);
            }
            assert!(o.ok(), "{}", describe(&o));
            assert!(o.commands > 0, "{}", describe(&o));
            if c.mix == Mix::Mixed {
                assert!(
                    o.rejected > 0 && o.rejected < o.commands,
                    "{}",
                    describe(&o)
                );
            } else {
                assert_eq!(o.rejected, 0, "{}", describe(&o));
            }
        }
    }
}
