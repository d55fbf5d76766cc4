//! Finding a library's embedded manifest (docs/ABI.md §19) by reading the
//! file as an object file: nothing of it is mapped or run, so a host can
//! learn what a library is, and refuse it, before `dlopen`.

use object::read::macho::{FatArch, MachOFatFile32, MachOFatFile64};
use object::{FileKind, Object, ObjectSection};
use rlx_plugin_api::manifest::{self, EmbeddedManifest, ManifestError};
use std::fmt;
use std::path::Path;

/// Why a file's manifest could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ManifestReadError {
    /// The file could not be read, or is not an ELF or Mach-O file this
    /// reader can parse (nothing can be said about a manifest).
    Unreadable(String),
    /// The manifest section is there but breaks the format.
    Malformed(ManifestError),
}

impl fmt::Display for ManifestReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ManifestReadError::Unreadable(e) => write!(f, "cannot read the file's sections: {e}"),
            ManifestReadError::Malformed(e) => write!(f, "malformed embedded manifest: {e}"),
        }
    }
}

impl std::error::Error for ManifestReadError {}

/// The manifest embedded in the library at `path`; `Ok(None)` when it
/// carries none (a plugin built without one, or not a plugin at all).
pub fn read_manifest_file(path: &Path) -> Result<Option<EmbeddedManifest>, ManifestReadError> {
    let image = std::fs::read(path)
        .map_err(|e| ManifestReadError::Unreadable(format!("{}: {e}", path.display())))?;
    read_manifest(&image)
}

/// The manifest embedded in a library image (the file's bytes).
pub fn read_manifest(image: &[u8]) -> Result<Option<EmbeddedManifest>, ManifestReadError> {
    let unreadable = |e: object::Error| ManifestReadError::Unreadable(e.to_string());
    match FileKind::parse(image).map_err(unreadable)? {
        // A universal binary: the slice this machine would load.
        FileKind::MachOFat32 => {
            let fat = MachOFatFile32::parse(image).map_err(unreadable)?;
            fat_slice(image, fat.arches())
        }
        FileKind::MachOFat64 => {
            let fat = MachOFatFile64::parse(image).map_err(unreadable)?;
            fat_slice(image, fat.arches())
        }
        _ => read_object(image),
    }
}

fn fat_slice<A: FatArch>(
    image: &[u8],
    arches: &[A],
) -> Result<Option<EmbeddedManifest>, ManifestReadError> {
    let this = this_architecture();
    for a in arches {
        if a.architecture() == this {
            let data = a
                .data(image)
                .map_err(|e| ManifestReadError::Unreadable(e.to_string()))?;
            return read_object(data);
        }
    }
    Err(ManifestReadError::Unreadable(format!(
        "a universal binary without a slice for this machine ({this:?})"
    )))
}

/// The architecture this program runs on, for picking a universal
/// binary's slice.
pub(super) fn this_architecture() -> object::Architecture {
    use object::Architecture as A;
    match std::env::consts::ARCH {
        "x86_64" => A::X86_64,
        "aarch64" => A::Aarch64,
        "x86" => A::I386,
        "arm" => A::Arm,
        _ => A::Unknown,
    }
}

fn read_object(data: &[u8]) -> Result<Option<EmbeddedManifest>, ManifestReadError> {
    let file =
        object::File::parse(data).map_err(|e| ManifestReadError::Unreadable(e.to_string()))?;
    let is_macho = matches!(file.format(), object::BinaryFormat::MachO);
    let mut found = file.sections().filter(|s| is_manifest_section(s, is_macho));
    let Some(section) = found.next() else {
        return Ok(None);
    };
    let malformed = |m: String| ManifestReadError::Malformed(ManifestError(m));
    if found.next().is_some() {
        return Err(malformed("the file has two manifest sections".into()));
    }
    let bytes = section
        .data()
        .map_err(|e| malformed(format!("the manifest section cannot be read: {e}")))?;
    manifest::parse(bytes)
        .map(Some)
        .map_err(ManifestReadError::Malformed)
}

/// Is `s` the section a manifest is placed in?
pub(super) fn is_manifest_section<'d, R: object::ReadRef<'d>>(
    s: &object::Section<'d, '_, R>,
    is_macho: bool,
) -> bool {
    if is_macho {
        s.name_bytes() == Ok(manifest::SECTION_MACHO.as_bytes())
            && s.segment_name_bytes() == Ok(Some(manifest::SEGMENT_MACHO.as_bytes()))
    } else {
        s.name_bytes() == Ok(manifest::SECTION_ELF.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_plugin_api::manifest::Manifest;

    // This test binary carries a manifest of its own, placed as a plugin's
    // would be, so the section lookup is tested on a real linked file.
    rlx_plugin_api::export_manifest!(Manifest::new("unit-test", "9.9.9")
        .devices(&["cpu"])
        .ops(&["Add"]));

    fn own_image() -> Vec<u8> {
        std::fs::read(std::env::current_exe().unwrap()).unwrap()
    }

    #[test]
    fn finds_the_manifest_in_a_linked_file() {
        if !cfg!(any(target_os = "linux", target_vendor = "apple")) {
            return;
        }
        let m = read_manifest(&own_image()).unwrap().expect("a manifest");
        assert_eq!(
            (m.name.as_str(), m.version.as_str()),
            ("unit-test", "9.9.9")
        );
        assert_eq!(
            (m.devices.as_slice(), m.ops.as_slice()),
            (&["cpu".to_string()][..], &["Add".to_string()][..])
        );
    }

    #[test]
    fn non_objects_and_damaged_files_are_errors_not_panics() {
        assert!(matches!(
            read_manifest(b"not a library"),
            Err(ManifestReadError::Unreadable(_))
        ));
        assert!(read_manifest(b"").is_err());
        let image = own_image();
        // Cut anywhere: an error or (cut after the sections) the manifest,
        // never a panic.
        for n in [
            4,
            16,
            64,
            100,
            1000,
            4096,
            image.len() / 3,
            image.len() / 2,
            image.len() - 1,
        ] {
            let _ = read_manifest(&image[..n]);
        }
        // The header with its section-table offset pointed past the end.
        let mut bad = image[..4096.min(image.len())].to_vec();
        if bad.starts_with(b"\x7fELF") {
            bad[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
            assert!(read_manifest(&bad).is_err());
        }
    }
}
