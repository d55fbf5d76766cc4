//! A graph as a compile receives it: `.rlxmodel` text, or the bytes of a faster
//! form (`rlx_plugin_api::graph_forms`). Either way the plugin reads the same
//! graph; this says which form it came in, so that a kernel builder process can
//! be handed it as it was.

use rlx_ir::Graph;
use rlx_plugin_api::graph_forms::{decode, this_rlx_ir_bincode};
use rlx_plugin_api::{PluginError, PluginResult};

/// The forms this plugin reads besides text: its own rlx-ir release's.
pub fn forms() -> Vec<String> {
    vec![this_rlx_ir_bincode()]
}

#[derive(Clone, Copy)]
pub enum GraphSource<'a> {
    Text(&'a str),
    /// [`forms`]'s form (the ABI glue has checked the name).
    RlxIrBincode(&'a [u8]),
}

/// The name a kernel builder is told for text.
const TEXT: &str = "text";

impl<'a> GraphSource<'a> {
    /// The source from a form's name and its bytes: `text` or one of
    /// [`forms`].
    pub fn from_form(form: &str, bytes: &'a [u8]) -> PluginResult<GraphSource<'a>> {
        if form == TEXT {
            return std::str::from_utf8(bytes)
                .map(GraphSource::Text)
                .map_err(|e| {
                    PluginError::invalid_argument(format!("graph text is not UTF-8: {e}"))
                });
        }
        if forms().iter().any(|f| f == form) {
            return Ok(GraphSource::RlxIrBincode(bytes));
        }
        Err(PluginError::unsupported(format!(
            "the MLX plugin reads no graph form {form:?}"
        )))
    }

    /// The form's name, as [`GraphSource::from_form`] takes it.
    pub fn form(&self) -> String {
        match self {
            GraphSource::Text(_) => TEXT.into(),
            GraphSource::RlxIrBincode(_) => this_rlx_ir_bincode(),
        }
    }

    pub fn bytes(&self) -> &'a [u8] {
        match self {
            GraphSource::Text(t) => t.as_bytes(),
            GraphSource::RlxIrBincode(b) => b,
        }
    }

    /// The graph, unchecked (`graph_check` checks it).
    pub fn read(&self) -> PluginResult<Graph> {
        match self {
            GraphSource::Text(t) => crate::graph_text::read_graph(t),
            GraphSource::RlxIrBincode(b) => decode(b)
                .map_err(|e| PluginError::invalid_argument(format!("cannot read the graph: {e}"))),
        }
    }
}
