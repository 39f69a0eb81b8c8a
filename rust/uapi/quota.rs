// SPDX-License-Identifier: GPL-2.0-only

//! Per-file quotas: what one shared-mode file may hold, so that it always
//! leaves room for other tenants of the controller. The limits are module
//! parameters (`rust/uapi/quota.c`, in sysfs); GET_INFO reports those that
//! apply to the caller. An owner is exempt: it has the controller to itself.

use kernel::prelude::*;

extern "C" {
    fn gpunvme_quota_qpairs() -> u32;
    fn gpunvme_quota_maps() -> u32;
    fn gpunvme_quota_exports() -> u32;
}

/// What a quota limits, for its log line.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    /// Queue IDs one file holds (`max_qpairs_per_file`).
    Qpairs,
    /// MAP_HOST and MAP_DMABUF buffers of one file (`max_maps_per_file`).
    Maps,
    /// EXPORTs of one queue pair (`max_exports_per_qpair`).
    Exports,
}

impl Kind {
    /// The limit in force now; 0 is none.
    pub(crate) fn limit(self) -> u32 {
        // SAFETY: the getters only read a module parameter (READ_ONCE).
        unsafe {
            match self {
                Kind::Qpairs => gpunvme_quota_qpairs(),
                Kind::Maps => gpunvme_quota_maps(),
                Kind::Exports => gpunvme_quota_exports(),
            }
        }
    }

    fn param(self) -> &'static str {
        match self {
            Kind::Qpairs => "max_qpairs_per_file",
            Kind::Maps => "max_maps_per_file",
            Kind::Exports => "max_exports_per_qpair",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Kind::Qpairs => "queue pairs this file holds",
            Kind::Maps => "buffers this file has mapped",
            Kind::Exports => "exports of this queue pair",
        }
    }
}

/// EDQUOT, and a log line naming the parameter, if one more of `kind`
/// than the `held` ones would pass its limit.
pub(crate) fn check(dev: &kernel::device::Device, call: &str, kind: Kind, held: usize) -> Result {
    if exceeds(kind.limit(), held) {
        dev_warn!(
            dev,
            "{}: {} {} already, the limit (module parameter {}; owners are exempt)\n",
            call,
            held,
            kind.what(),
            kind.param()
        );
        return Err(EDQUOT);
    }
    Ok(())
}

/// Would one more than `held` pass `limit` (0: no limit)?
fn exceeds(limit: u32, held: usize) -> bool {
    limit != 0 && held >= limit as usize
}

#[kernel::prelude::kunit_tests(gpunvme_quota)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        assert!(!exceeds(0, usize::MAX));
        assert!(!exceeds(8, 7));
        assert!(exceeds(8, 8));
        assert!(exceeds(1, 5));
    }
}
