//! How a host finds plugin libraries, checks them (ownership, the
//! libraries they need, ABI version and layouts), loads them and uses them
//! through safe wrappers over the tables `rlx-plugin-api` defines. Plugins
//! never link it; it must not depend on the runtime or on any backend.

// Every unsafe block says why it is sound (CI runs clippy with -D warnings).
#![warn(clippy::undocumented_unsafe_blocks)]

mod custom_ops;
pub mod deps;
pub mod discover;
pub mod executable;
mod graph_forms;
mod host_memory;
pub mod load;
mod load_error;
mod log_sink;
pub mod manifest;
pub mod model_plugins;
pub mod plugin;
pub mod set;
mod settings;
mod sharing;
mod state;
mod submit;
pub mod trusted;

pub use deps::{DepWalk, SearchEnv};
pub use discover::{
    discover, library_file_name, plugin_library, Candidate, DiscoveryConfig, Source, ENV_HOME,
    ENV_PLUGINS,
};
pub use executable::{LentBuffer, OutputDest, PluginExecutable};
pub use graph_forms::ENV_GRAPH_FORM;
pub use host_memory::DmaMapping;
pub use load::{load_plugin, load_plugin_with, load_static, LoadError};
pub use manifest::{read_manifest, read_manifest_file, ManifestReadError};
pub use model_plugins::{
    library_kind, model_plugin_dir, read_by_model_loader, LibraryKind, MODEL_PLUGIN_SYMBOL,
};
pub use plugin::{graph_opset, LoadedPlugin, LoweringInfo, OpSupport};
pub use set::{CandidateReport, CandidateState, PluginSet, SkipReason};
pub use trusted::{TrustPolicy, ENV_ALLOW_INSECURE};
