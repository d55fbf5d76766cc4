//! Getting an archive and its sums onto this machine: a path, `file://`,
//! `https://` (ureq, with the system-independent webpki roots), and plain
//! `http://` only from this machine itself (a local mirror, the tests'
//! server): everything fetched is verified before it is trusted, but a
//! network path without TLS is not offered to other hosts.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The largest archive downloaded (the CUDA one is a few hundred MB).
const MAX_DOWNLOAD: u64 = 16 << 30;
/// The largest `SHA256SUMS` or signature read.
const MAX_TEXT: u64 = 1 << 20;

/// An archive on this machine; a download is removed when dropped.
pub struct Fetched {
    path: PathBuf,
    downloaded: bool,
}

impl Fetched {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Fetched {
    fn drop(&mut self) {
        if self.downloaded {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

enum Source<'a> {
    Local(PathBuf),
    Remote(&'a str),
}

fn classify(s: &str) -> Result<Source<'_>, String> {
    if let Some(p) = s.strip_prefix("file://") {
        return Ok(Source::Local(PathBuf::from(p)));
    }
    if s.starts_with("https://") {
        return Ok(Source::Remote(s));
    }
    if let Some(rest) = s.strip_prefix("http://") {
        let host = rest.split(['/', ':']).next().unwrap_or("");
        let host = if rest.starts_with('[') {
            rest.split(']')
                .next()
                .map(|h| h.trim_start_matches('['))
                .unwrap_or("")
        } else {
            host
        };
        return if matches!(host, "127.0.0.1" | "localhost" | "::1") {
            Ok(Source::Remote(s))
        } else {
            Err(format!(
                "{s}: plain http is only fetched from this machine; use https://"
            ))
        };
    }
    if s.contains("://") {
        return Err(format!(
            "{s}: only https://, file:// and paths are supported"
        ));
    }
    Ok(Source::Local(PathBuf::from(s)))
}

/// The archive `source` names, downloaded into `dir` when remote.
pub fn archive(source: &str, dir: &Path) -> Result<Fetched, String> {
    match classify(source)? {
        Source::Local(p) => {
            if !p.is_file() {
                return Err(format!("{}: no such archive", p.display()));
            }
            Ok(Fetched {
                path: p,
                downloaded: false,
            })
        }
        Source::Remote(url) => {
            let name = url
                .rsplit('/')
                .next()
                .filter(|n| !n.is_empty() && !n.contains(['?', '#']) && *n != ".." && *n != ".")
                .ok_or_else(|| format!("{url}: the URL does not end in an archive's file name"))?;
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let path = dir.join(name);
            let fetched = Fetched {
                path: path.clone(),
                downloaded: true,
            };
            download(url, &path)?;
            Ok(fetched)
        }
    }
}

/// The file called `name` beside `source` (its directory, or its URL's).
pub fn beside(source: &str, name: &str) -> Option<String> {
    match classify(source).ok()? {
        Source::Local(p) => Some(p.with_file_name(name).display().to_string()),
        Source::Remote(url) => url
            .rsplit_once('/')
            .map(|(base, _)| format!("{base}/{name}")),
    }
}

/// A small text file (sums, a signature); `None` when it does not exist.
pub fn text(source: &str) -> Result<Option<String>, String> {
    match classify(source)? {
        Source::Local(p) => match std::fs::metadata(&p) {
            Err(_) => Ok(None),
            Ok(m) if m.len() > MAX_TEXT => Err(format!("{}: too large", p.display())),
            Ok(_) => std::fs::read_to_string(&p)
                .map(Some)
                .map_err(|e| format!("{}: {e}", p.display())),
        },
        Source::Remote(url) => match agent().get(url).call() {
            Ok(resp) => {
                let mut s = String::new();
                resp.into_reader()
                    .take(MAX_TEXT)
                    .read_to_string(&mut s)
                    .map_err(|e| format!("{url}: {e}"))?;
                Ok(Some(s))
            }
            Err(ureq::Error::Status(404, _)) => Ok(None),
            Err(e) => Err(format!("{url}: {e}")),
        },
    }
}

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout_connect(std::time::Duration::from_secs(30))
        .timeout_read(std::time::Duration::from_secs(120))
        .build()
}

/// Stream `url` into `path` with a progress bar (shown on a terminal).
fn download(url: &str, path: &Path) -> Result<(), String> {
    let resp = agent().get(url).call().map_err(|e| format!("{url}: {e}"))?;
    let len = resp
        .header("Content-Length")
        .and_then(|v| v.parse::<u64>().ok());
    if len.is_some_and(|n| n > MAX_DOWNLOAD) {
        return Err(format!("{url}: larger than {MAX_DOWNLOAD} bytes"));
    }
    let bar = match len {
        Some(n) => indicatif::ProgressBar::new(n),
        None => indicatif::ProgressBar::new_spinner(),
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.set_message(url.rsplit('/').next().unwrap_or(url).to_string());
    let mut out = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut reader = bar.wrap_read(resp.into_reader().take(MAX_DOWNLOAD + 1));
    let n = std::io::copy(&mut reader, &mut out).map_err(|e| format!("{url}: {e}"))?;
    bar.finish_and_clear();
    if n > MAX_DOWNLOAD {
        return Err(format!("{url}: larger than {MAX_DOWNLOAD} bytes"));
    }
    if len.is_some_and(|want| want != n) {
        return Err(format!(
            "{url}: the download stopped at {n} of {} bytes",
            len.unwrap()
        ));
    }
    out.flush().map_err(|e| format!("{}: {e}", path.display()))
}
