//! (docs/ABI.md §11, §9) The root table's optional executable functions and
//! memory figures, each where offered: `executable_bind_param_range` (only its
//! elements change; a clone sharing the param keeps its own; misuse refused,
//! nothing changed), `executable_set_rng` (as a compile with that policy and
//! seed; an unknown policy `UNSUPPORTED`), `executable_set_active_extent` (live
//! rows exact, bounds checked, cleared) and `memory_usage`.

use super::util::*;
use crate::graphs::{claims_f32, counter, text, uniform};
use crate::{expect_err, Kit, Outcome};
use rlx_plugin_api::tables::{rng_policy, RlxMemoryUsage};
use rlx_plugin_api::{CompileOptions, Mode, StatusCode};
use rlx_plugin_loader::{LoadedPlugin, PluginExecutable};
use std::sync::Arc;

fn step(exe: &mut PluginExecutable) -> Result<Vec<Vec<f32>>, String> {
    exec(exe, &[("x", &fill(1.0)), ("s", &fill(1.0))])
}

pub(super) fn param_range(kit: &mut Kit, clone: bool) {
    kit.record("param range: overwrites only its elements", |p| {
        let r = (|| {
            let mut exe = counter_exe(p, Mode::Lazy)?;
            exe.bind_param_range("w", 8, &le(&[100.0, 200.0]))
                .map_err(|e| format!("bind_param_range: {e}"))?;
            let out = step(&mut exe)?;
            same("y", &out[1], &[12., 22., 102., 202., 52., 62.])
        })();
        r.into()
    });
    kit.record("param range: misuse refused, nothing changed", |p| {
        misuse(p)
    });
    if clone {
        kit.record(
            "param range: a clone's shared param keeps its values",
            |p| {
                let r = (|| {
                    let mut a = counter_exe(p, Mode::Lazy)?;
                    let mut b = a.clone_executable().map_err(|e| format!("clone: {e}"))?;
                    b.bind_param_range("w", 0, &le(&[0.0]))
                        .map_err(|e| format!("bind_param_range on the clone: {e}"))?;
                    same(
                        "the original's y",
                        &step(&mut a)?[1],
                        &[12., 22., 32., 42., 52., 62.],
                    )?;
                    same(
                        "the clone's y",
                        &step(&mut b)?[1],
                        &[2., 22., 32., 42., 52., 62.],
                    )
                })();
                r.into()
            },
        );
    }
}

fn le(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn misuse(p: &Arc<LoadedPlugin>) -> Outcome {
    let mut exe = match counter_exe(p, Mode::Lazy) {
        Ok(e) => e,
        Err(e) => return Outcome::Fail(e),
    };
    let mut unbound = match compile(p, &counter(), Mode::Lazy) {
        Ok(e) => e,
        Err(e) => return Outcome::Fail(e),
    };
    let steps = vec![
        (
            "not whole elements",
            expect_err(exe.bind_param_range("w", 2, &[0; 4]), &[INVALID]),
        ),
        (
            "past the end",
            expect_err(exe.bind_param_range("w", 20, &[0; 8]), &[INVALID]),
        ),
        (
            "no such param",
            expect_err(exe.bind_param_range("nope", 0, &[0; 4]), &[NOT_FOUND]),
        ),
        (
            "an unbound param",
            expect_err(unbound.bind_param_range("w", 0, &[0; 4]), &[INVALID]),
        ),
    ];
    match step(&mut exe) {
        Ok(out) if out[1] == [12., 22., 32., 42., 52., 62.] => all(steps),
        Ok(out) => Outcome::Fail(format!("after the refusals y is {:?}", out[1])),
        Err(e) => Outcome::Fail(e),
    }
}

pub(super) fn set_rng(kit: &mut Kit) {
    kit.record("set_rng: as a compile with that policy and seed", |p| {
        if !claims_f32(p, &["RngUniform"]) {
            return Outcome::Skip("the plugin claims no RngUniform in f32 to draw with".into());
        }
        same_draws(p).into()
    });
    kit.record("set_rng: an unknown policy is UNSUPPORTED", |p| {
        let mut exe = match counter_exe(p, Mode::Lazy) {
            Ok(e) => e,
            Err(e) => return Outcome::Fail(e),
        };
        let ok = exe
            .set_rng(rng_policy::PHILOX, 7)
            .map_err(|e| format!("set_rng(PHILOX, 7): {e}"));
        all(vec![
            ("PHILOX on a graph without random ops", ok.into()),
            (
                "policy 99",
                expect_err(exe.set_rng(99, 1), &[StatusCode::Unsupported]),
            ),
        ])
    });
}

/// Draws after `set_rng(PHILOX, 7)` are those of an executable compiled
/// with seed 7, and after `set_rng(PHILOX, 42)` those of the default.
fn same_draws(p: &Arc<LoadedPlugin>) -> Result<(), String> {
    let t = text(&uniform());
    let draw = |exe: &mut PluginExecutable| exec(exe, &[]).map(|o| o[0].clone());
    let seeded = |seed| {
        let opts = CompileOptions {
            rng_seed: seed,
            ..Default::default()
        };
        p.compile_with(&t, &opts)
            .map_err(|e| format!("compiling with seed {seed}: {e}"))
    };
    let want7 = draw(&mut seeded(7)?)?;
    let want42 = draw(&mut seeded(42)?)?;
    let mut exe = seeded(42)?;
    exe.set_rng(rng_policy::PHILOX, 7)
        .map_err(|e| format!("set_rng(PHILOX, 7): {e}"))?;
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let got = draw(&mut exe)?;
    if bits(&got) != bits(&want7) {
        return Err(format!(
            "after set_rng(PHILOX, 7) the draws are {got:?}, compiled with seed 7 {want7:?}"
        ));
    }
    exe.set_rng(rng_policy::PHILOX, 42)
        .map_err(|e| format!("set_rng(PHILOX, 42): {e}"))?;
    let got = draw(&mut exe)?;
    if bits(&got) != bits(&want42) {
        return Err(format!(
            "after set_rng(PHILOX, 42) the draws are {got:?}, compiled with seed 42 {want42:?}"
        ));
    }
    Ok(())
}

pub(super) fn active_extent(kit: &mut Kit) {
    kit.record("active extent: live rows exact, then cleared", |p| {
        let r = (|| {
            let mut exe = counter_exe(p, Mode::Lazy)?;
            exe.set_active_extent(Some((1, 2)))
                .map_err(|e| format!("set_active_extent(1, 2): {e}"))?;
            let x = ramp(0.0);
            let out = exec(&mut exe, &[("x", &x), ("s", &fill(1.0))])?;
            if out[0].len() != 6 || out[1].len() != 6 {
                return Err("the outputs lost their declared shapes".into());
            }
            same("row 0 of next", &out[0][..3], &[1., 2., 3.])?;
            same("row 0 of y", &out[1][..3], &[11., 22., 33.])?;
            exe.set_active_extent(None)
                .map_err(|e| format!("set_active_extent(0, 0): {e}"))?;
            let out = exec(&mut exe, &[("x", &x), ("s", &fill(1.0))])?;
            same("next, cleared", &out[0], &values(&ramp(1.0)))
        })();
        r.into()
    });
    kit.record("active extent: out of bounds refused", |p| {
        let mut exe = match counter_exe(p, Mode::Lazy) {
            Ok(e) => e,
            Err(e) => return Outcome::Fail(e),
        };
        all(vec![
            (
                "3 of 2",
                expect_err(exe.set_active_extent(Some((3, 2))), &[INVALID]),
            ),
            (
                "0 of 2",
                expect_err(exe.set_active_extent(Some((0, 2))), &[INVALID]),
            ),
        ])
    });
}

pub(super) fn memory_usage(kit: &mut Kit) {
    kit.record("memory_usage: figures", |p| match p.memory_usage() {
        Ok(m) if m.peak_bytes >= m.active_bytes => Outcome::Ok,
        Ok(m) => Outcome::Fail(format!(
            "peak_bytes {} is below active_bytes {}",
            m.peak_bytes, m.active_bytes
        )),
        Err(e) => Outcome::Fail(format!("memory_usage: {e}")),
    });
    kit.record("memory_usage: a bound param is counted", |p| {
        match crate::graphs::additions_unclaimed(p) {
            Some(why) => Outcome::Skip(why),
            None => counted(p).into(),
        }
    });
    kit.record("memory_usage: NULL out", |p| {
        let f = p.raw_api().memory_usage.expect("offered");
        // SAFETY: the null out is under test.
        raw_expect(
            p,
            unsafe { f(std::ptr::null_mut::<RlxMemoryUsage>()) },
            INVALID,
        )
    });
}

/// Binding 4 MiB of weights grows `active_bytes` by at least half that.
fn counted(p: &Arc<LoadedPlugin>) -> Result<(), String> {
    use rlx_ir::{DType as IrDType, Graph, Shape};
    let dims = [1024, 1024];
    let mut g = Graph::new("big");
    let x = g.input("x", Shape::new(&dims, IrDType::F32));
    let w = g.param("w", Shape::new(&dims, IrDType::F32));
    let y = rlx_ir::infer::GraphExt::add(&mut g, x, w);
    g.set_outputs(vec![y]);
    let mut exe = compile(p, &g, Mode::Lazy)?;
    let active = || {
        p.memory_usage()
            .map(|m| m.active_bytes as i64)
            .map_err(|e| e.to_string())
    };
    let bytes = (dims[0] * dims[1] * 4) as i64;
    let before = active()?;
    exe.bind_param("w", &f32s(&dims, &vec![0.5; dims[0] * dims[1]]))
        .map_err(|e| format!("bind_param: {e}"))?;
    let grew = active()? - before;
    if grew < bytes / 2 {
        return Err(format!("binding {bytes} bytes grew active_bytes by {grew}"));
    }
    Ok(())
}
