// SPDX-License-Identifier: GPL-2.0-only

//! CLAIM_OWNER: raw access for one file. Who may hold what is decided in
//! `controller/shared/tenancy.rs`; this checks the caller and its node.

use kernel::prelude::*;

use super::OpenState;
use crate::shim;
use crate::uapi::{self, owner};

impl OpenState {
    pub(crate) fn claim_owner(&self, arg: usize) -> Result<isize> {
        let (mut req, mut writer) = read_arg!(self, uapi::Owner, arg, "CLAIM_OWNER");
        let sh = &self.shared;
        if req.flags != 0 {
            dev_warn!(sh.dev, "CLAIM_OWNER: unknown flags {:#x}\n", req.flags);
            return Err(EINVAL);
        }
        self.alive()?;
        owner::may_own(
            &sh.dev,
            self.node_nsid,
            crate::allow_unsafe_no_iommu(),
            true,
        )?;
        // Under the admin lock, as every MAP_* is: an owner's raw SQEs could
        // name any buffer mapped for the device, so no other file may have one.
        sh.with_admin(self.epoch, |_, _, _| {
            if sh.dma.lock().maps.iter().any(|m| m.file != self.id) {
                dev_warn!(
                    sh.dev,
                    "CLAIM_OWNER: another file has buffers mapped for the controller\n"
                );
                return Err(EBUSY);
            }
            sh.claim_owner(self.id)
        })?;
        req.iommu_mode = shim::iommu_mode(&sh.dev);
        dev_info!(
            sh.dev,
            "a file now owns the controller (raw access; IOMMU {})\n",
            owner::iommu_name(req.iommu_mode)
        );
        writer.write(&req)?;
        Ok(0)
    }

    /// EBUSY (and a log line) while another file owns the controller, or
    /// it waits for its reset after an owner.
    pub(super) fn not_owned_by_another(&self, what: &str) -> Result {
        self.shared.not_owned_by_another(self.id, what)
    }
}
