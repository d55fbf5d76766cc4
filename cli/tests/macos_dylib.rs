//! The macOS plugin built on Linux (`./scripts/build-macos-plugin.sh`,
//! docs/MACOS.md), read with a Mach-O reader: what dyld will need on a Mac.
//! Skips, saying so, when that directory has not been built (the plain
//! build does not make it; CI does when it can install the cross toolchain).

use object::macho;
use object::macho::MachHeader64;
use object::read::macho::{LoadCommandVariant, MachHeader, Nlist};
use object::Endianness;
use std::path::PathBuf;

/// The macOS plugin directories built here: release (what ships) and
/// debug (`--debug`, what CI builds); the checks read each one that exists.
fn plugin_dirs() -> Vec<PathBuf> {
    let built: Vec<PathBuf> = ["release", "debug"]
        .iter()
        .map(|p| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../target/aarch64-apple-darwin")
                .join(p)
                .join("plugins/mlx")
        })
        .filter(|d| d.join("librlx_mlx.dylib").exists())
        .collect();
    if built.is_empty() {
        eprintln!(
            "skipped: no macOS plugin directory under target/aarch64-apple-darwin \
             (./scripts/build-macos-plugin.sh builds it)"
        );
    }
    built
}

/// What the checks read from the dylib.
#[derive(Default, Debug)]
struct Commands {
    id: Option<String>,
    loads: Vec<String>,
    rpaths: Vec<String>,
    minos: Option<(u32, u32)>,
    cpu: u32,
    exports_entry: bool,
    flat_lookups: Vec<String>,
}

fn read(data: &[u8]) -> Commands {
    let header = MachHeader64::<Endianness>::parse(data, 0).expect("a 64-bit Mach-O");
    let endian = header.endian().unwrap();
    let mut out = Commands {
        cpu: header.cputype(endian),
        ..Commands::default()
    };
    let mut cmds = header.load_commands(endian, data, 0).unwrap();
    while let Some(cmd) = cmds.next().unwrap() {
        match cmd.variant().unwrap() {
            LoadCommandVariant::IdDylib(d) => {
                let name = String::from_utf8_lossy(cmd.string(endian, d.dylib.name).unwrap());
                out.id = Some(name.into_owned());
            }
            LoadCommandVariant::Dylib(d) => {
                let name = String::from_utf8_lossy(cmd.string(endian, d.dylib.name).unwrap());
                out.loads.push(name.into_owned());
            }
            LoadCommandVariant::Rpath(r) => out
                .rpaths
                .push(String::from_utf8_lossy(cmd.string(endian, r.path).unwrap()).into_owned()),
            LoadCommandVariant::BuildVersion(b) => {
                let v = b.minos.get(endian);
                out.minos = Some((v >> 16, (v >> 8) & 0xff));
            }
            LoadCommandVariant::Symtab(st) => {
                let table = st
                    .symbols::<MachHeader64<Endianness>, _>(endian, data)
                    .unwrap();
                for n in table.iter() {
                    let name = String::from_utf8_lossy(n.name(endian, table.strings()).unwrap())
                        .into_owned();
                    let kind = n.n_type() & macho::N_TYPE;
                    let external = n.n_type() & macho::N_EXT != 0;
                    if external && kind == macho::N_SECT && name == "_rlx_plugin_entry" {
                        out.exports_entry = true;
                    }
                    // Two-level namespace: an undefined symbol names its
                    // library by ordinal; 0xfe is "search every image".
                    let ordinal = (n.n_desc(endian) >> 8) as u8;
                    if external && kind == macho::N_UNDF && ordinal == 0xfe {
                        out.flat_lookups.push(name);
                    }
                }
            }
            _ => {}
        }
    }
    out
}

#[test]
fn the_macos_plugin_directory_is_relocatable_and_binds_only_to_what_a_mac_has() {
    for dir in plugin_dirs() {
        relocatable_and_binds_only_to_what_a_mac_has(&dir);
    }
}

fn relocatable_and_binds_only_to_what_a_mac_has(dir: &std::path::Path) {
    let lib = dir.join("librlx_mlx.dylib");
    let data = std::fs::read(&lib).unwrap();
    let c = read(&data);
    assert_eq!(c.cpu, macho::CPU_TYPE_ARM64, "{c:?}");
    assert_eq!(c.id.as_deref(), Some("@rpath/librlx_mlx.dylib"), "{c:?}");
    assert_eq!(c.rpaths, ["@loader_path/mlx/lib"], "{c:?}");
    // The wheel's own minimum (macOS 14): a newer one would refuse to load
    // where MLX itself runs.
    assert_eq!(c.minos, Some((14, 0)), "{c:?}");
    assert!(c.exports_entry, "rlx_plugin_entry is not exported");
    assert!(
        c.flat_lookups.is_empty(),
        "symbols left to flat lookup: {:?}",
        &c.flat_lookups[..c.flat_lookups.len().min(5)]
    );
    // Every dependency is a system library every macOS since 11 has, or
    // MLX through the plugin's own rpath; the system libc++ (the one
    // libmlx uses), never a second copy or libstdc++.
    for l in &c.loads {
        let system = l.starts_with("/usr/lib/") || l.starts_with("/System/Library/Frameworks/");
        assert!(
            system || l == "@rpath/libmlx.dylib",
            "unexpected dependency {l}"
        );
        assert!(!l.contains("stdc++"), "{l}");
    }
    assert!(
        c.loads.iter().any(|l| l == "/usr/lib/libc++.1.dylib"),
        "{c:?}"
    );
    assert!(c.loads.iter().any(|l| l == "@rpath/libmlx.dylib"), "{c:?}");
    // What the rpath must find, and MLX's Metal kernels beside it.
    for f in ["mlx/lib/libmlx.dylib", "mlx/lib/mlx.metallib"] {
        assert!(dir.join(f).exists(), "{f} missing from {}", dir.display());
    }
    // libmlx itself: found by its install name through that rpath.
    let mlx = read(&std::fs::read(dir.join("mlx/lib/libmlx.dylib")).unwrap());
    assert_eq!(mlx.id.as_deref(), Some("@rpath/libmlx.dylib"), "{mlx:?}");
    // No path of the machine that built it: the checkout, or a path under
    // the home directory (with its slash: a home of `/root` is in
    // `.../src/library/root_mod_trait.rs`, a remapped dependency's path).
    let home = format!("{}/", std::env::var("HOME").unwrap_or_default());
    for needle in [env!("CARGO_MANIFEST_DIR"), home.as_str()] {
        if needle.len() > 1 {
            assert!(
                !data.windows(needle.len()).any(|w| w == needle.as_bytes()),
                "the dylib holds the build path {needle}"
            );
        }
    }
}

/// `rlx-host plugins doctor` on the macOS directory, on this machine: every
/// library found or a macOS system one (exit 0); without `libmlx.dylib`
/// beside it, the missing one and where dyld would look (exit 1).
#[test]
fn the_doctor_reads_the_macos_directory_as_dyld_would() {
    for dir in plugin_dirs() {
        doctor_reads_as_dyld_would(&dir);
    }
}

fn doctor_reads_as_dyld_would(dir: &std::path::Path) {
    let doctor = |d: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_rlx-host"))
            .args(["plugins", "doctor"])
            .arg(d)
            .env_remove("RLX_BACKEND_PLUGINS")
            .output()
            .unwrap()
    };
    let o = doctor(dir);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(
        text.contains("@rpath/libmlx.dylib  (from librlx_mlx.dylib)  found:"),
        "{text}"
    );
    assert!(
        text.contains("/usr/lib/libc++.1.dylib  (from librlx_mlx.dylib)  macOS system library"),
        "{text}"
    );
    assert!(
        text.contains("Metal.framework"),
        "libmlx's own libraries are read too:\n{text}"
    );

    // The same directory without MLX: missing, with where dyld would look.
    let tmp = std::env::temp_dir().join(format!("rlx-macos-doctor-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::copy(dir.join("librlx_mlx.dylib"), tmp.join("librlx_mlx.dylib")).unwrap();
    let o = doctor(&tmp);
    let text = String::from_utf8_lossy(&o.stdout);
    std::fs::remove_dir_all(&tmp).ok();
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        text.contains("@rpath/libmlx.dylib  (from librlx_mlx.dylib)  MISSING"),
        "{text}"
    );
    assert!(
        text.contains("mlx/lib/libmlx.dylib"),
        "the rpath's place is named:\n{text}"
    );
    assert!(text.contains("would not resolve on a Mac"), "{text}");
}
