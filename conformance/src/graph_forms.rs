//! Check 11, for a plugin whose minor is at least 12 (docs/ABI.md §24): graph
//! forms. A plugin that lists forms names each once; compiles the kit's graph
//! sent in this host's rlx-ir release's form (when it lists it) to an
//! executable that runs as the graph's text does, in every mode; and refuses a
//! form it does not list (`UNSUPPORTED`) and bytes that are no graph
//! (`INVALID_ARGUMENT`). A plugin that reads text only is one skipped check
//! (the part is optional).

use crate::graphs::{counter, text, COUNTER};
use crate::{expect_err, Kit, Outcome};
use rlx_plugin_api::graph_forms::this_rlx_ir_bincode;
use rlx_plugin_api::{CompileOptions, HostTensor, Mode, StatusCode};
use rlx_plugin_loader::LoadedPlugin;
use std::sync::Arc;

pub(crate) fn run(kit: &mut Kit) {
    let minor = kit.plugin.abi_version().minor;
    if minor < 12 {
        kit.skip(
            "graph forms: not offered",
            format!("the plugin claims ABI 1.{minor}; this part is 1.12"),
        );
        return;
    }
    if kit.plugin.graph_forms().is_empty() {
        kit.skip(
            "graph forms: not offered",
            "RlxPluginApi::graph_forms is null (the plugin reads text only)",
        );
        return;
    }
    kit.record("graph forms: names", names);
    kit.record("graph forms: refusals", refusals);
    let ours = this_rlx_ir_bincode();
    if !kit.plugin.graph_forms().contains(&ours) {
        kit.skip(
            "graph forms: a graph runs as its text does",
            format!("the plugin does not read {ours:?}, the one form this kit writes"),
        );
    } else if let Some(why) = crate::graphs::additions_unclaimed(&kit.plugin) {
        kit.skip("graph forms: a graph runs as its text does", why);
    } else {
        kit.record("graph forms: a graph runs as its text does", runs);
    }
}

fn names(p: &Arc<LoadedPlugin>) -> Outcome {
    let forms = p.graph_forms();
    if let Some(f) = forms.iter().find(|f| f.trim().is_empty()) {
        return Outcome::Fail(format!("an empty form name: {f:?}"));
    }
    for (i, f) in forms.iter().enumerate() {
        if forms[..i].contains(f) {
            return Outcome::Fail(format!("the form {f:?} is listed twice"));
        }
    }
    Outcome::Ok
}

fn refusals(p: &Arc<LoadedPlugin>) -> Outcome {
    let options = CompileOptions::mode(Mode::Lazy);
    let listed = &p.graph_forms()[0];
    let steps = [
        (
            "a form it does not list",
            expect_err(
                p.compile_form("no such form", b"\x01\x02\x03", &options),
                &[StatusCode::Unsupported],
            ),
        ),
        (
            "three bytes that are no graph",
            expect_err(
                p.compile_form(listed, b"\xff\xfe\xfd", &options),
                &[StatusCode::InvalidArgument],
            ),
        ),
        (
            "no bytes at all",
            expect_err(
                p.compile_form(listed, b"", &options),
                &[StatusCode::InvalidArgument],
            ),
        ),
    ];
    for (what, outcome) in steps {
        if let Outcome::Fail(why) = outcome {
            return Outcome::Fail(format!("{what}: {why}"));
        }
    }
    Outcome::Ok
}

fn runs(p: &Arc<LoadedPlugin>) -> Outcome {
    let g = counter();
    let tensor = |v: &[f32]| HostTensor::from_f32(COUNTER.to_vec(), v);
    let (x, s, w) = (
        [1., 2., 3., 4., 5., 6.],
        [7., -8., 0.5, 0., -0.25, 9.],
        [10., 20., 30., 40., 50., 60.],
    );
    for mode in [Mode::Lazy, Mode::Eager, Mode::Compiled] {
        let options = CompileOptions::mode(mode);
        let mut results = Vec::new();
        for sent_text in [true, false] {
            let exe = if sent_text {
                p.compile_with(&text(&g), &options)
            } else {
                p.compile_graph(&g, &options)
            };
            let out = exe.and_then(|mut exe| {
                exe.bind_param("w", &tensor(&w)?)?;
                let outputs = exe.run(&[("x", &tensor(&x)?), ("s", &tensor(&s)?)])?;
                Ok((exe.signature().to_vec(), outputs))
            });
            match out {
                Ok(r) => results.push(r),
                Err(e) => {
                    return Outcome::Fail(format!(
                        "the counter sent as {} ({}): {e}",
                        if sent_text { "text" } else { "a graph form" },
                        mode.name()
                    ))
                }
            }
        }
        let (text_run, form_run) = (&results[0], &results[1]);
        if text_run.0 != form_run.0 {
            return Outcome::Fail(format!(
                "{}: the signature differs: {:?} (text) against {:?}",
                mode.name(),
                text_run.0,
                form_run.0
            ));
        }
        let same = text_run.1.len() == form_run.1.len()
            && text_run
                .1
                .iter()
                .zip(&form_run.1)
                .all(|(a, b)| a.shape == b.shape && a.data == b.data);
        if !same {
            return Outcome::Fail(format!(
                "{}: the outputs differ from the text's",
                mode.name()
            ));
        }
    }
    Outcome::Ok
}
