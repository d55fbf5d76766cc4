//! The program links libmlx (through the plugin crate's shim) like any
//! shared library; an rpath to the directory it was linked from lets it
//! start without LD_LIBRARY_PATH. The plugin's own library gets
//! `$ORIGIN`-relative rpaths to its bundled copy instead (plugin-mlx's
//! build script); a statically linked host has no such directory.

fn main() {
    for key in ["DEP_MLX_LIB_DIR", "DEP_MLX_LIBS_DIR"] {
        if let Ok(dir) = std::env::var(key) {
            if !dir.is_empty() {
                println!("cargo:rustc-link-arg-bins=-Wl,-rpath,{dir}");
                println!("cargo:rustc-link-arg-benches=-Wl,-rpath,{dir}");
                println!("cargo:rustc-link-arg-tests=-Wl,-rpath,{dir}");
            }
        }
    }
}
