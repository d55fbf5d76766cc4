//! The plugin side of the ABI: `export_plugin!` and the `extern "C"`
//! functions behind the root table, one file per section of
//! `include/rlx_plugin.h`. Each exported function is a few lines that
//! delegate to [`guard`], which turns errors and panics into statuses.

mod args;
mod custom_ops;
mod entry;
mod executable;
mod graph_forms;
mod handle;
mod host_memory;
mod loaded;
mod memory;
mod registration;
mod run;
mod sharing;
mod state;
mod status;
mod submit;

pub use entry::{entry, EntryOptions};
pub use status::{guard, into_status, take_status};
