//! Header §13: graph forms: a compile from a form other than text.

use super::args::slice_or_empty;
use super::executable::compile_into;
use super::status::guard;
use crate::error::{PluginError, RlxStatus};
use crate::sized::AbiStruct;
use crate::strings::{leak_str, RlxStr};
use crate::tables::{RlxCompileOptions, RlxExecutable, RlxGraphFormApi};
use std::ffi::c_void;
use std::sync::OnceLock;

/// The names `table` published, which `compile_form` accepts.
static PUBLISHED: OnceLock<Vec<String>> = OnceLock::new();

/// The table published for the forms the plugin reads (null: text only).
/// Made once, at the handshake, and kept for the rest of the process.
pub(super) fn table(forms: Vec<String>) -> *const RlxGraphFormApi {
    if forms.is_empty() {
        return std::ptr::null();
    }
    let _ = PUBLISHED.set(forms.clone());
    let names: &'static [RlxStr] = Box::leak(forms.into_iter().map(leak_str).collect());
    Box::leak(Box::new(RlxGraphFormApi {
        struct_size: RlxGraphFormApi::STRUCT_SIZE,
        forms: names.as_ptr(),
        n_forms: names.len(),
        compile: Some(compile_form),
    }))
}

unsafe extern "C" fn compile_form(
    form: RlxStr,
    data: *const c_void,
    len: usize,
    options: *const RlxCompileOptions,
    out: *mut *mut RlxExecutable,
) -> *mut RlxStatus {
    guard(|| {
        compile_into(options, out, |plugin, opts| {
            let form = form
                .to_str()
                .map_err(|e| PluginError::invalid_argument(format!("form is not UTF-8: {e}")))?;
            let published = PUBLISHED.get().map(Vec::as_slice).unwrap_or_default();
            if !published.iter().any(|f| f == form) {
                // Only a plugin that reads graph forms knows their names.
                #[cfg(feature = "graph-forms")]
                let why = match crate::graph_forms::in_other_layout(form, published) {
                    Some(ours) => format!(
                        ": it reads {ours:?}, the same form laid out otherwise (host and plugin \
                         built from different rlx-ir sources under one version); send \
                         .rlxmodel text"
                    ),
                    None => String::new(),
                };
                #[cfg(not(feature = "graph-forms"))]
                let why = "";
                return Err(PluginError::unsupported(format!(
                    "plugin {} reads no graph form {form:?}{why}",
                    plugin.descriptor().name
                )));
            }
            let bytes = slice_or_empty(data.cast::<u8>(), len, "data")?;
            plugin.compile_form(form, bytes, opts)
        })
    })
}
