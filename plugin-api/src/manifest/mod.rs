//! The plugin manifest (docs/ABI.md §19): a few hundred bytes a plugin's
//! build embeds in its library, so that a host can learn the plugin's name,
//! version, ABI version, device kinds and ops by reading the file, without
//! loading it. Loading runs the library's code (its constructors, then its
//! entry); a host that reads the manifest first can refuse a library of
//! another ABI major before any of that happens.
//!
//! - [`Manifest`] is what a plugin declares, as a `const`; `export_plugin!`
//!   (its `manifest:` form) encodes it at compile time into a static placed
//!   in the manifest section ([`SECTION_ELF`], [`SECTION_MACHO`]).
//! - [`parse`] decodes the section's bytes into an [`EmbeddedManifest`];
//!   the host side finds the section in a library file
//!   (`rlx_plugin_loader::manifest`).
//!
//! The format is little-endian, versioned on its own ([`FORMAT_VERSION`]),
//! and optional for plugins: a library without one loads as before.

mod decode;
mod encode;

pub use decode::{parse, EmbeddedManifest, ManifestError};
pub use encode::Manifest;

/// The first eight bytes of every manifest.
pub const MAGIC: [u8; 8] = *b"RLXMANIF";
/// The format this build writes. A newer format keeps format 1's header
/// fields and entry encoding, and may append header fields (a larger
/// `header_size`) or define new keys, both of which a format-1 reader skips.
pub const FORMAT_VERSION: u16 = 1;
/// The size of format 1's fixed header; entries start here.
pub const HEADER_SIZE: u16 = 32;
/// The largest manifest a reader accepts (a sanity bound, not a format
/// field): a manifest is names, not data.
pub const MAX_SIZE: usize = 1 << 20;

/// The section holding the manifest in an ELF library.
pub const SECTION_ELF: &str = ".rlx_manifest";
/// The segment and section holding it in a Mach-O library.
pub const SEGMENT_MACHO: &str = "__DATA";
pub const SECTION_MACHO: &str = "__rlx_manifest";

/// Entry keys (`key=value`, one entry per NUL-terminated string).
pub mod keys {
    /// The descriptor name the plugin will report (required, once).
    pub const NAME: &str = "name";
    /// The plugin's version (required, once).
    pub const VERSION: &str = "version";
    /// A device kind the build can drive (`cpu`, `gpu`; repeatable).
    pub const DEVICE: &str = "device";
    /// An op kind the plugin lowers (its rlx-ir name; repeatable).
    pub const OP: &str = "op";
}

/// Embed `manifest` (a `const` [`Manifest`] expression) in the library's
/// manifest section. Used by `export_plugin!`'s `manifest:` form; a plugin
/// does not call it on its own.
#[doc(hidden)]
#[macro_export]
macro_rules! export_manifest {
    ($manifest:expr) => {
        const _: () = {
            const MANIFEST: $crate::manifest::Manifest = $manifest;
            const LEN: usize = MANIFEST.encoded_len();
            // `used`: nothing references the bytes in code, and they must
            // survive both the compiler and the linker's section GC (on ELF
            // `used` also marks the section retained). Placement per
            // platform as docs/ABI.md §19 names it; other platforms carry
            // no manifest.
            #[used]
            #[cfg_attr(
                all(unix, not(target_vendor = "apple")),
                link_section = ".rlx_manifest"
            )]
            #[cfg_attr(target_vendor = "apple", link_section = "__DATA,__rlx_manifest")]
            static RLX_PLUGIN_MANIFEST: [u8; LEN] = MANIFEST.encode::<LEN>();
        };
    };
}
