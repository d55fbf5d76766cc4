//! What check 9's parts share: tensors of small integers, exact comparisons,
//! the counter executable, and raw status judgements.

use crate::graphs::{counter, text, COUNTER};
use crate::raw::take_status;
use crate::{code_name, Outcome};
use rlx_plugin_api::{DType, HostTensor, Mode, RlxStatus, StatusCode};
use rlx_plugin_loader::{LoadedPlugin, PluginExecutable};
use std::sync::Arc;

pub const INVALID: StatusCode = StatusCode::InvalidArgument;
pub const NOT_FOUND: StatusCode = StatusCode::NotFound;

pub fn f32s(shape: &[usize], v: &[f32]) -> HostTensor {
    HostTensor::from_f32(shape.to_vec(), v).expect("sized by its shape")
}

/// `[from, from + 1, ..]`, six of them: a counter-shaped tensor whose
/// every element differs.
pub fn ramp(from: f32) -> HostTensor {
    let v: Vec<f32> = (0..6).map(|i| from + i as f32).collect();
    f32s(&COUNTER, &v)
}

pub fn fill(v: f32) -> HostTensor {
    f32s(&COUNTER, &[v; 6])
}

pub fn values(t: &HostTensor) -> Vec<f32> {
    t.to_f32_vec().expect("an f32 tensor")
}

/// `a + b`, elementwise.
pub fn plus(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

/// Exactly equal (every value the kit checks is a small integer).
pub fn same(what: &str, got: &[f32], want: &[f32]) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what} is {got:?}, expected {want:?}"))
    }
}

/// The counter's `w` in every check: tens, so `y = next + w` shows it.
pub fn w() -> HostTensor {
    f32s(&COUNTER, &[10., 20., 30., 40., 50., 60.])
}

/// A compiled graph of the kit's, or the check's failure: the plugin
/// claims every op the graph uses.
pub fn compile(
    p: &Arc<LoadedPlugin>,
    g: &rlx_ir::Graph,
    mode: Mode,
) -> Result<PluginExecutable, String> {
    p.compile(&text(g), mode).map_err(|e| {
        format!(
            "compiling the kit's {} graph ({}): {e}",
            g.name,
            mode.name()
        )
    })
}

/// The counter in `mode` with `w` bound.
pub fn counter_exe(p: &Arc<LoadedPlugin>, mode: Mode) -> Result<PluginExecutable, String> {
    let mut exe = compile(p, &counter(), mode)?;
    exe.bind_param("w", &w())
        .map_err(|e| format!("bind_param \"w\": {e}"))?;
    Ok(exe)
}

/// Run and read every output as f32.
pub fn exec(
    exe: &mut PluginExecutable,
    inputs: &[(&str, &HostTensor)],
) -> Result<Vec<Vec<f32>>, String> {
    exe.run(inputs)
        .map_err(|e| format!("run: {e}"))?
        .iter()
        .map(|t| t.to_f32_vec().map_err(|e| e.to_string()))
        .collect()
}

/// Elements `first .. first + n` of the state `name`.
pub fn read_state(
    exe: &PluginExecutable,
    name: &str,
    first: usize,
    n: usize,
) -> Result<Vec<f32>, String> {
    let mut buf = vec![0u8; n * 4];
    exe.state_read_into(name, first, DType::F32, &mut buf)
        .map_err(|e| format!("reading state {name:?}: {e}"))?;
    rlx_plugin_api::convert::bytes_to_f32(DType::F32, &buf).map_err(|e| e.to_string())
}

/// A raw call's status must be `want`.
pub fn raw_expect(p: &LoadedPlugin, s: *mut RlxStatus, want: StatusCode) -> Outcome {
    crate::raw::expect_status(p.raw_api(), s, want as u32)
}

/// A raw call's status must be success.
pub fn raw_ok(p: &LoadedPlugin, s: *mut RlxStatus, what: &str) -> Result<(), String> {
    match take_status(p.raw_api(), s) {
        None => Ok(()),
        Some((code, msg)) => Err(format!("{what}: {}: {msg}", code_name(code))),
    }
}

/// Every outcome ok, else the first that is not (prefixed by its step).
pub fn all(steps: Vec<(&str, Outcome)>) -> Outcome {
    for (what, o) in steps {
        match o {
            Outcome::Ok => {}
            Outcome::Fail(why) => return Outcome::Fail(format!("{what}: {why}")),
            Outcome::Skip(why) => return Outcome::Skip(format!("{what}: {why}")),
        }
    }
    Outcome::Ok
}
