//! Header §11: submitted runs.

use super::handle::enter;
use super::run::{hand_over, named_views, run_into_slots};
use super::status::guard;
use crate::error::RlxStatus;
use crate::plugin::Offers;
use crate::sized::AbiStruct;
use crate::tables::*;
use crate::tensor::{RlxNamedTensor, RlxTensor};

/// The table published for what the plugin offers (null: runs are
/// synchronous only).
pub(super) fn table(offers: &Offers) -> *const RlxSubmitApi {
    static API: RlxSubmitApi = RlxSubmitApi {
        struct_size: RlxSubmitApi::STRUCT_SIZE,
        submit: Some(executable_submit),
        wait: Some(executable_wait),
    };
    if offers.submit {
        &API
    } else {
        std::ptr::null()
    }
}

unsafe extern "C" fn executable_submit(
    exe: *mut RlxExecutable,
    inputs: *const RlxNamedTensor,
    n_inputs: usize,
) -> *mut RlxStatus {
    guard(|| {
        let mut exe = enter(exe, "submit")?;
        let views = named_views(inputs, n_inputs)?;
        exe.exe().submit(&views)
    })
}

unsafe extern "C" fn executable_wait(
    exe: *mut RlxExecutable,
    outputs: *mut RlxTensor,
    n_outputs: usize,
) -> *mut RlxStatus {
    guard(|| {
        let mut exe = enter(exe, "wait")?;
        // No inputs to overlap: the run's were read when it was submitted.
        let mut slots = run_into_slots(outputs, n_outputs, &[])?;
        exe.exe().wait(&mut slots)?;
        hand_over(slots, outputs)
    })
}
