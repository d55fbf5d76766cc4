//! Header §10: clones and shared params.

use super::args::non_null_mut;
use super::handle::{self, enter};
use super::status::guard;
use crate::error::{PluginError, RlxStatus};
use crate::plugin::Offers;
use crate::sized::AbiStruct;
use crate::tables::*;

/// The table published for what the plugin offers (null: nothing shared).
pub(super) fn table(offers: &Offers) -> *const RlxSharingApi {
    static TABLES: [RlxSharingApi; 4] = [
        api(false, false),
        api(true, false),
        api(false, true),
        api(true, true),
    ];
    match (offers.clone, offers.share_params) {
        (false, false) => std::ptr::null(),
        (c, s) => &TABLES[c as usize + 2 * s as usize],
    }
}

const fn api(clone: bool, share: bool) -> RlxSharingApi {
    RlxSharingApi {
        struct_size: RlxSharingApi::STRUCT_SIZE,
        clone: if clone { Some(executable_clone) } else { None },
        share_params: if share {
            Some(executable_share_params)
        } else {
            None
        },
    }
}

unsafe extern "C" fn executable_clone(
    exe: *const RlxExecutable,
    out: *mut *mut RlxExecutable,
) -> *mut RlxStatus {
    guard(|| {
        let out = non_null_mut(out, "out")?;
        *out = std::ptr::null_mut();
        let mut src = enter(exe, "executable_clone")?;
        let device = src.owner.device.clone();
        let copy = src.exe().clone_executable()?;
        *out = handle::adopt(copy, device);
        Ok(())
    })
}

unsafe extern "C" fn executable_share_params(
    dst: *mut RlxExecutable,
    src: *const RlxExecutable,
    n_shared: *mut usize,
) -> *mut RlxStatus {
    guard(|| {
        if std::ptr::eq(dst as *const RlxExecutable, src) {
            return Err(PluginError::invalid_argument(
                "share_params: dst and src are the same executable",
            ));
        }
        let mut to = enter(dst, "share_params (dst)")?;
        let mut from = enter(src, "share_params (src)")?;
        if to.owner.device != from.owner.device {
            let label = |d: &Option<crate::plugin::DeviceInfo>| {
                d.as_ref().map_or("an unnamed device".into(), |d| d.label())
            };
            return Err(PluginError::invalid_argument(format!(
                "share_params: src runs on {} and dst on {}; params are shared on one device",
                label(&from.owner.device),
                label(&to.owner.device)
            )));
        }
        let n = to.exe().share_params_from(from.exe())?;
        if let Some(out) = n_shared.as_mut() {
            *out = n;
        }
        Ok(())
    })
}
