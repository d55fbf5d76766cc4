//! Installing a release archive into an RLX home: verify everything, then
//! swap the plugin directory into `$RLX_HOME/plugins/<name>/` atomically,
//! load it once, and put the previous version back if it does not load.
//!
//! Order matters, and is the point: nothing is written under `plugins/`
//! until the signature (when keys are trusted), the archive's hash, every
//! file's hash, the platform and the library's ABI (read from its embedded
//! manifest, without loading it) have all been checked. Unpacking happens
//! in `$RLX_HOME/install/` (the same filesystem, so the final step is a
//! rename), and what a refusal leaves there is removed.
//!
//! ```text
//! $RLX_HOME/plugins/<name>/            the installed plugin directory
//! $RLX_HOME/plugins/<name>/.rlx-install.json   what was installed, from where, how verified
//! $RLX_HOME/install/previous/<name>/   the version before, kept until the next install
//! $RLX_HOME/install/lock               one install at a time
//! $RLX_HOME/trusted-keys/*.pub         publishers' minisign keys: a signature is then required
//! ```

mod lock;
mod place;
mod record;
mod trust;

pub use record::{installed, Installed, Record, Verification, RECORD_NAME};
pub use trust::{trusted_keys, Evidence};

use crate::{base_platform, host_platform, platform_fits, unpack_verified, Limits, PackageError};
use std::path::{Path, PathBuf};

/// Where an RLX home keeps what this module manages.
#[derive(Clone, Debug)]
pub struct Home {
    pub root: PathBuf,
}

impl Home {
    pub fn new(root: impl Into<PathBuf>) -> Home {
        Home { root: root.into() }
    }
    /// The plugins directory discovery searches (`$RLX_HOME/plugins`).
    pub fn plugins(&self) -> PathBuf {
        self.root.join("plugins")
    }
    /// The installer's own area, beside `plugins/` on the same filesystem.
    pub fn work(&self) -> PathBuf {
        self.root.join("install")
    }
    /// Publishers' public keys the user trusts.
    pub fn keys(&self) -> PathBuf {
        self.root.join("trusted-keys")
    }
    pub fn previous(&self, name: &str) -> PathBuf {
        self.work().join("previous").join(name)
    }
}

/// One install.
pub struct Request<'a> {
    /// The archive, already on this machine.
    pub archive: &'a Path,
    /// Where it came from, as the user named it (for the record).
    pub source: String,
    /// What vouches for it: the release's sums and their signature.
    pub evidence: Evidence,
    /// Public keys given on the command line (texts of `.pub` files),
    /// trusted for this install beside those under `trusted-keys/`.
    pub keys: Vec<(String, String)>,
    /// Install without a signature when no key is trusted.
    pub allow_unsigned: bool,
    /// Allow a downgrade, and reinstall the installed version.
    pub force: bool,
    pub limits: Limits,
}

/// What an install did.
#[derive(Debug)]
pub enum Outcome {
    Installed {
        record: Box<Record>,
        /// The version it replaced, now in `install/previous/<name>/`.
        replaced: Option<String>,
        /// What the checks could not vouch for (an unsigned install).
        skipped: Vec<String>,
    },
    /// That version is already installed: nothing was changed.
    AlreadyInstalled { name: String, version: String },
}

/// Install `req.archive` into `home` (see the module docs). `load` is
/// called once on the new plugin directory in place and must load the
/// plugin (`Ok` with what it found, for the record); an `Err` rolls the
/// install back.
pub fn install(
    home: &Home,
    req: &Request,
    load: &dyn Fn(&Path) -> Result<String, String>,
) -> Result<Outcome, PackageError> {
    let host = host_platform()
        .ok_or_else(|| PackageError::new("this machine's platform has no release archives"))?;
    // 1. The signature and the archive's hash, before anything is written.
    let keys = {
        let mut k = req.keys.clone();
        k.extend(trusted_keys(&home.keys())?);
        k
    };
    // Hashed once: checked against the sums here, kept in the record.
    let archive_sha256 = crate::sha256_file(req.archive)?;
    let (verification, skipped) = trust::judge(
        req.archive,
        &archive_sha256,
        &req.evidence,
        &keys,
        req.allow_unsigned,
    )?;

    std::fs::create_dir_all(home.work()).map_err(|e| PackageError::io(&home.work(), e))?;
    let _lock = lock::Lock::take(&home.work().join("lock"))?;
    let staging = place::Staging::new(&home.work())?;

    // 2. Every file against the manifest, into the staging directory.
    let m = unpack_verified(req.archive, staging.path(), &req.limits)?;
    // 3. The platform, then the library's ABI and identity, unloaded.
    platform_fits(&m.platform, host)
        .map_err(|e| PackageError::new(format!("{}: {e}", req.archive.display())))?;
    let new_dir = staging.path().join(&m.name);
    record::check_library(&new_dir, &m)?;

    // 4. Against what is installed.
    let target = home.plugins().join(&m.name);
    let current = installed(&target);
    if let Some(cur) = &current {
        match record::compare(&cur.version, &m.version) {
            std::cmp::Ordering::Equal if !req.force => {
                return Ok(Outcome::AlreadyInstalled {
                    name: m.name,
                    version: m.version,
                })
            }
            std::cmp::Ordering::Greater if !req.force => {
                return Err(PackageError::new(format!(
                    "{} {} is installed; {} is older: pass --force to downgrade",
                    m.name, cur.version, m.version
                )))
            }
            _ => {}
        }
    }

    // 5. Complete it where it is, then swap it in.
    crate::make_system_links(staging.path(), &m)?;
    let record = Record {
        name: m.name.clone(),
        version: m.version.clone(),
        platform: m.platform.clone(),
        base_platform: base_platform(&m.platform).to_string(),
        abi_version: m.abi_version.clone(),
        mlx_version: m.mlx_version.clone(),
        mlx_backend: m.mlx_backend.clone(),
        source: req.source.clone(),
        archive_sha256,
        verification,
        installed_at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    };
    record.write(&new_dir)?;
    std::fs::create_dir_all(home.plugins()).map_err(|e| PackageError::io(&home.plugins(), e))?;
    let placed = place::swap_in(&new_dir, &target, &home.previous(&m.name))?;

    // 6. Load it once; put the old one back if it does not load.
    if let Err(why) = load(&target) {
        placed.roll_back()?;
        return Err(PackageError::new(format!(
            "{} {} did not load, so it was not installed{}: {why}",
            m.name,
            m.version,
            if current.is_some() {
                " (the previous version is back in place)"
            } else {
                ""
            }
        )));
    }
    placed.commit()?;
    Ok(Outcome::Installed {
        record: Box::new(record),
        replaced: current.map(|c| c.version),
        skipped,
    })
}

/// Remove an installed plugin (and the previous version kept for it).
/// A running program that loaded it keeps what it mapped.
pub fn remove(home: &Home, name: &str) -> Result<String, PackageError> {
    crate::paths::check_name(name).map_err(PackageError::new)?;
    std::fs::create_dir_all(home.work()).map_err(|e| PackageError::io(&home.work(), e))?;
    let _lock = lock::Lock::take(&home.work().join("lock"))?;
    let target = home.plugins().join(name);
    let what = installed(&target).ok_or_else(|| {
        PackageError::new(format!("no plugin {name} in {}", home.plugins().display()))
    })?;
    place::remove_dir(&target, &home.work())?;
    let previous = home.previous(name);
    if previous.exists() {
        place::remove_dir(&previous, &home.work())?;
    }
    Ok(format!("removed {name} {}", what.version))
}
