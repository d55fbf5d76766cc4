//! Check 7, the custom-op registry, for a plugin whose minor is at least 1:
//! list and lookup, a host kernel registered, looked up, executed, refused
//! twice, unregistered; its context dropped exactly when the ABI says; null
//! pointers refused.

use super::raw::expect_status;
use super::{expect_err, Kit, Outcome};
use rlx_plugin_api::tables::RlxCustomOpApi;
use rlx_plugin_api::{CustomOpInfo, HostTensor, Origin, PluginError, RlxStr, StatusCode};
use rlx_plugin_loader::LoadedPlugin;
use std::ptr::null;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

pub(super) fn run(kit: &mut Kit) {
    if kit.plugin.abi_version().minor == 0 {
        kit.skip(
            "custom ops",
            "an ABI 1.0 plugin has no custom-op registry (1.1+)",
        );
        return;
    }
    let Some(api) = kit.plugin.raw_custom_ops().map(copy_api) else {
        kit.skip(
            "custom ops",
            "custom_ops is null (the plugin has no registry)",
        );
        return;
    };
    let mut listed = Vec::new();
    kit.record("custom: list", |p| list(p).map(|l| listed = l).into());
    for info in &listed {
        kit.record(format!("custom: lookup {}", info.name), |p| {
            lookup_same(p, info).into()
        });
    }
    host_kernel(kit);
    failing_kernel(kit);
    duplicate(kit);
    nulls(kit, &api);
    if kit.plugin.abi_version().minor >= 5 {
        in_place_kernel(kit);
    } else {
        kit.skip(
            "custom: 1.5 registry",
            "attributes, shape rules and in-place kernels are ABI 1.5",
        );
    }
}

/// For a plugin whose minor is at least 5: an in-place kernel with a shape
/// rule: its shape is inferred, its attributes arrive unchanged, and
/// `infer_shape` refuses a null `out`.
fn in_place_kernel(kit: &mut Kit) {
    use rlx_plugin_api::{CustomImpl, CustomKernel, CustomOp, ShapeRule, TensorType};
    let name = fresh_name("add_attr");
    let kernel: CustomKernel = Arc::new(|ins, outs, attrs| {
        // y = x + attrs[0]: the attribute bytes are the test.
        let add = f32::from(*attrs.first().unwrap_or(&0));
        for (o, x) in outs[0].data.chunks_mut(4).zip(ins[0].data.chunks(4)) {
            let v = f32::from_le_bytes(x.try_into().expect("4 bytes")) + add;
            o.copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    });
    let op = CustomOp::new(
        &name,
        "x + attrs[0]",
        1,
        Origin::Host,
        CustomImpl::Kernel(kernel),
    )
    .with_shape(ShapeRule::SameAsInput(0));
    let mut ok = false;
    kit.record("custom: register an in-place kernel (1.5)", |p| {
        match p.register_op(op) {
            Ok(()) => {
                ok = true;
                Outcome::Ok
            }
            // §12: a plugin that does not implement in-place kernels refuses
            // them so (the C plugin takes only kernels that return their
            // outputs).
            Err(e) if e.code == StatusCode::Unsupported => Outcome::Skip(format!(
                "the plugin takes no in-place kernels (UNSUPPORTED, as §12 allows): {}",
                e.message
            )),
            Err(e) => Outcome::Fail(e.to_string()),
        }
    });
    if !ok {
        return;
    }
    kit.record("custom: infer_shape by the op's rule (1.5)", |p| {
        let t = TensorType {
            dtype: rlx_plugin_api::DType::F32,
            shape: vec![2, 3],
        };
        match p.infer_custom_shape(&name, std::slice::from_ref(&t), &[]) {
            Ok(got) if got == t => Outcome::Ok,
            Ok(got) => Outcome::Fail(format!("inferred {got}, expected {t}")),
            Err(e) => Outcome::Fail(e.to_string()),
        }
    });
    kit.record("custom: attributes reach the kernel (1.5)", |p| {
        let x = HostTensor::from_f32(vec![3], &[1.0, -2.0, 0.5]).expect("three elements");
        match p.execute_custom_op_with(&name, &[x], &[4], 1) {
            Ok(out) if out.len() == 1 && out[0].to_f32_vec().ok() == Some(vec![5.0, 2.0, 4.5]) => {
                Outcome::Ok
            }
            Ok(out) => Outcome::Fail(format!("got {out:?}, expected [5, 2, 4.5]")),
            Err(e) => Outcome::Fail(e.to_string()),
        }
    });
    if let Some(f) = kit.plugin.raw_custom_ops().and_then(|a| a.infer_shape) {
        kit.record("custom: infer_shape(.., NULL out) (1.5)", |p| {
            // SAFETY: no inputs and a null out are under test.
            let s = unsafe {
                f(
                    RlxStr::from_str(&name),
                    null(),
                    0,
                    null(),
                    0,
                    std::ptr::null_mut(),
                )
            };
            expect_status(p.raw_api(), s, StatusCode::InvalidArgument as u32)
        });
    }
    let _ = kit.plugin.unregister_custom_op(&name);
}

fn copy_api(a: &RlxCustomOpApi) -> RlxCustomOpApi {
    RlxCustomOpApi {
        struct_size: a.struct_size,
        register_op: a.register_op,
        unregister: a.unregister,
        lookup: a.lookup,
        list: a.list,
        execute: a.execute,
        infer_shape: a.infer_shape,
        execute_attrs: a.execute_attrs,
    }
}

/// A name no other run, test or plugin uses.
fn fresh_name(what: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "conformance.{what}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn list(p: &LoadedPlugin) -> Result<Vec<CustomOpInfo>, String> {
    let ops = p.list_custom_ops().map_err(|e| e.to_string())?;
    if let Some(o) = ops.iter().find(|o| o.name.is_empty()) {
        return Err(format!("an op with an empty name ({:?})", o.description));
    }
    if ops.windows(2).any(|w| w[0].name >= w[1].name) {
        let names: Vec<&str> = ops.iter().map(|o| o.name.as_str()).collect();
        return Err(format!("not in name order: {names:?}"));
    }
    Ok(ops)
}

fn lookup_same(p: &LoadedPlugin, want: &CustomOpInfo) -> Result<(), String> {
    let got = p.lookup_custom_op(&want.name).map_err(|e| e.to_string())?;
    if &got != want {
        return Err(format!("lookup gives {got:?}, list gave {want:?}"));
    }
    Ok(())
}

/// y = 3x + 1, elementwise (exact in f32 for the values used).
fn triple_plus_one(ins: &[HostTensor]) -> rlx_plugin_api::PluginResult<Vec<HostTensor>> {
    let v: Vec<f32> = ins[0].to_f32_vec()?.iter().map(|x| 3.0 * x + 1.0).collect();
    Ok(vec![HostTensor::from_f32(ins[0].shape.clone(), &v)?])
}

fn host_kernel(kit: &mut Kit) {
    let name = fresh_name("triple");
    let ctx = Arc::new(());
    let mut registered = false;
    kit.record("custom: register a host kernel", |p| {
        let keep = ctx.clone();
        let r = p.register_custom_op(&name, "3x + 1", 1, 1, move |ins| {
            let _ = &keep;
            triple_plus_one(ins)
        });
        registered = r.is_ok();
        r.map_err(|e| e.to_string()).into()
    });
    if !registered {
        kit.skip("custom: host kernel checks", "registration failed");
        return;
    }
    kit.record("custom: lookup shows origin host", |p| {
        lookup_host(p, &name).into()
    });
    kit.record("custom: list shows the host kernel", |p| {
        match p.list_custom_ops() {
            Ok(l) if l.iter().any(|o| o.name == name) => Outcome::Ok,
            Ok(_) => Outcome::Fail(format!("{name:?} is not listed")),
            Err(e) => Outcome::Fail(e.to_string()),
        }
    });
    kit.record("custom: execute the host kernel", |p| {
        execute(p, &name).into()
    });
    kit.record("custom: execute with the wrong input count", |p| {
        let x = HostTensor::from_f32(vec![1], &[1.0]).expect("one element");
        let r = p.execute_custom_op(&name, &[x.clone(), x], 1);
        expect_err(r, &[StatusCode::InvalidArgument])
    });
    unregister(kit, &name, &ctx);
}

fn lookup_host(p: &LoadedPlugin, name: &str) -> Result<(), String> {
    let i = p.lookup_custom_op(name).map_err(|e| e.to_string())?;
    if i.origin != Origin::Host || (i.n_inputs, i.n_outputs) != (1, 1) || i.description != "3x + 1"
    {
        return Err(format!("lookup gives {i:?}"));
    }
    Ok(())
}

fn execute(p: &LoadedPlugin, name: &str) -> Result<(), String> {
    let x = [0.5f32, -1.0, 2.0, 0.0, 8.0, -0.25];
    let t = HostTensor::from_f32(vec![2, 3], &x).expect("six elements");
    let out = p
        .execute_custom_op(name, &[t], 1)
        .map_err(|e| e.to_string())?;
    let want: Vec<f32> = x.iter().map(|v| 3.0 * v + 1.0).collect();
    match out.as_slice() {
        [y] if y.shape == [2, 3] && y.to_f32_vec().ok().as_deref() == Some(&want[..]) => Ok(()),
        _ => Err(format!("got {out:?}, expected [2, 3] {want:?}")),
    }
}

fn unregister(kit: &mut Kit, name: &str, ctx: &Arc<()>) {
    kit.record("custom: unregister drops the kernel context once", |p| {
        if let Err(e) = p.unregister_custom_op(name) {
            return Outcome::Fail(e.to_string());
        }
        match Arc::strong_count(ctx) {
            1 => Outcome::Ok,
            n => Outcome::Fail(format!(
                "after unregister the kernel context is still held ({} references)",
                n - 1
            )),
        }
    });
    kit.record("custom: lookup after unregister", |p| {
        expect_err(p.lookup_custom_op(name), &[StatusCode::NotFound])
    });
    kit.record("custom: unregister again", |p| {
        expect_err(p.unregister_custom_op(name), &[StatusCode::NotFound])
    });
    kit.record("custom: execute an unknown op", |p| {
        let x = HostTensor::from_f32(vec![1], &[1.0]).expect("one element");
        expect_err(p.execute_custom_op(name, &[x], 1), &[StatusCode::NotFound])
    });
}

/// A kernel's error status (made with the plugin's `status_new`) comes
/// back through `execute` with its code and message.
fn failing_kernel(kit: &mut Kit) {
    kit.record("custom: a kernel's error comes back", |p| {
        let name = fresh_name("fails");
        let r = p.register_custom_op(&name, "always fails", 1, 1, |_| {
            Err(PluginError::invalid_argument("conformance kernel error"))
        });
        if let Err(e) = r {
            return Outcome::Fail(format!("register: {e}"));
        }
        let x = HostTensor::from_f32(vec![1], &[1.0]).expect("one element");
        let got = p.execute_custom_op(&name, &[x], 1);
        let _ = p.unregister_custom_op(&name);
        match got {
            Err(e)
                if e.code == StatusCode::InvalidArgument
                    && e.message.contains("conformance kernel error") =>
            {
                Outcome::Ok
            }
            Err(e) => Outcome::Fail(format!("came back as {e}")),
            Ok(_) => Outcome::Fail("the failing kernel's execute succeeded".into()),
        }
    });
}

/// Registering a taken name is ALREADY_EXISTS, and the refused
/// registration's context is dropped at once.
fn duplicate(kit: &mut Kit) {
    kit.record("custom: duplicate register", |p| {
        let name = fresh_name("dup");
        if let Err(e) = p.register_custom_op(&name, "first", 1, 1, triple_plus_one) {
            return Outcome::Fail(format!("the first register failed: {e}"));
        }
        let ctx = Arc::new(());
        let keep = ctx.clone();
        let r = p.register_custom_op(&name, "second", 1, 1, move |ins| {
            let _ = &keep;
            triple_plus_one(ins)
        });
        let _ = p.unregister_custom_op(&name);
        match expect_err(r, &[StatusCode::AlreadyExists]) {
            Outcome::Ok if Arc::strong_count(&ctx) != 1 => {
                Outcome::Fail("the refused registration's kernel context was not dropped".into())
            }
            o => o,
        }
    });
}

fn nulls(kit: &mut Kit, api: &RlxCustomOpApi) {
    const INVALID: u32 = StatusCode::InvalidArgument as u32;
    if let Some(f) = api.register_op {
        kit.record("custom: register_op(NULL)", |p| {
            // SAFETY: the null desc is under test.
            expect_status(p.raw_api(), unsafe { f(null()) }, INVALID)
        });
    }
    if let Some(f) = api.list {
        kit.record("custom: list(NULL visitor)", |p| {
            // SAFETY: the null visitor is under test.
            expect_status(p.raw_api(), unsafe { f(null()) }, INVALID)
        });
    }
    if let Some(f) = api.lookup {
        kit.record("custom: lookup(name, NULL visitor)", |p| {
            // A registered name, so that only the visitor is wrong.
            let name = fresh_name("lookup_null");
            if let Err(e) = p.register_custom_op(&name, "", 1, 1, triple_plus_one) {
                return Outcome::Skip(format!("cannot register an op to look up: {e}"));
            }
            // SAFETY: the null visitor is under test.
            let s = unsafe { f(RlxStr::from_str(&name), null()) };
            let _ = p.unregister_custom_op(&name);
            expect_status(p.raw_api(), s, INVALID)
        });
    }
}
