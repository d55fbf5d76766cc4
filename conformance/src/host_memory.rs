//! Check 10, for a plugin whose minor is at least 11 (docs/ABI.md §23): host
//! memory mapped for transfers. A plugin that offers `dma_map` refuses what the
//! ABI names (a null or empty range, one overlapping a mapped range, an unmap
//! where no mapping starts) and changes nothing by refusing; ranges that only
//! touch are two mappings; and runs read their inputs from, and write their
//! outputs into, mapped memory with the same values as unmapped memory gives
//! (the kit's counter graph, exact small integers). A plugin that does not
//! offer it is one skipped check (the part is optional).

use crate::graphs::{counter, text, COUNTER};
use crate::{expect_err, Kit, Outcome};
use rlx_plugin_api::{DType, HostTensor, HostTensorRef, Mode, StatusCode};
use rlx_plugin_loader::LoadedPlugin;
use std::sync::Arc;

pub(crate) fn run(kit: &mut Kit) {
    let minor = kit.plugin.abi_version().minor;
    if minor < 11 {
        kit.skip(
            "host memory: not offered",
            format!("the plugin claims ABI 1.{minor}; this part is 1.11"),
        );
        return;
    }
    if !kit.plugin.offers().dma_map {
        kit.skip(
            "host memory: not offered",
            "RlxPluginApi::host_memory is null (no use for mapped memory)",
        );
        return;
    }
    kit.record("host memory: refusals change nothing", refusals);
    match crate::graphs::additions_unclaimed(&kit.plugin) {
        Some(why) => kit.skip("host memory: runs read and write mapped memory", why),
        None => kit.record("host memory: runs read and write mapped memory", runs),
    }
}

fn refusals(p: &Arc<LoadedPlugin>) -> Outcome {
    let mut buf = vec![0u8; 64];
    let at = buf.as_mut_ptr();
    // SAFETY: every range lies inside `buf`, alive to the end; each
    // mapping made here is undone before it returns.
    unsafe {
        if let Err(e) = p.dma_map_raw(at.add(16), 32) {
            return Outcome::Fail(format!("dma_map of 32 bytes: {e}"));
        }
        let steps = [
            (
                "a null data",
                expect_err(
                    p.dma_map_raw(std::ptr::null_mut(), 8),
                    &[StatusCode::InvalidArgument],
                ),
            ),
            (
                "a len of 0",
                expect_err(p.dma_map_raw(at, 0), &[StatusCode::InvalidArgument]),
            ),
            (
                "the same range",
                expect_err(
                    p.dma_map_raw(at.add(16), 32),
                    &[StatusCode::InvalidArgument],
                ),
            ),
            (
                "a range over its start",
                expect_err(p.dma_map_raw(at.add(8), 16), &[StatusCode::InvalidArgument]),
            ),
            (
                "a range inside it",
                expect_err(p.dma_map_raw(at.add(20), 4), &[StatusCode::InvalidArgument]),
            ),
            (
                "an unmap inside it",
                expect_err(p.dma_unmap_raw(at.add(20)), &[StatusCode::NotFound]),
            ),
        ];
        let mut outcome = Outcome::Ok;
        for (what, o) in steps {
            if let Outcome::Fail(why) = o {
                outcome = Outcome::Fail(format!("{what}: {why}"));
                break;
            }
        }
        // Touching ranges on both sides map, and every mapping unmaps once.
        let touching = p
            .dma_map_raw(at, 16)
            .and_then(|()| p.dma_map_raw(at.add(48), 16))
            .and_then(|()| p.dma_unmap_raw(at))
            .and_then(|()| p.dma_unmap_raw(at.add(48)));
        let unmapped = p.dma_unmap_raw(at.add(16));
        let again = expect_err(p.dma_unmap_raw(at.add(16)), &[StatusCode::NotFound]);
        match (outcome, touching, unmapped, again) {
            (Outcome::Ok, Ok(()), Ok(()), Outcome::Ok) => {}
            (Outcome::Fail(why), ..) => return Outcome::Fail(why),
            (_, Err(e), ..) => return Outcome::Fail(format!("ranges that only touch: {e}")),
            (_, _, Err(e), _) => return Outcome::Fail(format!("dma_unmap of the mapping: {e}")),
            (.., Outcome::Fail(why)) => return Outcome::Fail(format!("a second unmap: {why}")),
            _ => {}
        }
    }
    if buf.iter().any(|&b| b != 0) {
        return Outcome::Fail("mapping and refusals changed the memory's bytes".into());
    }
    Outcome::Ok
}

fn le_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn runs(p: &Arc<LoadedPlugin>) -> Outcome {
    let (x, s, w) = (
        [1., 2., 3., 4., 5., 6.],
        [7.0f32; 6],
        [10., 20., 30., 40., 50., 60.],
    );
    let next: Vec<f32> = x.iter().zip(&s).map(|(a, b)| a + b).collect();
    let y: Vec<f32> = next.iter().zip(&w).map(|(a, b)| a + b).collect();
    let (mut xb, mut sb, mut nb, mut yb) =
        (le_bytes(&x), le_bytes(&s), vec![0u8; 24], vec![0u8; 24]);
    let mappings = [&mut xb, &mut sb, &mut nb, &mut yb].map(|b| p.dma_map(b));
    let [Ok(xm), Ok(sm), Ok(mut nm), Ok(mut ym)] = mappings else {
        return Outcome::Fail("dma_map of a run's buffers failed".into());
    };
    for mode in [Mode::Lazy, Mode::Eager, Mode::Compiled] {
        let mut exe = match p.compile(&text(&counter()), mode) {
            Ok(e) => e,
            Err(e) => {
                return Outcome::Fail(format!("compiling the counter ({}): {e}", mode.name()))
            }
        };
        let bound =
            HostTensor::from_f32(COUNTER.to_vec(), &w).and_then(|t| exe.bind_param("w", &t));
        if let Err(e) = bound {
            return Outcome::Fail(format!("bind_param \"w\": {e}"));
        }
        let r = HostTensorRef::new(DType::F32, &COUNTER, &xm).and_then(|xt| {
            let st = HostTensorRef::new(DType::F32, &COUNTER, &sm)?;
            exe.run_refs_into(
                &[("x", xt), ("s", st)],
                &mut [Some(&mut nm[..]), Some(&mut ym[..])],
                |_| Ok(()),
            )
        });
        if let Err(e) = r {
            return Outcome::Fail(format!("a run over mapped memory ({}): {e}", mode.name()));
        }
        for (name, got, want) in [("next", &nm, &next), ("y", &ym, &y)] {
            if got[..] != le_bytes(want)[..] {
                return Outcome::Fail(format!(
                    "{} ({}): the output written into mapped memory is not {want:?}",
                    name,
                    mode.name()
                ));
            }
        }
        nm.fill(0);
        ym.fill(0);
    }
    Outcome::Ok
}
