//! (ABI 1.12, header §13) Graph forms: a graph sent in a form both sides
//! read faster than `.rlxmodel` text. The text is rlx-ir's interchange
//! form (any opset a plugin lists, any rlx release); writing and parsing
//! it goes through a tree of values per node and per constant byte, a few
//! microseconds a node, which was most of the compile of a graph of
//! thousands of small nodes. When the plugin reads this host's rlx-ir
//! release's own serialisation (`rlx_plugin_api::graph_forms`), a graph crosses in it.

use super::executable::PluginExecutable;
use super::plugin::LoadedPlugin;
use rlx_plugin_api::error::{PluginError, PluginResult};
use rlx_plugin_api::graph_forms::{encode, in_other_layout, this_rlx_ir_bincode};
use rlx_plugin_api::plugin::CompileOptions;
use rlx_plugin_api::strings::RlxStr;
use rlx_plugin_api::tables::RlxExecutable;
use std::sync::Arc;

/// A setting that makes every compile send `.rlxmodel` text: `text`.
pub const ENV_GRAPH_FORM: &str = "RLX_PLUGIN_GRAPH_FORM";

impl LoadedPlugin {
    /// The graph forms the plugin reads besides `.rlxmodel` text.
    pub fn graph_forms(&self) -> &[String] {
        &self.graph_form_names
    }

    /// Compile `graph`, bytes in `form` (one of [`Self::graph_forms`]; the
    /// plugin refuses another with `UNSUPPORTED`).
    pub fn compile_form(
        self: &Arc<Self>,
        form: &str,
        graph: &[u8],
        options: &CompileOptions,
    ) -> PluginResult<PluginExecutable> {
        let compile = self
            .graph_forms
            .as_ref()
            .and_then(|t| t.compile)
            .ok_or_else(|| {
                PluginError::unsupported(format!(
                    "plugin {} reads no graph form but .rlxmodel text (no ABI 1.12 graph_forms)",
                    self.descriptor.name
                ))
            })?;
        let opts = options.to_raw();
        let mut exe: *mut RlxExecutable = std::ptr::null_mut();
        // SAFETY: form, bytes and options are borrowed for the call; `exe` is a writable out-pointer.
        self.check(unsafe {
            compile(
                RlxStr::from_str(form),
                graph.as_ptr().cast(),
                graph.len(),
                &opts,
                &mut exe,
            )
        })?;
        PluginExecutable::adopt_compiled(self.clone(), exe)
    }

    /// Compile `graph` in the fastest form both sides read: this host's
    /// rlx-ir release's own serialisation when the plugin reads it, the
    /// graph fits it and [`ENV_GRAPH_FORM`] is not `text`; else
    /// `.rlxmodel` text. The two give the plugin the same graph.
    pub fn compile_graph(
        self: &Arc<Self>,
        graph: &rlx_ir::Graph,
        options: &CompileOptions,
    ) -> PluginResult<PluginExecutable> {
        let form = this_rlx_ir_bincode();
        let text_only = super::settings::host_value(ENV_GRAPH_FORM).as_deref() == Some("text");
        if !text_only && self.graph_forms().contains(&form) {
            // A graph the form cannot carry (a symbolic one) goes as text.
            if let Ok(bytes) = encode(graph) {
                return self.compile_form(&form, &bytes, options);
            }
        } else if !text_only {
            self.warn_of_other_layout(&form);
        }
        let text = rlx_ir::rlxmodel::to_text(graph).map_err(|e| {
            PluginError::invalid_argument(format!("cannot write the graph as .rlxmodel: {e}"))
        })?;
        self.compile_with(&text, options)
    }

    /// Say once, when the plugin reads this host's rlx-ir release in
    /// another layout (the two built from different rlx-ir sources under
    /// one version), that graphs go to it as text, and what differs.
    fn warn_of_other_layout(&self, ours: &str) {
        let Some(theirs) = in_other_layout(ours, self.graph_forms()) else {
            return;
        };
        if self
            .other_layout_warned
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            return;
        }
        log::warn!(
            "plugin {} reads {theirs:?}, this host writes {ours:?}: the same rlx-ir release \
             laid out otherwise (built from different rlx-ir sources under one version), \
             so graphs go to it as .rlxmodel text",
            self.descriptor.name
        );
    }
}
