// SPDX-License-Identifier: GPL-2.0-only

//! GET_INFO: what the controller is, and what this file may do with it.

use kernel::prelude::*;

use super::OpenState;
use crate::bridge::validate;
use crate::shim;
use crate::uapi::{self, owner, quota};

impl OpenState {
    pub(crate) fn get_info(&self, arg: usize) -> Result<isize> {
        let (req, mut writer) = read_arg!(self, uapi::Info, arg, "GET_INFO");
        let sh = &self.shared;
        self.alive()?;
        let mut out = sh.info;
        sh.geometry.report(&mut out);
        out.size = req.size;
        out.version = req.version;
        out.iommu_mode = shim::iommu_mode(&sh.dev);
        let owner = sh.owner();
        if owner == 0 || owner == self.id {
            out.modes |= uapi::MODE_SHARED;
            if owner::may_own(
                &sh.dev,
                self.node_nsid,
                crate::allow_unsafe_no_iommu(),
                false,
            )
            .is_ok()
            {
                out.modes |= uapi::MODE_OWNER;
            }
        }
        out.shared_max_transfer = validate::shared_max_transfer(sh.info.mdts_bytes);
        out.node_nsid = self.node_nsid;
        if owner != self.id {
            out.quota_qpairs = quota::Kind::Qpairs.limit();
            out.quota_maps = quota::Kind::Maps.limit();
        }
        writer.write(&out)?;
        Ok(0)
    }
}
