//! `Fft` with rlx's pocketfft rounding (`OpKind::FftPocketFft`) as one
//! kernel: each row through `rlx_pocketfft::engine`, pocketfft's own
//! passes, as rlx-cpu's row kernel runs them (the same plan, contraction,
//! twiddles and `fct`), so the bits are the CPU backend's.
//!
//! Why: a backend that does not claim the op kind gets each such `Fft`
//! rewritten by rlx-runtime into its bit-exact replay in elementwise nodes
//! (rlx-fusion's `LowerPocketFft`): one node per scalar operation of every
//! pass, 2,188 to 16,158 nodes for the transforms of rlx-runtime's
//! `fft_algo_bench`, where the CPU backend runs one row kernel. The
//! kernel runs on the CPU stream on every device (on a GPU the replay was
//! a launch per node, 24x to 57x the CPU backend).

use super::{arity, Ctx, LResult, Lowering};
use crate::row;
use rlx_ir::fft::{FftAlgo, FftContraction, FftTwiddles};
use rlx_ir::DType as IrDType;
use rlx_mlx_shim::host_kernel::{host_kernel_node, HostCall};
use rlx_mlx_shim::Array;
use rlx_pocketfft::engine::{C2cPlan, Contraction, Cx, Options, Real, Twiddles};
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

const DTYPES: &[IrDType] = &[IrDType::F32, IrDType::F64];

pub fn entries() -> Vec<Lowering> {
    vec![row!(
        FftPocketFft,
        DTYPES,
        Native,
        "each row of the 2N block layout through rlx_pocketfft's engine (the CPU backend's row kernel: same plan, contraction, twiddles, fct), on the CPU stream",
        fft_pocketfft
    )]
}

fn fft_pocketfft(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 1, "Fft")?;
    crate::op_fields!(
        cx,
        Fft {
            inverse,
            norm,
            algo,
        }
    );
    let FftAlgo::PocketFft {
        contraction,
        twiddles,
    } = *algo
    else {
        return Err(format!("the pocketfft lowering was given Fft algo {algo:?}").into());
    };
    let dt = cx.out_ir_dtype();
    if !DTYPES.contains(&dt) || cx.in_dtype(0) != dt {
        return Err(
            format!("Fft (pocketfft) on {dt:?} is not lowered (F32 and F64 block layout)").into(),
        );
    }
    let n = super::signal::block_n(a[0], "Fft")? as usize;
    let opt = Options {
        contraction: match contraction {
            FftContraction::Clang => Contraction::Clang,
            FftContraction::None => Contraction::None,
        },
        twiddles: match twiddles {
            FftTwiddles::Platform => Twiddles::Platform,
            FftTwiddles::AppleSinCos => Twiddles::AppleSinCos,
            FftTwiddles::Separate => Twiddles::Separate,
        },
    };
    let (forward, scale) = (!*inverse, norm.output_scale(n, *inverse));
    let run = move |ins: &[(usize, usize)], (out, len): (usize, usize)| {
        let (src, src_len) = ins[0];
        debug_assert_eq!(src_len, len);
        if dt == IrDType::F64 {
            rows::<f64>(src, out, len / 8, n, forward, scale, opt);
        } else {
            rows::<f32>(src, out, len / 4, n, forward, scale as f32, opt);
        }
    };
    // A host kernel runs on the CPU stream on every device (the engine is
    // host code); on a GPU, MLX moves the rows across.
    Ok(host_kernel_node(
        &[a[0]],
        HostCall::new(run),
        &cx.out_dims(),
        cx.out_dtype(),
    )?)
}

/// The plan of `n`-point transforms of `T` with `opt`: a pure function of
/// its key, built once per process (the cache is emptied past 64 plans).
fn plan<T: Real + Send + Sync + 'static>(n: usize, opt: Options) -> Arc<C2cPlan<T>> {
    type Cache = HashMap<(TypeId, usize, Options), Arc<dyn Any + Send + Sync>>;
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    let key = (TypeId::of::<T>(), n, opt);
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(p) = cache.get(&key) {
        if let Ok(p) = p.clone().downcast::<C2cPlan<T>>() {
            return p;
        }
    }
    let p = Arc::new(C2cPlan::<T>::new(n, opt));
    if cache.len() >= 64 {
        cache.clear();
    }
    cache.insert(key, p.clone());
    p
}

/// Transform the `elems / (2 n)` rows of block layout at `src` into
/// `dst` (row-contiguous, `elems` values of `T` each), split over threads
/// when there are many (as rlx-cpu splits them over its pool).
fn rows<T: Real + Send + Sync + 'static>(
    src: usize,
    dst: usize,
    elems: usize,
    n: usize,
    forward: bool,
    fct: T,
    opt: Options,
) {
    if n == 0 {
        return;
    }
    let outer = elems / (2 * n);
    let plan = plan::<T>(n, opt);
    let run = |first: usize, count: usize| {
        let mut row: Vec<Cx<T>> = Vec::with_capacity(n);
        for o in first..first + count {
            // SAFETY: the host kernel hands over row-contiguous buffers of
            // `elems` values of `T`; row `o` is inside both.
            let (s, d) = unsafe {
                (
                    std::slice::from_raw_parts((src as *const T).add(o * 2 * n), 2 * n),
                    std::slice::from_raw_parts_mut((dst as *mut T).add(o * 2 * n), 2 * n),
                )
            };
            row.clear();
            row.extend((0..n).map(|k| Cx::new(s[k], s[n + k])));
            plan.exec(&mut row, forward, fct);
            for (k, c) in row.iter().enumerate() {
                d[k] = c.r;
                d[n + k] = c.i;
            }
        }
    };
    let threads = super::host_kernel::cores();
    if outer >= 8 && outer * n >= 1 << 15 && threads > 1 {
        let per = outer.div_ceil(threads.min(outer));
        std::thread::scope(|s| {
            for first in (0..outer).step_by(per) {
                let run = &run;
                s.spawn(move || run(first, per.min(outer - first)));
            }
        });
    } else {
        run(0, outer);
    }
}
