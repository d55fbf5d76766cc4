//! The release-archive format of the RLX MLX plugin. It reads plugin
//! directories as files (and manifests through the loader): it must not
//! depend on rlx-runtime, the adapter or a plugin's crates.
//!
//! A release is one `rlx-mlx-<version>-<platform>.tar.xz` per platform, a
//! `SHA256SUMS` naming them, and its minisign signature. `cargo xtask
//! package` [`pack`]s plugin directories (reproducibly: the same directory
//! always gives the same bytes), [`write_sums`] and [`sign_file`]s them;
//! `rlx-host plugins install` [`verify`]s the signature, checks the archive's
//! hash with [`parse_sums`] and [`sha256_file`], and [`unpack_verified`]s it,
//! which treats the archive as hostile until every byte is vouched for by its
//! manifest.
//!
//! Unix only (Linux and macOS, the plugin's platforms): modes and symlinks
//! are part of the format.

mod digest;
mod durable;
mod error;
mod extract;
mod header;
pub mod install;
mod manifest;
mod members;
mod pack;
mod paths;
mod platform;
mod sign;
mod sums;
mod system_links;
mod unpack;
mod verify_tree;
mod walk;
mod xz;

pub use error::PackageError;
pub use extract::Limits;
pub use manifest::{FileEntry, PackageManifest, SystemLink};
pub use pack::{pack, PackInput};
pub use platform::{base_platform, host_platform, platform_fits};
pub use sign::{generate_keypair, sign_file, verify};
pub use sums::{parse_sums, sha256_file, write_sums, SUMS_NAME};
pub use system_links::make_system_links;
pub use unpack::{unpack_verified, unpack_verified_bytes};
pub use verify_tree::verify_tree;

/// The archive layout version written into, and required of, every manifest.
pub const FORMAT: u32 = 1;

/// The first part of every archive's file name.
pub const ARCHIVE_STEM: &str = "rlx-mlx";

/// The name of the archive's first entry.
pub const MANIFEST_NAME: &str = "manifest.json";

/// The largest `manifest.json` an unpacker reads (16 MiB).
pub const MAX_MANIFEST_BYTES: u64 = 16 << 20;

/// The file name of an archive: `<stem>-<version>-<platform>.tar.xz`.
pub fn archive_name(stem: &str, version: &str, platform: &str) -> String {
    format!("{stem}-{version}-{platform}.tar.xz")
}
