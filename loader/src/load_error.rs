//! Why a plugin file was not loaded: every way loading can fail, each
//! with the words that tell a user what to do.

use rlx_plugin_api::error::{PluginError, StatusCode};
use rlx_plugin_api::tables::ENTRY_SYMBOL;
use rlx_plugin_api::version::{VersionMismatch, ABI_VERSION};
use std::fmt;

/// Why a candidate was not loaded.
#[derive(Clone, Debug, PartialEq)]
pub enum LoadError {
    /// The path named explicitly or in `RLX_BACKEND_PLUGINS` does not exist.
    NotFound,
    /// The file, a directory above it or a library it bundles could have
    /// been written by another user (see [`super::trusted`]).
    Untrusted { detail: String },
    /// The file is not a shared library at all (no ELF / Mach-O / PE header).
    NotALibrary { detail: String },
    /// It looks like a library but the loader refused it (truncated,
    /// corrupt, wrong architecture).
    InvalidLibrary { detail: String },
    /// A library it links against could not be found.
    MissingDependency { library: String, detail: String },
    /// A library, but not an RLX plugin: no `rlx_plugin_entry`.
    MissingEntrySymbol,
    /// A model plugin for rlx-runtime's model API (it exports
    /// `rlx_model_plugin_v1`, and neither `rlx_plugin_entry` nor a
    /// manifest), read from the file: refused before `dlopen`, so none of
    /// its code ran. Discovery reports such a candidate as skipped
    /// ([`super::CandidateState::Skipped`]), not as rejected: it belongs in
    /// the plugins directory, to the other loader.
    ModelPlugin,
    /// The entry returned null.
    EntryReturnedNull,
    /// The entry panicked (caught by the plugin and reported).
    EntryPanicked { message: String },
    /// ABI majors differ.
    AbiMismatch(VersionMismatch),
    /// The library's embedded manifest (docs/ABI.md §19) declares another
    /// ABI major: refused before `dlopen`, so none of its code ran.
    ManifestAbiMismatch(VersionMismatch),
    /// The library carries a manifest that breaks the format: refused
    /// before `dlopen` (its build is broken; what else it claims is unknown).
    InvalidManifest { detail: String },
    /// The plugin refused this host (its own check of the host's version,
    /// or another failure it reported from its entry).
    Refused { code: StatusCode, message: String },
    /// A Rust plugin's type layouts differ from this host's.
    LayoutMismatch { detail: String },
    /// The root table or descriptor is malformed (too small for its
    /// version, a required function missing, invalid UTF-8).
    InvalidTable { detail: String },
    /// The plugin's registration (`init`) returned an error.
    RegistrationFailed(PluginError),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::NotFound => write!(f, "no such file"),
            LoadError::Untrusted { detail } => write!(
                f,
                "not loaded, since loading a plugin runs its code and another user could have \
                 written it: {detail}; fix the owner or mode, or set {}=1 to load it anyway",
                super::trusted::ENV_ALLOW_INSECURE
            ),
            LoadError::NotALibrary { detail } => write!(f, "not a shared library: {detail}"),
            LoadError::InvalidLibrary { detail } => {
                write!(f, "the dynamic loader refused the library (corrupt or truncated?): {detail}")
            }
            LoadError::MissingDependency { library, detail } => write!(
                f,
                "a library it depends on is missing: {library} (install it or put it on the \
                 loader's search path); loader said: {detail}"
            ),
            LoadError::MissingEntrySymbol => write!(
                f,
                "not an RLX plugin: the library does not export `{ENTRY_SYMBOL}`"
            ),
            LoadError::ModelPlugin => write!(
                f,
                "a model plugin for rlx-runtime's model API (it exports `{}` and no \
                 `{ENTRY_SYMBOL}`), not a backend plugin; not loaded (none of its code ran)",
                super::model_plugins::MODEL_PLUGIN_SYMBOL
            ),
            LoadError::EntryReturnedNull => write!(f, "the plugin's `{ENTRY_SYMBOL}` returned null"),
            LoadError::EntryPanicked { message } => write!(f, "{message}"),
            LoadError::AbiMismatch(m) => write!(f, "ABI version mismatch: {m}"),
            LoadError::ManifestAbiMismatch(m) => write!(
                f,
                "ABI version mismatch, read from the library's embedded manifest: {m}; \
                 not loaded (none of its code ran)"
            ),
            LoadError::InvalidManifest { detail } => write!(
                f,
                "malformed embedded manifest: {detail}; not loaded (none of its code ran)"
            ),
            LoadError::Refused { code, message } => write!(f, "the plugin refused to load ({code}): {message}"),
            LoadError::LayoutMismatch { detail } => write!(
                f,
                "ABI layout mismatch: the plugin's table layouts differ from this host's although \
                 both claim ABI {ABI_VERSION}; rebuild the plugin against this rlx-plugin-api. {detail}"
            ),
            LoadError::InvalidTable { detail } => write!(f, "malformed plugin table: {detail}"),
            LoadError::RegistrationFailed(e) => write!(f, "registration failed: {e}"),
        }
    }
}

impl std::error::Error for LoadError {}
