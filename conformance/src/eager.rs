//! Check 3: every lowering entry's eager `execute` on the generated
//! single-op graphs, against rlx-runtime's CPU backend, and an eager call
//! with the wrong input count.

use super::cases::{case_leaves, cases_for, Case};
use super::reference::{compare, cpu_reference, Leaf};
use super::{code_name, expect_err, Kit, Outcome};
use rlx_plugin_api::{DType, HostTensor, StatusCode};
use rlx_plugin_loader::{LoadedPlugin, LoweringInfo};
use std::collections::BTreeSet;

pub(super) fn run(kit: &mut Kit) {
    let table = kit.plugin.lowering_table();
    for entry in &table {
        entry_checks(kit, entry);
    }
    input_count(kit, &table);
}

fn entry_checks(kit: &mut Kit, entry: &LoweringInfo) {
    let op = &entry.op_kind;
    if !entry.eager {
        kit.skip(format!("eager {op}"), "no eager entry (execute is null)");
        return;
    }
    let cases = cases_for(op);
    if cases.is_empty() {
        kit.skip(format!("eager {op}"), format!("no generated case for {op}"));
        return;
    }
    let (listed, unlisted): (Vec<Case>, Vec<Case>) = cases
        .into_iter()
        .partition(|c| entry.dtypes.contains(&c.dtype));
    // The first case of each dtype is the op's simplest form: refusing it
    // (UNSUPPORTED) contradicts the entry's own dtype list.
    let mut seen: BTreeSet<DType> = BTreeSet::new();
    for c in &listed {
        let primary = seen.insert(c.dtype);
        kit.record(format!("eager {}", c.label()), |p| {
            eager_case(p, c, primary)
        });
    }
    let missing: BTreeSet<&str> = unlisted.iter().map(|c| c.dtype.name()).collect();
    if !missing.is_empty() {
        let names = missing.into_iter().collect::<Vec<_>>().join(",");
        kit.skip(
            format!("eager {op} {names}"),
            "the entry does not list these dtypes",
        );
    }
}

/// What a case sends and expects: graph text, inputs, reference outputs.
struct Prepared {
    text: String,
    inputs: Vec<HostTensor>,
    want: Vec<Vec<f32>>,
}

/// `Err` is the reason to skip: a limit of the kit, not the plugin.
fn prepare(c: &Case) -> Result<Prepared, String> {
    let text = rlx_ir::rlxmodel::to_text(&c.graph)
        .map_err(|e| format!("the kit cannot write the graph: {e}"))?;
    let leaves = case_leaves(c)?;
    let want = cpu_reference(&c.graph, &leaves)
        .map_err(|e| format!("the CPU reference cannot run it: {e}"))?;
    Ok(Prepared {
        text,
        inputs: leaves.iter().map(Leaf::tensor).collect(),
        want,
    })
}

fn eager_case(p: &LoadedPlugin, c: &Case, primary: bool) -> Outcome {
    let prep = match prepare(c) {
        Ok(x) => x,
        Err(why) => return Outcome::Skip(why),
    };
    match p.execute_op(c.op_kind, &prep.text, &prep.inputs) {
        Ok(got) => compare(&c.graph, &got, &prep.want).into(),
        Err(e) if e.code == StatusCode::Unsupported && !primary => {
            Outcome::Skip(format!("the plugin answered UNSUPPORTED: {}", e.message))
        }
        Err(e) if e.code == StatusCode::Unsupported => Outcome::Fail(format!(
            "the entry lists {} but refuses the op's simplest form: {}",
            c.dtype, e.message
        )),
        Err(e) => Outcome::Fail(format!("{}: {}", code_name(e.code as u32), e.message)),
    }
}

/// The first eager case the plugin runs, preferring one of several
/// inputs (so that one too few still leaves an input).
fn count_probe(p: &LoadedPlugin, table: &[LoweringInfo]) -> Option<(Case, Prepared)> {
    let mut single = None;
    for entry in table.iter().filter(|e| e.eager) {
        let runs = cases_for(&entry.op_kind)
            .into_iter()
            .filter(|c| entry.dtypes.contains(&c.dtype))
            .find_map(|c| {
                let prep = prepare(&c).ok()?;
                let ok = !prep.inputs.is_empty()
                    && p.execute_op(c.op_kind, &prep.text, &prep.inputs).is_ok();
                ok.then_some((c, prep))
            });
        match runs {
            Some(x) if x.1.inputs.len() >= 2 => return Some(x),
            Some(x) => {
                single.get_or_insert(x);
            }
            None => {}
        }
    }
    single
}

fn input_count(kit: &mut Kit, table: &[LoweringInfo]) {
    let probe = crate::guard::catch_quiet(|| count_probe(&kit.plugin, table))
        .ok()
        .flatten();
    let Some((c, prep)) = probe else {
        let why = "no eager case ran, so there is nothing to call wrongly";
        kit.skip("eager: too few inputs", why);
        kit.skip("eager: too many inputs", why);
        return;
    };
    let n = prep.inputs.len();
    let fewer = prep.inputs[..n - 1].to_vec();
    let mut more = prep.inputs.clone();
    more.push(prep.inputs[0].clone());
    let want = [StatusCode::InvalidArgument];
    kit.record(
        format!("eager: too few inputs ({} with {})", c.label(), n - 1),
        |p| expect_err(p.execute_op(c.op_kind, &prep.text, &fewer), &want),
    );
    kit.record(
        format!("eager: too many inputs ({} with {})", c.label(), n + 1),
        |p| expect_err(p.execute_op(c.op_kind, &prep.text, &more), &want),
    );
}
