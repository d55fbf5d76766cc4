//! `rlx-host plugins install ARCHIVE|URL`, `plugins list`, `plugins remove
//! NAME`: release archives into `$RLX_HOME/plugins`, verified before they
//! are trusted (`rlx_plugin_package::install` says how and in what order).

mod fetch;

use super::CliResult;
use crate::tables::print_table;
use rlx_plugin_package::install::{self, Evidence, Home, Outcome, Request, Verification};
use rlx_plugin_package::Limits;
use std::path::{Path, PathBuf};

/// The command line of `plugins install`.
pub struct InstallArgs {
    pub source: String,
    pub keys: Vec<PathBuf>,
    pub sums: Option<String>,
    pub allow_unsigned: bool,
    pub force: bool,
    /// For the CUDA directory: where its CUDA runtime is (passed to its
    /// `mlx-cuda-runtime.sh`).
    pub cuda_runtime: Option<PathBuf>,
}

fn home() -> Result<Home, String> {
    rlx_plugin_loader::DiscoveryConfig::from_env(Vec::new())
        .rlx_home_dir()
        .map(Home::new)
        .ok_or_else(|| "no RLX home: set RLX_HOME or HOME".to_string())
}

pub fn install_cmd(a: InstallArgs) -> CliResult {
    let home = home()?;
    let downloads = home.work().join("downloads");
    let fetched = fetch::archive(&a.source, &downloads)?;
    let sums_source = a
        .sums
        .clone()
        .or_else(|| fetch::beside(&a.source, rlx_plugin_package::SUMS_NAME));
    let evidence = Evidence {
        sums: sums_source
            .as_deref()
            .map(fetch::text)
            .transpose()?
            .flatten(),
        signature: sums_source
            .as_deref()
            .map(|s| fetch::text(&format!("{s}.minisig")))
            .transpose()?
            .flatten(),
    };
    let keys = a
        .keys
        .iter()
        .map(|k| {
            std::fs::read_to_string(k)
                .map(|t| (format!("--key {}", k.display()), t))
                .map_err(|e| format!("{}: {e}", k.display()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let req = Request {
        archive: fetched.path(),
        source: a.source.clone(),
        evidence,
        keys,
        allow_unsigned: a.allow_unsigned,
        force: a.force,
        limits: Limits::default(),
    };
    let cuda_runtime = a.cuda_runtime.clone();
    let load = move |dir: &Path| load_once(dir, cuda_runtime.as_deref());
    match install::install(&home, &req, &load).map_err(|e| e.to_string())? {
        Outcome::AlreadyInstalled { name, version } => {
            println!(
                "{name} {version} is already installed: nothing to do (--force reinstalls it)"
            );
        }
        Outcome::Installed {
            record,
            replaced,
            skipped,
        } => {
            for s in &skipped {
                eprintln!("rlx-host: warning: not verified: {s} (--allow-unsigned)");
            }
            println!(
                "installed {} {} ({}, MLX {} {}) into {}{}; {}",
                record.name,
                record.version,
                record.platform,
                record.mlx_version,
                record.mlx_backend,
                home.plugins().join(&record.name).display(),
                replaced
                    .map(|v| format!(
                        ", replacing {v} (kept in {})",
                        home.previous(&record.name).display()
                    ))
                    .unwrap_or_default(),
                verified_text(&record.verification)
            );
        }
    }
    Ok(())
}

fn verified_text(v: &Verification) -> String {
    match v {
        Verification::Signed { key } => format!("signature verified ({key})"),
        Verification::Unsigned { sums: true } => "unsigned; hash checked against SHA256SUMS".into(),
        Verification::Unsigned { sums: false } => {
            "unsigned; only the archive's own manifest checked".into()
        }
    }
}

/// Load the plugin in `dir` once, as discovery will. The CUDA directory
/// first links its CUDA runtime (`mlx-cuda-runtime.sh`, part of the
/// verified archive).
fn load_once(dir: &Path, cuda_runtime: Option<&Path>) -> Result<String, String> {
    let script = dir.join("mlx-cuda-runtime.sh");
    if script.is_file() {
        let mut cmd = std::process::Command::new(&script);
        cmd.arg("--plugin-dir").arg(dir).arg("--brief");
        if let Some(r) = cuda_runtime {
            cmd.arg(r);
        }
        let out = cmd
            .output()
            .map_err(|e| format!("{}: {e}", script.display()))?;
        if !out.status.success() {
            let said = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = said.lines().filter(|l| !l.trim().is_empty()).collect();
            return Err(format!(
                "{} could not link the CUDA runtime (--cuda-runtime DIR names one): {}",
                script.display(),
                tail[tail.len().saturating_sub(6)..].join("; ")
            ));
        }
    }
    let p = super::plugins::load_one(dir)?;
    let d = p.descriptor();
    Ok(format!(
        "{} {} ({})",
        d.name,
        d.version,
        d.devices.join(", ")
    ))
}

pub fn list_cmd(as_json: bool) -> CliResult {
    let home = home()?;
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(home.plugins())
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    dirs.sort();
    let rows: Vec<[String; 6]> = dirs
        .iter()
        .filter_map(|d| {
            let i = install::installed(d)?;
            let name = d.file_name()?.to_string_lossy().into_owned();
            Some(match i.record {
                Some(r) => [
                    name,
                    r.version,
                    r.platform,
                    format!("MLX {} {}", r.mlx_version, r.mlx_backend),
                    verified_text(&r.verification),
                    r.source,
                ],
                None => [
                    name,
                    i.version,
                    "-".into(),
                    "-".into(),
                    "not installed by rlx-host (no record)".into(),
                    d.display().to_string(),
                ],
            })
        })
        .collect();
    if as_json {
        let v: Vec<_> = rows
            .iter()
            .map(|r| {
                serde_json::json!({"name": r[0], "version": r[1], "platform": r[2],
                    "mlx": r[3], "verified": r[4], "source": r[5]})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v).unwrap());
    } else if rows.is_empty() {
        println!("no plugins installed in {}", home.plugins().display());
    } else {
        print_table(
            &["NAME", "VERSION", "PLATFORM", "MLX", "VERIFIED", "SOURCE"],
            &rows,
        );
    }
    Ok(())
}

pub fn remove_cmd(name: &str) -> CliResult {
    let home = home()?;
    println!(
        "{}",
        install::remove(&home, name).map_err(|e| e.to_string())?
    );
    Ok(())
}
