//! Check 5: requests that must fail come back as statuses with the
//! documented codes (docs/ABI.md §6), never as crashes; null pointers the
//! ABI allows are accepted, those it does not are INVALID_ARGUMENT.

use super::exec::{base, refs, Base};
use super::raw::{expect_status, release_slots, RawExe};
use super::reference::{op_kinds, Leaf};
use super::{code_name, expect_err, Kit, Outcome};
use rlx_ir::infer::GraphExt;
use rlx_ir::op::PadMode;
use rlx_ir::{DType as IrDType, Graph, Shape};
use rlx_plugin_api::tables::{RlxCompileOptions, RlxExecutable, RlxLoweringTable, RlxOpList};
use rlx_plugin_api::{DType, HostTensor, Mode, RlxStr, StatusCode};
use rlx_plugin_loader::LoadedPlugin;
use std::ptr::{null, null_mut};

const INVALID: u32 = StatusCode::InvalidArgument as u32;
const UNSUPPORTED: u32 = StatusCode::Unsupported as u32;

pub(super) fn run(kit: &mut Kit) {
    kit.record("error: bad graph text", |p| {
        let r = p.compile("this is not an .rlxmodel graph {", Mode::Lazy);
        expect_err(r, &[StatusCode::InvalidArgument])
    });
    kit.record("error: unknown op name", |p| {
        expect_err(
            p.compile(&unknown_op_text(), Mode::Lazy),
            &[StatusCode::Unsupported],
        )
    });
    kit.record("error: unclaimed op", unclaimed_op);
    table_nulls(kit);
    let b = crate::guard::catch_quiet(|| base(&kit.plugin))
        .unwrap_or_else(|e| Err(format!("the kit panicked: {e}")));
    match b {
        Ok(b) => {
            compile_errors(kit, &b);
            run_errors(kit, &b);
            param_errors(kit, &b);
            slot_errors(kit, &b);
            exe_nulls(kit, &b);
        }
        Err(why) => kit.skip("error: executable checks", why),
    }
}

/// Well-formed text naming an op kind no rlx-ir has.
fn unknown_op_text() -> String {
    let mut g = Graph::new("conformance");
    let x = g.input("x", Shape::new(&[2], IrDType::F32));
    let y = g.relu(x);
    g.set_outputs(vec![y]);
    let text = rlx_ir::rlxmodel::to_text(&g).expect("a relu graph writes");
    text.replace("Activation(Relu)", "ConformanceNoSuchOp")
}

/// Single-op graphs of rlx-ir ops plugins rarely claim.
fn probes() -> Vec<Graph> {
    let one = |build: &dyn Fn(&mut Graph, rlx_ir::NodeId) -> rlx_ir::NodeId| {
        let mut g = Graph::new("conformance");
        let x = g.input("x", Shape::new(&[2, 3], IrDType::F32));
        let y = build(&mut g, x);
        g.set_outputs(vec![y]);
        g
    };
    vec![
        one(&|g, x| g.pad_(x, vec![[0, 0], [1, 1]], PadMode::Constant(0.0))),
        one(&|g, x| g.roll_(x, vec![1], vec![1])),
        one(&|g, x| g.tile_(x, vec![2, 1])),
        one(&|g, x| g.trilu_(x, true, 0)),
        one(&|g, x| g.cummax_(x, 1, false)),
        one(&|g, x| g.sm(x, -1)),
        one(&|g, x| g.transpose_(x, vec![1, 0])),
    ]
}

/// A real rlx-ir op the plugin does not list must be UNSUPPORTED.
fn unclaimed_op(p: &std::sync::Arc<LoadedPlugin>) -> Outcome {
    let claimed = |k: &str| p.supported_ops().iter().any(|o| o.op_kind == k);
    let probe = probes().into_iter().find(|g| {
        let kinds = op_kinds(g);
        kinds.len() == 1 && !claimed(&kinds[0])
    });
    let Some(g) = probe else {
        return Outcome::Skip("the plugin claims every op the kit probes with".into());
    };
    let text = match rlx_ir::rlxmodel::to_text(&g) {
        Ok(t) => t,
        Err(e) => return Outcome::Skip(format!("the kit cannot write the probe: {e}")),
    };
    match expect_err(p.compile(&text, Mode::Lazy), &[StatusCode::Unsupported]) {
        Outcome::Fail(why) => Outcome::Fail(format!("{}: {why}", op_kinds(&g)[0])),
        o => o,
    }
}

fn table_nulls(kit: &mut Kit) {
    kit.record("error: supported_ops(NULL)", |p| {
        let api = p.raw_api();
        // SAFETY: null `out` is the case under test; the plugin must refuse it.
        let s = unsafe { (api.supported_ops.unwrap())(null_mut::<RlxOpList>()) };
        expect_status(api, s, INVALID)
    });
    kit.record("error: lowering_table(NULL)", |p| {
        let api = p.raw_api();
        // SAFETY: as above.
        let s = unsafe { (api.lowering_table.unwrap())(null_mut::<RlxLoweringTable>()) };
        expect_status(api, s, INVALID)
    });
    kit.record("error: executable_destroy(NULL) is a no-op", |p| {
        // SAFETY: the ABI makes null a no-op.
        unsafe { (p.raw_api().executable_destroy.unwrap())(null_mut()) };
        Outcome::Ok
    });
    kit.record("error: status_free(NULL) is a no-op", |p| {
        // SAFETY: the ABI makes null a no-op.
        unsafe { (p.raw_api().status_free.unwrap())(null_mut()) };
        Outcome::Ok
    });
}

fn compile_errors(kit: &mut Kit, b: &Base) {
    kit.record("error: unknown mode", |p| {
        let api = p.raw_api();
        let opts = RlxCompileOptions {
            mode: 99,
            ..Default::default()
        };
        match RawExe::compile(api, &b.text, &opts) {
            Ok(_) => Outcome::Fail("mode 99 compiled; expected UNSUPPORTED (2)".into()),
            Err(e) if e.contains(&code_name(UNSUPPORTED)) => Outcome::Ok,
            Err(e) => Outcome::Fail(format!("{e}; expected {}", code_name(UNSUPPORTED))),
        }
    });
    kit.record("error: compile with null options uses the defaults", |p| {
        RawExe::compile(p.raw_api(), &b.text, null())
            .map(drop)
            .into()
    });
    kit.record("error: compile with a null out", |p| {
        let api = p.raw_api();
        let opts = RlxCompileOptions::default();
        // SAFETY: null `out` is the case under test.
        let s = unsafe {
            (api.compile.unwrap())(
                RlxStr::from_str(&b.text),
                &opts,
                null_mut::<*mut RlxExecutable>(),
            )
        };
        expect_status(api, s, INVALID)
    });
}

/// `t` as another dtype (f32 → i32, anything else → f32).
fn other_dtype(l: &Leaf) -> HostTensor {
    let to = if l.dtype == DType::F32 {
        DType::I32
    } else {
        DType::F32
    };
    let bytes = rlx_plugin_api::convert::f32_to_bytes(to, &l.values).expect("f32 or i32");
    HostTensor::new(to, l.shape.clone(), bytes).expect("sized")
}

/// `t` with its last dimension one larger (scalars become [2]).
fn other_shape(t: &HostTensor) -> HostTensor {
    let mut shape = t.shape.clone();
    match shape.last_mut() {
        Some(d) => *d += 1,
        None => shape.push(2),
    }
    let n: usize = shape.iter().product();
    HostTensor::new(t.dtype, shape, vec![0; n * t.dtype.size_bytes()]).expect("sized")
}

/// A fresh lazy executable with every param bound.
fn bound(
    p: &std::sync::Arc<LoadedPlugin>,
    b: &Base,
) -> Result<rlx_plugin_loader::PluginExecutable, String> {
    let mut exe = p.compile(&b.text, Mode::Lazy).map_err(|e| e.to_string())?;
    for (n, t) in b.params() {
        exe.bind_param(&n, &t).map_err(|e| e.to_string())?;
    }
    Ok(exe)
}

/// Run `b` with its first input replaced by `make(first leaf)`, or with
/// no inputs when `make` is None.
fn run_with(
    p: &std::sync::Arc<LoadedPlugin>,
    b: &Base,
    make: Option<&dyn Fn(&Leaf) -> HostTensor>,
) -> Outcome {
    let mut exe = match bound(p, b) {
        Ok(e) => e,
        Err(e) => return Outcome::Skip(format!("the base graph does not compile: {e}")),
    };
    let mut inputs = b.inputs();
    let Some(first) = b.leaves.iter().find(|l| !l.is_param) else {
        return Outcome::Skip(format!("{} has no inputs", b.what));
    };
    match make {
        Some(f) => inputs[0].1 = f(first),
        None => inputs.clear(),
    }
    expect_err(exe.run(&refs(&inputs)), &[StatusCode::InvalidArgument])
}

fn run_errors(kit: &mut Kit, b: &Base) {
    kit.record("error: missing input", |p| run_with(p, b, None));
    kit.record("error: wrong input dtype", |p| {
        run_with(p, b, Some(&other_dtype))
    });
    kit.record("error: wrong input shape", |p| {
        run_with(p, b, Some(&|l: &Leaf| other_shape(&l.tensor())))
    });
}

fn param_errors(kit: &mut Kit, b: &Base) {
    // No section of the ABI names this code: NOT_FOUND (a lookup by name
    // found nothing) and INVALID_ARGUMENT (a bad argument) both fit.
    kit.record("error: unknown param name", |p| {
        let mut exe = match p.compile(&b.text, Mode::Lazy) {
            Ok(e) => e,
            Err(e) => return Outcome::Skip(format!("the base graph does not compile: {e}")),
        };
        let t = HostTensor::from_f32(vec![1], &[1.0]).expect("one element");
        let r = exe.bind_param("conformance.no_such_param", &t);
        expect_err(r, &[StatusCode::NotFound, StatusCode::InvalidArgument])
    });
    let Some((name, t)) = b.params().into_iter().next() else {
        let why = format!("{} has no params", b.what);
        kit.skip("error: wrong param shape", why.clone());
        kit.skip("error: unbound param", why);
        return;
    };
    kit.record("error: wrong param shape", |p| {
        let mut exe = match p.compile(&b.text, Mode::Lazy) {
            Ok(e) => e,
            Err(e) => return Outcome::Skip(format!("the base graph does not compile: {e}")),
        };
        expect_err(
            exe.bind_param(&name, &other_shape(&t)),
            &[StatusCode::InvalidArgument],
        )
    });
    kit.record("error: unbound param", |p| {
        let mut exe = match p.compile(&b.text, Mode::Lazy) {
            Ok(e) => e,
            Err(e) => return Outcome::Skip(format!("the base graph does not compile: {e}")),
        };
        expect_err(exe.run(&refs(&b.inputs())), &[StatusCode::InvalidArgument])
    });
}

/// A raw executable of `b` with its params bound.
fn raw_bound<'a>(p: &'a LoadedPlugin, b: &Base) -> Result<RawExe<'a>, String> {
    let exe = RawExe::compile(p.raw_api(), &b.text, null())?;
    for (n, t) in b.params() {
        exe.bind(&n, &t)?;
    }
    Ok(exe)
}

/// `executable_run` with `delta` slots more (or fewer) than outputs must
/// fail and fill no slot.
fn slots_off_by(p: &LoadedPlugin, b: &Base, delta: isize) -> Outcome {
    let exe = match raw_bound(p, b) {
        Ok(e) => e,
        Err(e) => return Outcome::Skip(format!("the base graph does not run: {e}")),
    };
    let n = b.graph.outputs.len() as isize + delta;
    if n < 0 {
        return Outcome::Skip("the graph has no outputs to leave out".into());
    }
    let inputs = b.inputs();
    let (status, slots) = exe.run(&refs(&inputs), n as usize);
    let filled = release_slots(slots);
    match status {
        None => Outcome::Fail(format!(
            "run with {n} slots for {} outputs succeeded; expected {}",
            b.graph.outputs.len(),
            code_name(INVALID)
        )),
        Some((code, msg)) if code != INVALID => Outcome::Fail(format!(
            "returned {} ({msg}); expected {}",
            code_name(code),
            code_name(INVALID)
        )),
        Some(_) if filled > 0 => {
            Outcome::Fail(format!("the run failed but wrote {filled} output slots"))
        }
        Some(_) => Outcome::Ok,
    }
}

fn slot_errors(kit: &mut Kit, b: &Base) {
    kit.record("error: n_outputs one too many", |p| slots_off_by(p, b, 1));
    kit.record("error: n_outputs one too few", |p| slots_off_by(p, b, -1));
}

/// Null pointers in the executable functions: INVALID_ARGUMENT each.
fn exe_nulls(kit: &mut Kit, b: &Base) {
    type Call = fn(
        &rlx_plugin_api::tables::RlxPluginApi,
        *mut RlxExecutable,
    ) -> *mut rlx_plugin_api::RlxStatus;
    let calls: [(&str, Call); 4] = [
        (
            "executable_signature(exe, NULL visitor)",
            |api, exe| unsafe {
                // SAFETY: a live executable; the null visitor is under test.
                (api.executable_signature.unwrap())(exe, null())
            },
        ),
        (
            "executable_bind_param(exe, name, NULL tensor)",
            |api, exe| unsafe {
                // SAFETY: as above, the null tensor.
                (api.executable_bind_param.unwrap())(exe, RlxStr::from_str("w"), null())
            },
        ),
        ("executable_run(NULL exe)", |api, _| unsafe {
            // SAFETY: the null executable is under test.
            (api.executable_run.unwrap())(null_mut(), null(), 0, null_mut(), 0)
        }),
        ("executable_run(exe, NULL inputs, 1)", |api, exe| unsafe {
            // SAFETY: a live executable; null inputs with a count of 1.
            let mut slot = rlx_plugin_api::RlxTensor::empty();
            let s = (api.executable_run.unwrap())(exe, null(), 1, &mut slot, 1);
            release_slots(vec![slot]);
            s
        }),
    ];
    for (what, call) in calls {
        kit.record(format!("error: {what}"), |p| {
            let api = p.raw_api();
            let exe = match RawExe::compile(api, &b.text, null()) {
                Ok(e) => e,
                Err(e) => return Outcome::Skip(format!("the base graph does not compile: {e}")),
            };
            expect_status(api, call(api, exe.exe), INVALID)
        });
    }
}
