//! Tables printed for people: rows under a header, and the plugin
//! candidates a search found. The CLI, the demo, `run` and `bench` print
//! through these, so none of them reaches into another for its output.

use rlx_plugin_loader::PluginSet;

/// Print rows under a header, columns padded to their widest cell.
pub fn print_table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == N {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  "));
            }
        }
        println!("{}", s.trim_end());
    };
    line(header.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
}

/// The plugin table: one row per candidate with its state.
pub fn print_candidates(set: &PluginSet) {
    if set.candidates.is_empty() {
        println!(
            "no plugin candidates (searched --plugin paths, {}, the executable's plugins/ directory, and $RLX_HOME/plugins or ~/.rlx/plugins)",
            rlx_plugin_loader::ENV_PLUGINS
        );
        return;
    }
    let rows: Vec<[String; 6]> = set
        .candidates
        .iter()
        .map(|c| {
            let p = c.plugin();
            [
                p.map_or("-".into(), |p| p.descriptor().name.clone()),
                p.map_or("-".into(), |p| p.descriptor().version.clone()),
                p.map_or("-".into(), |p| p.abi_version().to_string()),
                c.source.to_string(),
                c.path.display().to_string(),
                c.reason(),
            ]
        })
        .collect();
    print_table(
        &["NAME", "VERSION", "ABI", "SOURCE", "PATH", "STATE"],
        &rows,
    );
}
