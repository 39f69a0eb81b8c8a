// SPDX-License-Identifier: GPL-2.0-only

//! Namespace changes while files are served. Three things identify a
//! namespace again and update the geometry the validator reads: the
//! Asynchronous Event the admin queue keeps requested (Namespace Attribute
//! Changed, with the Changed Namespace List), every shared CREATE_QPAIR
//! (for the namespaces its pair may address), and every restart
//! (`Shared::identify_again`). A namespace node's open is refused while its
//! namespace is.
//!
//! While a namespace is identified again its commands complete with
//! Namespace Not Ready; one that is detached, deleted or in a format the
//! module does not carry is refused (Invalid Namespace or Format, and its
//! node's open fails with ENXIO) until it is usable again. A command the
//! relay passed before the event was taken was checked against the old
//! format (see "Known gaps" in rust/README.md for that window).

use kernel::{
    device::{Bound, Device},
    dma::Coherent,
    io::Io,
    prelude::*,
    sync::atomic::Acquire,
};

use super::{Shared, UP};
use crate::controller::admin::AdminQueue;
use crate::controller::geometry::{state_of, NsState};
use crate::controller::identify::{self, IDENTIFY_LEN};
use crate::controller::regs::Cap;
use crate::queues::command::{self, log_page, Sqe};

/// Asynchronous event type Notice, information Namespace Attribute Changed.
const NOTICE: u32 = 2;
const NS_ATTR_CHANGED: u32 = 0;
/// A Changed Namespace List that starts with this lists more than it holds.
const MORE_THAN_LISTED: u32 = 0xffff_ffff;

type Ring<'a> = &'a dyn Fn(usize, u32) -> Result;

/// Run a command that writes one 4 KiB page (`sqe` given its address) and
/// return a copy of the page. A command that got no completion may still
/// write the page, so its buffer is never freed.
fn read_page(
    dev: &Device<Bound>,
    admin: &mut AdminQueue,
    cap: Cap,
    ring: Ring<'_>,
    sqe: impl FnOnce(u64) -> Sqe,
) -> Result<KBox<[u8; IDENTIFY_LEN]>> {
    let buf: Coherent<[u8]> = Coherent::zeroed_slice(dev, IDENTIFY_LEN, GFP_KERNEL)?;
    if let Err(e) = admin.submit(dev, cap, sqe(buf.dma_address()), ring) {
        if e == ETIMEDOUT {
            core::mem::forget(buf);
        }
        return Err(e);
    }
    let mut out = KBox::new([0u8; IDENTIFY_LEN], GFP_KERNEL)?;
    // SAFETY: the command completed, so the controller is done writing
    // `buf`, and nothing else touches it.
    out.copy_from_slice(unsafe { buf.as_ref() });
    Ok(out)
}

/// Is `nsid` in a Changed Namespace List (ascending, zero-terminated)?
pub(crate) fn listed(log: &[u8], nsid: u32) -> bool {
    let first = identify::active_nsids(log).next();
    first == Some(MORE_THAN_LISTED) || identify::active_nsids(log).any(|id| id == nsid)
}

/// One line for a namespace whose state moved from `was` to `now`.
fn log_change(dev: &Device, nsid: u32, was: NsState, now: NsState) {
    match (was, now) {
        _ if was == now => {}
        (
            _,
            NsState::Usable {
                lba_shift,
                capacity,
            },
        ) => dev_info!(
            dev,
            "namespace {}: {} blocks of {} B now; the validator and GET_INFO use them\n",
            nsid,
            capacity,
            1u32 << lba_shift
        ),
        (_, NsState::Refused) => dev_warn!(
            dev,
            "namespace {} is detached, deleted or in a format the module does not carry (metadata, LBA size outside 512 B..64 KiB): its commands are refused, its node's open fails with ENXIO\n",
            nsid
        ),
        (_, NsState::Changing) => {}
    }
}

impl Shared {
    /// The doorbell writer every admin command here uses (`with_admin`'s).
    pub(super) fn ring_admin(&self, offset: usize, value: u32) -> Result {
        if offset == self.cap.sq_doorbell(0) && self.drop_admin_doorbell() {
            return Ok(());
        }
        let bar = self.bar.try_access().ok_or(ENODEV)?;
        bar.try_write32(value, offset)
    }

    /// A doorbell write the drop_admin_doorbells knob does not take: the
    /// knob is for the commands a test issues, not for the event request
    /// or the identification that run beside them.
    fn ring_always(&self, offset: usize, value: u32) -> Result {
        let bar = self.bar.try_access().ok_or(ENODEV)?;
        bar.try_write32(value, offset)
    }

    /// The watch, every tick while the controller serves files: act on the
    /// event that completed, if any, and keep one requested.
    pub(crate) fn watch_events(&self) {
        let mut guard = self.admin.lock();
        if self.state.load(Acquire) != UP {
            return;
        }
        let Some(admin) = Option::as_mut(&mut *guard) else {
            return;
        };
        // SAFETY: as in `with_admin`: unbind sets GONE, then takes the
        // admin lock before the device can become unbound; we hold the lock
        // and saw the state UP.
        let dev = unsafe { self.dev.as_bound() };
        let ring = |offset: usize, value: u32| self.ring_admin(offset, value);
        match admin.take_event(dev, self.cap, &ring) {
            Ok(Some(result)) => self.on_event(dev, admin, &ring, result),
            Ok(None) => {}
            Err(_) => return,
        }
        // Failing to ask is not fatal: restarts and CREATE_QPAIR still
        // identify.
        let always = |offset: usize, value: u32| self.ring_always(offset, value);
        let _ = admin.arm_event(self.cap, &always);
    }

    fn on_event(&self, dev: &Device<Bound>, admin: &mut AdminQueue, ring: Ring<'_>, result: u32) {
        let (kind, info, lid) = (result & 0x7, (result >> 8) & 0xff, (result >> 16) as u8);
        if kind != NOTICE || info != NS_ATTR_CHANGED {
            dev_info!(
                self.dev,
                "asynchronous event: type {} information {:#x} (log page {:#x})\n",
                kind,
                info,
                lid
            );
            // Reading the log page clears the event, so the next one of
            // its type is reported.
            let _ = read_page(dev, admin, self.cap, ring, |b| {
                command::get_log_page(lid, IDENTIFY_LEN as u32, b)
            });
            return;
        }
        // Reading the list clears the event; unreadable, all are suspect.
        let log = read_page(dev, admin, self.cap, ring, |b| {
            command::get_log_page(log_page::CHANGED_NAMESPACES, IDENTIFY_LEN as u32, b)
        });
        let count = self.info.num_namespaces as usize;
        for index in 0..count {
            let nsid = self.info.ns[index].nsid;
            if log.as_ref().map_or(true, |l| listed(&l[..], nsid)) {
                self.identify_namespace(dev, admin, ring, index, true);
            }
        }
    }

    /// Identify namespace `index` (of `info.ns`) again and put what it is
    /// now in the geometry. When an event said it `changed`, its commands
    /// get Namespace Not Ready meanwhile (otherwise they go on: another
    /// file's CREATE_QPAIR must not stall them). One that cannot be
    /// identified is refused until it can be.
    fn identify_namespace(
        &self,
        dev: &Device<Bound>,
        admin: &mut AdminQueue,
        ring: Ring<'_>,
        index: usize,
        changed: bool,
    ) -> NsState {
        let nsid = self.info.ns[index].nsid;
        let was = if changed {
            self.geometry.set(index, NsState::Changing)
        } else {
            self.geometry.get(index)
        };
        let now = match read_page(dev, admin, self.cap, ring, |b| {
            command::identify(command::cns::NAMESPACE, nsid, b)
        }) {
            Ok(data) => state_of(identify::namespace(&data[..]).as_ref()),
            Err(_) => NsState::Refused,
        };
        self.geometry.set(index, now);
        log_change(&self.dev, nsid, was, now);
        now
    }

    /// A shared CREATE_QPAIR of a file of `epoch` on node `node_nsid` (0:
    /// the controller node): identify the namespaces its pair may address
    /// again. ENXIO (and a log line) when a namespace node's namespace is
    /// not usable now; on the controller node such a namespace's commands
    /// are refused instead.
    pub(crate) fn refresh_namespaces(&self, epoch: u64, node_nsid: u32) -> Result {
        let count = self.info.num_namespaces as usize;
        self.with_admin(epoch, |dev, admin, _| {
            let ring = |offset: usize, value: u32| self.ring_always(offset, value);
            for index in 0..count {
                let nsid = self.info.ns[index].nsid;
                if node_nsid != 0 && nsid != node_nsid {
                    continue;
                }
                let now = self.identify_namespace(dev, admin, &ring, index, false);
                if node_nsid != 0 && !matches!(now, NsState::Usable { .. }) {
                    dev_warn!(
                        self.dev,
                        "CREATE_QPAIR: namespace {} is not usable now\n",
                        nsid
                    );
                    return Err(ENXIO);
                }
            }
            Ok(())
        })
    }

    /// Can namespace `nsid`'s node be opened? Not while it is refused (a
    /// log line); what it is now is asked at CREATE_QPAIR, not here, where
    /// misc_open() holds the misc lock of every misc device.
    pub(crate) fn namespace_usable(&self, nsid: u32) -> Result {
        let count = self.info.num_namespaces as usize;
        let index = self.info.ns[..count]
            .iter()
            .position(|n| n.nsid == nsid)
            .ok_or(ENXIO)?;
        if self.geometry.get(index) == NsState::Refused {
            dev_warn!(
                self.dev,
                "open of namespace {}'s node refused: it is detached, deleted or in a format the module does not carry\n",
                nsid
            );
            return Err(ENXIO);
        }
        Ok(())
    }

    /// After a restart: each namespace of bind as it is in `now`.
    pub(crate) fn apply_identified(&self, now: &crate::uapi::Info) {
        let count = self.info.num_namespaces as usize;
        for (index, n) in self.info.ns[..count].iter().enumerate() {
            let state = identify::state_in(now, n.nsid);
            let was = self.geometry.set(index, state);
            log_change(&self.dev, n.nsid, was, state);
        }
        for n in &now.ns[..now.num_namespaces as usize] {
            if !self.info.ns[..count].iter().any(|b| b.nsid == n.nsid) {
                dev_info!(
                    self.dev,
                    "namespace {} appeared since bind; rebind to serve it\n",
                    n.nsid
                );
            }
        }
    }
}

#[kernel::prelude::kunit_tests(gpunvme_ns_change)]
mod tests {
    use super::*;

    #[test]
    fn changed_namespace_list() {
        let mut log = [0u8; IDENTIFY_LEN];
        assert!(!listed(&log, 1));
        log[0..4].copy_from_slice(&2u32.to_le_bytes());
        log[4..8].copy_from_slice(&5u32.to_le_bytes());
        assert!(listed(&log, 2) && listed(&log, 5));
        assert!(!listed(&log, 1) && !listed(&log, 3));
        // More changed than the list holds: every namespace.
        log[0..4].copy_from_slice(&MORE_THAN_LISTED.to_le_bytes());
        assert!(listed(&log, 1) && listed(&log, 77));
    }
}
