//! The stable C ABI between an RLX runtime (the host) and its backend
//! plugins: the header's tables and types in Rust, and the glue a plugin
//! exports them with. Both sides link it, so it must not depend on loading
//! libraries (that is `rlx-plugin-loader`), on the runtime or on a backend.
//!
//! - Plugin authors implement [`Plugin`] and write `export_plugin!(…)`;
//!   the crate provides every `extern "C"` function behind the tables.
//! - Hosts load plugins with `rlx-plugin-loader`, which calls through the
//!   tables defined here.
//! - A plugin's build may embed a [`manifest`] that hosts read from the file
//!   without loading it (`docs/ABI.md` §19).
//!
//! The ABI itself is the C header `include/rlx_plugin.h`; `docs/ABI.md` is
//! its normative prose. The Rust modules mirror the header's sections:
//! [`strings`], [`version`] and [`sized`] (§1), [`error`] (§2), [`tensor`]
//! (§3), [`tables`] (§4–§8, one file each) and, on the plugin side,
//! [`export`] (one file per section it implements, §9 the entry).

// Every unsafe block says why it is sound (CI runs clippy with -D warnings).
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod convert;
pub mod custom_ops;
pub mod error;
pub mod export;
#[cfg(feature = "graph-forms")]
pub mod graph_forms;
pub mod graph_text;
pub mod log;
pub mod machine;
pub mod manifest;
pub mod plugin;
pub mod settings;
pub mod sized;
pub mod state;
pub mod strings;
pub mod tables;
pub mod tensor;
pub mod trust;
pub mod version;

pub use custom_ops::{
    CustomImpl, CustomKernel, CustomKind, CustomOp, CustomOpInfo, CustomOpRegistry,
    CustomOpServices, Origin, OwnedKernel, ShapeFn, ShapeRule, ShapeRuleKind, TensorType,
    TensorView, TensorViewMut,
};
pub use error::{PluginError, PluginResult, RlxStatus, StatusCode};
pub use plugin::{
    parse_device, BoundParam, CompileOptions, Descriptor, DeviceInfo, DeviceKind, Executable,
    ExecuteOp, LoweringEntry, MemoryUsage, Mode, Offers, OutputBuf, OutputSlot, ParamBytes, Plugin,
    Role, StateBuf, Strategy, ValueInfo,
};
pub use settings::{setting, setting_flag};
pub use sized::AbiStruct;
pub use state::{Feed, RowCopy, RowFeed};
pub use strings::{RlxKeyValue, RlxStr};
pub use tensor::{DType, HostTensor, HostTensorRef, OwnedTensor, RlxTensor, TensorRef};
pub use version::{RlxAbiVersion, ABI_VERSION};
