//! A model plugin for rlx-runtime's model API, made the documented way
//! (`rlx_runtime::export_model_plugin!`): the kind of library that shares
//! `$RLX_HOME/plugins` with backend plugins (docs/ABI.md §15). Its one
//! provider, `test-echo`, opens any `echo:…` source as a model whose text
//! generation echoes the prompt.
//!
//! Loading it leaves a trace: a constructor writes `<library>.loaded`
//! beside the library file, so a test can tell whether a loader ran any of
//! its code (backend discovery must not; rlx-runtime's loader, built with
//! `model-plugins`, does).

use anyhow::Result;
use rlx_runtime::model::{Model, ModelInfo, ModelProvider, ModelRequest, Tensor};
use serde_json::Value;

/// Claims `echo:…` sources.
pub struct EchoProvider;

impl ModelProvider for EchoProvider {
    fn name(&self) -> &str {
        "test-echo"
    }

    fn description(&self) -> &str {
        "echoes its prompt (rlx-plugin-tests' model plugin)"
    }

    fn tasks(&self) -> Vec<String> {
        vec!["text-generation".into()]
    }

    fn probe(&self, request: &ModelRequest) -> u32 {
        if request.source.starts_with("echo:") {
            100
        } else {
            0
        }
    }

    fn open(&self, _request: &ModelRequest) -> Result<Box<dyn Model>> {
        Ok(Box::new(Echo))
    }
}

struct Echo;

impl Model for Echo {
    fn info(&self) -> ModelInfo {
        ModelInfo {
            provider: "test-echo".into(),
            family: "echo".into(),
            task: "text-generation".into(),
            ..Default::default()
        }
    }

    fn run(&mut self, inputs: &[Tensor], _options: &Value) -> Result<Vec<Tensor>> {
        Ok(inputs.to_vec())
    }

    fn generate_text(&mut self, prompt: &str, _options: &Value) -> Result<String> {
        Ok(format!("echo: {prompt}"))
    }
}

rlx_runtime::export_model_plugin!("rlx-test-model-plugin", [EchoProvider]);

/// Runs when the library is mapped, before any loader looks up a symbol.
#[cfg(unix)]
#[used]
#[cfg_attr(target_os = "linux", link_section = ".init_array")]
#[cfg_attr(target_vendor = "apple", link_section = "__DATA,__mod_init_func")]
static MARK_LOADED: extern "C" fn() = mark_loaded;

/// Write `<this library's path>.loaded`. The path comes from the loader
/// (`dladdr`), not the environment: the test process that must *not* load
/// the library runs many threads, where setting a variable is unsafe.
#[cfg(unix)]
extern "C" fn mark_loaded() {
    // SAFETY: dladdr only reads the loader's tables; `info` is plain data
    // it fills, and `dli_fname` a NUL-terminated path when it succeeds.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(mark_loaded as *const libc::c_void, &mut info) == 0
            || info.dli_fname.is_null()
        {
            return;
        }
        use std::os::unix::ffi::OsStrExt;
        let lib = std::ffi::CStr::from_ptr(info.dli_fname);
        let mut marker = std::ffi::OsStr::from_bytes(lib.to_bytes()).to_owned();
        marker.push(".loaded");
        let _ = std::fs::write(marker, b"loaded\n");
    }
}
