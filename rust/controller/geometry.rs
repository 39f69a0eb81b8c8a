// SPDX-License-Identifier: GPL-2.0-only

//! Namespace geometry as the validator sees it now: one word per namespace
//! of `Info::ns` (same index), so a relay reads a size and a format that
//! belong together with one load, and a namespace change (an event, a
//! restart, a node's open) updates it while pairs run.
//!
//! A namespace is `Usable` (its LBA size and capacity), `Changing` (an
//! event said it changed and it has not been identified again: commands
//! complete with Namespace Not Ready) or `Refused` (detached, deleted, or a
//! format the module does not carry: Invalid Namespace or Format).

use kernel::sync::atomic::{Acquire, Atomic, Release};

use crate::uapi::{self, MAX_NS};

/// What a namespace is now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NsState {
    Usable { lba_shift: u32, capacity: u64 },
    Changing,
    Refused,
}

const CHANGING: u64 = 1 << 62;
const REFUSED: u64 = 1 << 63;
/// Capacity in bits 55:0, the LBA size's log2 minus 9 in bits 59:56.
const CAPACITY_BITS: u32 = 56;
const CAPACITY_MASK: u64 = (1 << CAPACITY_BITS) - 1;

fn encode(s: NsState) -> u64 {
    match s {
        NsState::Usable {
            lba_shift,
            capacity,
        } if (9..=16).contains(&lba_shift) && capacity <= CAPACITY_MASK => {
            (u64::from(lba_shift - 9) << CAPACITY_BITS) | capacity
        }
        // A size that does not fit is one the module cannot check.
        NsState::Usable { .. } | NsState::Refused => REFUSED,
        NsState::Changing => CHANGING,
    }
}

fn decode(w: u64) -> NsState {
    if w & REFUSED != 0 {
        NsState::Refused
    } else if w & CHANGING != 0 {
        NsState::Changing
    } else {
        NsState::Usable {
            lba_shift: ((w >> CAPACITY_BITS) & 0xf) as u32 + 9,
            capacity: w & CAPACITY_MASK,
        }
    }
}

/// The state of an identified namespace (`None`: inactive or unusable).
pub(crate) fn state_of(ns: Option<&crate::controller::identify::Namespace>) -> NsState {
    match ns {
        Some(n) => NsState::Usable {
            lba_shift: n.lba_size.trailing_zeros(),
            capacity: n.capacity_lbas,
        },
        None => NsState::Refused,
    }
}

pub(crate) struct Geometry {
    words: [Atomic<u64>; MAX_NS],
}

impl Geometry {
    /// The namespaces as identified at bind.
    pub(crate) fn new(info: &uapi::Info) -> Self {
        let g = Self {
            words: [const { Atomic::new(REFUSED) }; MAX_NS],
        };
        for (i, n) in info.ns[..info.num_namespaces as usize].iter().enumerate() {
            g.set(
                i,
                NsState::Usable {
                    lba_shift: n.lba_size.trailing_zeros(),
                    capacity: n.capacity_lbas,
                },
            );
        }
        g
    }

    pub(crate) fn get(&self, index: usize) -> NsState {
        self.words
            .get(index)
            .map_or(NsState::Refused, |w| decode(w.load(Acquire)))
    }

    /// Set namespace `index`; returns what it was.
    pub(crate) fn set(&self, index: usize, s: NsState) -> NsState {
        match self.words.get(index) {
            Some(w) => decode(w.xchg(encode(s), Release)),
            None => NsState::Refused,
        }
    }

    /// `info` with each namespace's current size and format (0 and 0 while
    /// it is changing or refused), for GET_INFO.
    pub(crate) fn report(&self, info: &mut uapi::Info) {
        for (i, n) in info.ns[..info.num_namespaces as usize]
            .iter_mut()
            .enumerate()
        {
            match self.get(i) {
                NsState::Usable {
                    lba_shift,
                    capacity,
                } => {
                    n.lba_size = 1 << lba_shift;
                    n.capacity_lbas = capacity;
                }
                NsState::Changing | NsState::Refused => {
                    n.lba_size = 0;
                    n.capacity_lbas = 0;
                }
            }
        }
    }
}

#[kernel::prelude::kunit_tests(gpunvme_geometry)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip() {
        for s in [
            NsState::Usable {
                lba_shift: 9,
                capacity: 131072,
            },
            NsState::Usable {
                lba_shift: 16,
                capacity: CAPACITY_MASK,
            },
            NsState::Changing,
            NsState::Refused,
        ] {
            assert_eq!(decode(encode(s)), s);
        }
        // What the word cannot hold is refused, never truncated.
        let big = NsState::Usable {
            lba_shift: 12,
            capacity: CAPACITY_MASK + 1,
        };
        assert_eq!(decode(encode(big)), NsState::Refused);
        let odd = NsState::Usable {
            lba_shift: 8,
            capacity: 10,
        };
        assert_eq!(decode(encode(odd)), NsState::Refused);
    }

    #[test]
    fn set_report_and_bounds() {
        let mut info = uapi::Info {
            num_namespaces: 1,
            ..Default::default()
        };
        info.ns[0] = uapi::NsInfo {
            nsid: 1,
            lba_size: 512,
            capacity_lbas: 1000,
        };
        let g = Geometry::new(&info);
        assert_eq!(
            g.get(0),
            NsState::Usable {
                lba_shift: 9,
                capacity: 1000
            }
        );
        assert_eq!(g.get(1), NsState::Refused);
        assert_eq!(g.get(MAX_NS), NsState::Refused);
        g.set(0, NsState::Changing);
        let mut out = info;
        g.report(&mut out);
        assert_eq!((out.ns[0].lba_size, out.ns[0].capacity_lbas), (0, 0));
        g.set(
            0,
            NsState::Usable {
                lba_shift: 12,
                capacity: 125,
            },
        );
        g.report(&mut out);
        assert_eq!((out.ns[0].lba_size, out.ns[0].capacity_lbas), (4096, 125));
    }
}
