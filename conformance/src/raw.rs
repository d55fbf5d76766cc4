//! Calling the plugin's root table directly, for the checks the safe
//! wrappers cannot express (null pointers, unknown modes, wrong slot
//! counts, raw status codes).

use super::{code_name, Outcome};
use rlx_plugin_api::tables::{RlxCompileOptions, RlxExecutable, RlxPluginApi};
use rlx_plugin_api::tensor::{ownership, RlxTensor};
use rlx_plugin_api::{HostTensor, RlxStatus, RlxStr};

/// Read and release a status: `None` for success, else its raw code and
/// message (the raw number, so a code this host does not know shows).
pub(crate) fn take_status(api: &RlxPluginApi, s: *mut RlxStatus) -> Option<(u32, String)> {
    if s.is_null() {
        return None;
    }
    // SAFETY: a non-null status from this plugin, released exactly once
    // here with the same plugin's status_free; every function is present
    // (the loader checked the required ones).
    unsafe {
        let code = (api.status_code.unwrap())(s);
        let message = (api.status_message.unwrap())(s).to_string_lossy();
        (api.status_free.unwrap())(s);
        Some((code, message))
    }
}

/// The raw call must have failed with `want`.
pub(crate) fn expect_status(api: &RlxPluginApi, s: *mut RlxStatus, want: u32) -> Outcome {
    match take_status(api, s) {
        None => Outcome::Fail(format!("the call succeeded; expected {}", code_name(want))),
        Some((code, _)) if code == want => Outcome::Ok,
        Some((code, msg)) => Outcome::Fail(format!(
            "returned {} ({msg}); expected {}",
            code_name(code),
            code_name(want)
        )),
    }
}

/// An executable made through the raw `compile`, destroyed on drop.
pub(crate) struct RawExe<'a> {
    pub api: &'a RlxPluginApi,
    pub exe: *mut RlxExecutable,
}

impl<'a> RawExe<'a> {
    /// Compile `text` with `options` (null = defaults).
    pub fn compile(
        api: &'a RlxPluginApi,
        text: &str,
        options: *const RlxCompileOptions,
    ) -> Result<RawExe<'a>, String> {
        let mut exe: *mut RlxExecutable = std::ptr::null_mut();
        // SAFETY: text and options are borrowed for the call; `exe` is our slot.
        let s = unsafe { (api.compile.unwrap())(RlxStr::from_str(text), options, &mut exe) };
        if let Some((code, msg)) = take_status(api, s) {
            return Err(format!("compile returned {}: {msg}", code_name(code)));
        }
        if exe.is_null() {
            return Err("compile succeeded but wrote no executable".into());
        }
        Ok(RawExe { api, exe })
    }

    /// Bind a param (the plugin copies it).
    pub fn bind(&self, name: &str, t: &HostTensor) -> Result<(), String> {
        let view = t.as_raw(ownership::BORROWED);
        // SAFETY: a live executable; the view borrows `t` for the call.
        let s = unsafe {
            (self.api.executable_bind_param.unwrap())(self.exe, RlxStr::from_str(name), &view.raw)
        };
        match take_status(self.api, s) {
            None => Ok(()),
            Some((code, msg)) => Err(format!("binding {name:?}: {}: {msg}", code_name(code))),
        }
    }

    /// Run with `inputs` into `n_slots` fresh slots; returns the status
    /// and the slots as the plugin left them.
    pub fn run(
        &self,
        inputs: &[(&str, &HostTensor)],
        n_slots: usize,
    ) -> (Option<(u32, String)>, Vec<RlxTensor>) {
        // Keep the views alive: the descriptors point into them.
        let borrowed = rlx_plugin_api::tensor::borrow_named(inputs);
        let named = &borrowed.named;
        let mut slots = vec![RlxTensor::empty(); n_slots];
        // SAFETY: a live executable; inputs borrowed for the call; slots ours.
        let s = unsafe {
            (self.api.executable_run.unwrap())(
                self.exe,
                named.as_ptr(),
                named.len(),
                slots.as_mut_ptr(),
                slots.len(),
            )
        };
        (take_status(self.api, s), slots)
    }
}

impl Drop for RawExe<'_> {
    fn drop(&mut self) {
        // SAFETY: our executable, destroyed once.
        unsafe { (self.api.executable_destroy.unwrap())(self.exe) };
    }
}

/// Release every slot a call filled (OWNED ones through their deleter)
/// and say how many were filled: a failed call must have filled none.
pub(crate) fn release_slots(slots: Vec<RlxTensor>) -> usize {
    let mut filled = 0;
    for s in slots {
        if s.ownership == ownership::OWNED || !s.dl.data.is_null() {
            filled += 1;
        }
        // SAFETY: each slot is either untouched (borrowed, a no-op) or an
        // OWNED tensor the plugin handed us, released once here.
        unsafe { rlx_plugin_api::tensor::release(s) };
    }
    filled
}
