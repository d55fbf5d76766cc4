//! A program's view of where each compile for a plugin device went:
//! [`set_compile_observer`] is called with every plan the adapter makes
//! (the plugin took the graph whole, or it runs split with the CPU
//! backend), on the compiling thread. Test harnesses use it to say, test
//! by test, whether a graph reached the plugin; nothing else reads it.

use crate::partition::Plan;
use rlx_runtime::Device;
use std::sync::RwLock;

/// Called with the device compiled for and the plan of each compile.
pub type CompileObserver = fn(Device, &Plan);

static OBSERVER: RwLock<Option<CompileObserver>> = RwLock::new(None);

/// Set (or, with `None`, clear) the process's compile observer.
pub fn set_compile_observer(observer: Option<CompileObserver>) {
    *OBSERVER.write().unwrap_or_else(|e| e.into_inner()) = observer;
}

/// Tell the observer, if one is set, about `plan`.
pub(super) fn compiled(device: Device, plan: &Plan) {
    let f = *OBSERVER.read().unwrap_or_else(|e| e.into_inner());
    if let Some(f) = f {
        f(device, plan);
    }
}
