//! The function tables: every struct that crosses the ABI besides strings,
//! versions, statuses and tensors, one file per section of
//! `include/rlx_plugin.h` (§4 to §13).
//!
//! Each struct starts with `struct_size` (the end of the last field the
//! writer knows) and only ever grows at the end; `crate::abi_struct!`
//! checks at compile time that the named last field really is last and
//! that no tail padding follows it. Every function pointer is an `Option`
//! so that a table read past a smaller writer's `struct_size`
//! (zero-filled) is "absent", never garbage. Ownership and lifetime are
//! written on every pointer field; see `docs/ABI.md` for the contract.

pub mod custom_ops;
pub mod executable;
pub mod graph_forms;
pub mod host;
pub mod host_memory;
pub mod registration;
pub mod root;
pub mod sharing;
pub mod state;
pub mod submit;

pub use custom_ops::*;
pub use executable::*;
pub use graph_forms::*;
pub use host::*;
pub use host_memory::*;
pub use registration::*;
pub use root::*;
pub use sharing::*;
pub use state::*;
pub use submit::*;
