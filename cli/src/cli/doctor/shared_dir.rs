//! The doctor's warning for a backend plugin dropped directly into the
//! plugins directory that rlx-runtime's model-plugin loader also reads
//! (docs/ABI.md §15): discovery still loads it, but every rlx-runtime
//! program that uses the model API tries to load it as a model plugin too
//! and prints an error about it.

use rlx_plugin_loader::{read_by_model_loader, CandidateReport, CandidateState};
use std::path::Path;

/// The warning for `report`, when `model_dir` (rlx-runtime's model plugin
/// directory) holds its library directly.
pub(super) fn warning(report: &CandidateReport, model_dir: Option<&Path>) -> Option<String> {
    let dir = model_dir?;
    if matches!(report.state, CandidateState::Skipped(_))
        || !read_by_model_loader(dir, &report.path)
    {
        return None;
    }
    let file = report.path.file_name()?.to_string_lossy().into_owned();
    let name = match report.plugin() {
        Some(p) => p.descriptor().name.clone(),
        None => report
            .path
            .file_stem()
            .map(|s| s.to_string_lossy().trim_start_matches("lib").to_string())
            .unwrap_or_default(),
    };
    Some(format!(
        "{file} lies directly in {dir}, which rlx-runtime's model-plugin loader also reads: \
         every program using rlx-runtime's model API tries to load it as a model plugin and \
         prints an error about it; move it into a subdirectory ({dir}/{name}/{file}), where \
         backend discovery still finds it and that loader does not look",
        dir = dir.display()
    ))
}
