//! Indexing: ScatterAdd, ScatterNd, ScatterElements, GatherNd, GatherElements.
//!
//! Every lowering computes explicit, in-range element/row offsets and then
//! uses one MLX gather (`take`) or scatter on a flattened view. MLX's take and
//! scatter do not bounds-check, so no index reaches them unclamped: the
//! semantics below are rlx-cpu's (rlx-cpu 0.2.19, `onnx_indexing.rs` and the
//! `ScatterAdd` thunk), and each one is a clamp, a drop or an error — never
//! an out-of-bounds access.
//!
//! Index values: f32 (or f16/bf16) indices are truncated toward zero like
//! rlx-cpu's `as i64` (NaN -> 0); i32/i64 indices are used as they are. Every
//! index is first saturated to +-2^30 (the data may hold at most 2^30 - 1
//! elements), which changes no in-range index and keeps the offset arithmetic
//! in i32.
//!
//! * `ScatterAdd {axis}` (inputs `[updates, indices]`): zeros of the output
//!   shape, `out[.., idx[i], ..] += updates[.., i, ..]` along `axis`, in
//!   update order. A negative index lands on row 0 (rlx-cpu's saturating
//!   `as usize`); an index >= the output's `axis` extent is an error on
//!   rlx-cpu (it asserts), and it is a run-time error here too: the indices
//!   are clamped for the scatter, and the result is multiplied by the
//!   triangular inverse of a 1x1 matrix that is 1 when every index is in
//!   range and 0 otherwise — MLX raises "[Inverse::eval_cpu] triangular
//!   inversion failed" at evaluation (the shim has no assertion op; a zero
//!   pivot is a data-dependent error MLX raises from a lazy or compiled
//!   graph alike), and `x * 1` leaves the result exact.
//! * `ScatterNd {reduction}` (`[data, indices, updates]`): a copy of `data`,
//!   then each update slice applied in update order. Each index component
//!   counts from the end once when negative, then is clamped into range.
//!   `None`: the last update to a slot wins (computed exactly: the winner's
//!   position is a `scatter_max` of update positions, so MLX's write order
//!   does not matter). `Add`/`Mul`: `scatter_add`/`scatter_prod`. `Max`/`Min`:
//!   NaN-ignoring like `f32::max`/`f32::min` (a NaN update never wins, a NaN
//!   slot takes the best non-NaN update).
//! * `ScatterElements {axis, reduction}`: non-finite `data` values become 0
//!   first (rlx-cpu does this). A negative index becomes 0 (no wrap-around:
//!   rlx-cpu's `max(0)`, unlike ONNX). Rank 1: an index past the end drops the
//!   update. Rank >= 2: every coordinate is clamped into range.
//! * `GatherNd {batch_dims}`: components wrap once when negative, then clamp.
//! * `GatherElements {axis}`: the index wraps once when negative, then
//!   clamps; off-axis coordinates past `data`'s extent clamp as well.
//!   rlx-ir infers the output's dtype from the indices, and the output holds
//!   data values, so data, indices and output must share one dtype (f32
//!   data with i64 indices declares an i64 output, which rlx-cpu fills with
//!   raw f32 bits): a mismatch is refused.
//!
//! Half-precision scatters are computed in f32 (rlx-cpu widens f16/bf16
//! graphs to f32); the executable rounds the result once to the declared
//! dtype. Gathers only move values and keep the dtype.

use super::{arity, scalar, Ctx, LResult, Lowering};
use crate::lower::I32;
use crate::row;
use rlx_ir::op::ScatterNdReduction as Red;
use rlx_ir::DType as IrDType;
use rlx_mlx_shim::{array, linalg, ops, Array, DType as MxDType};

/// The data dtypes the scatters and GatherNd compute (rlx-cpu's kernels read
/// f32; f16/bf16 graphs are widened to f32 on the CPU).
const FLOAT_DATA: &[IrDType] = &[IrDType::F32, IrDType::F16, IrDType::BF16];
/// GatherElements copies elements of any width on rlx-cpu (data, indices
/// and output share the dtype).
const GATHER_ELEMENTS_DATA: &[IrDType] = &[
    IrDType::F32,
    IrDType::F16,
    IrDType::BF16,
    IrDType::I32,
    IrDType::I64,
];

pub fn entries() -> Vec<Lowering> {
    vec![
        row!(
            ScatterAdd,
            FLOAT_DATA,
            Composite,
            "zeros + mx::scatter_add along any axis (moved to the front), in \
             update order; f32/f16/bf16/i32/i64 indices, negative -> row 0 as rlx-cpu, an \
             index past the end is a run-time error (MLX reports a failed 1x1 \
             triangular inversion)",
            scatter_add
        ),
        row!(
            ScatterNd,
            FLOAT_DATA,
            Composite,
            "row offsets (negative wrap once, clamp) + mx::scatter family on \
             data viewed [rows, slice]: None = last update wins (exact), Add, Mul, \
             Max/Min NaN-ignoring; f32/f16/bf16/i32/i64 indices",
            scatter_nd
        ),
        row!(
            ScatterElements,
            FLOAT_DATA,
            Composite,
            "element offsets + mx::scatter family on the flat data, every \
             reduction as ScatterNd; rlx-cpu rules: non-finite data -> 0, negative \
             index -> 0, rank 1 drops past-the-end updates, rank >= 2 clamps",
            scatter_elements
        ),
        row!(
            GatherNd,
            FLOAT_DATA,
            Composite,
            "row offsets (negative wrap once, clamp) + mx::take on data viewed \
             [batch*rows, slice]; any batch_dims with matching batch extents",
            gather_nd
        ),
        row!(
            GatherElements,
            GATHER_ELEMENTS_DATA,
            Composite,
            "element offsets (negative wrap once, clamp; off-axis coordinates \
             clamped) + mx::take on the flat data; data, indices and output of \
             one dtype",
            gather_elements
        ),
    ]
}

/// Indices are saturated to +-LIM and data may hold at most LIM - 1
/// elements, so `index + extent` and every offset fit in i32.
const LIM: i64 = 1 << 30;

fn i32_scalar(v: i64) -> LResult {
    scalar(v as f64, MxDType::I32)
}

fn i32_vec(v: &[i32]) -> LResult {
    Ok(Array::from_slice(v, &[v.len().i32()?])?)
}

fn arange_i32(n: i32) -> LResult {
    Ok(array::arange(0.0, n as f64, 1.0, MxDType::I32)?)
}

fn prod(d: &[i32]) -> i64 {
    d.iter().map(|&x| x as i64).product()
}

/// Row-major element strides, for flat `int32` indices: a tensor whose
/// strides pass that range cannot be indexed so, and is refused.
fn strides(d: &[i32]) -> LResult<Vec<i32>> {
    let mut s = vec![1i64; d.len()];
    for i in (0..d.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * d[i + 1] as i64;
    }
    s.into_iter().map(|x| x.i32()).collect()
}

fn zeros(dims: &[i32], dt: MxDType) -> LResult {
    Ok(array::full(dims, 0.0, dt)?)
}

fn is_half(d: MxDType) -> bool {
    matches!(d, MxDType::F16 | MxDType::BF16)
}

/// The dtype a scatter computes in: f32 for the halves.
fn work(d: MxDType) -> MxDType {
    if is_half(d) {
        MxDType::F32
    } else {
        d
    }
}

fn cast(x: &Array, d: MxDType) -> LResult {
    if x.dtype() == d {
        Ok(x.clone_handle())
    } else {
        Ok(ops::astype(x, d)?)
    }
}

/// A normalised `i32` axis; out of range is refused (rlx-cpu would clamp it).
fn norm_axis(a: i64, rank: usize, op: &str) -> LResult<usize> {
    let r = rank as i64;
    let n = if a < 0 { a + r } else { a };
    if n < 0 || n >= r {
        return Err(format!(
            "{op}: axis {a} is out of range for rank {rank} (rlx-cpu clamps it \
             into range; that is not supported)"
        )
        .into());
    }
    Ok(n as usize)
}

fn check_size(dims: &[i32], op: &str, what: &str) -> LResult<()> {
    if prod(dims) >= LIM {
        return Err(format!(
            "{op}: {what} {dims:?} holds 2^30 elements or more, which is not supported"
        )
        .into());
    }
    Ok(())
}

/// The output holds values of input `i`, so it must have that input's dtype
/// (rlx-cpu copies raw elements: a different declared dtype reads garbage).
fn same_dtype(cx: &Ctx, i: usize, op: &str, what: &str) -> LResult<()> {
    let (o, d) = (cx.out_ir_dtype(), cx.in_dtype(i));
    if o != d {
        return Err(format!(
            "{op}: the output is {o:?} but the {what} are {d:?}; a dtype change is not supported"
        )
        .into());
    }
    Ok(())
}

fn float_input(cx: &Ctx, i: usize, op: &str, what: &str) -> LResult<()> {
    match cx.in_dtype(i) {
        IrDType::F32 | IrDType::F16 | IrDType::BF16 => Ok(()),
        other => Err(format!("{op}: {what} of dtype {other:?} is not supported").into()),
    }
}

/// Index values.i32()?: floats truncated toward zero (NaN -> 0) like
/// rlx-cpu's `as i64`, everything saturated to +-LIM.
fn index_i32(x: &Array, dt: IrDType, op: &str) -> LResult {
    let lim = LIM as f64;
    match dt {
        IrDType::F32 | IrDType::F16 | IrDType::BF16 => {
            let f = cast(x, MxDType::F32)?;
            let f = ops::where_(&*ops::isnan(&f)?, &*scalar(0.0, MxDType::F32)?, &f)?;
            let f = ops::clip(&f, -lim, lim)?;
            Ok(ops::astype(&f, MxDType::I32)?)
        }
        IrDType::I32 | IrDType::I64 => Ok(ops::astype(&*ops::clip(x, -lim, lim)?, MxDType::I32)?),
        other => Err(format!(
            "{op}: indices of dtype {other:?} are not supported (f32, f16, bf16, i32, i64 are)"
        )
        .into()),
    }
}

/// Clamp `idx` into `[0, dim - 1]` (`dim` >= 1, broadcastable).
fn clamp_to(idx: &Array, dim: &Array) -> LResult {
    let lo = ops::maximum(idx, &*i32_scalar(0)?)?;
    let hi = ops::subtract(dim, &*i32_scalar(1)?)?;
    Ok(ops::minimum(&lo, &hi)?)
}

/// ONNX-style: a negative index counts from the end once, then the result is
/// clamped into range (rlx-cpu's GatherND/ScatterND/GatherElements rule).
fn wrap_clamp(idx: &Array, dim: &Array) -> LResult {
    let neg = ops::less(idx, &*i32_scalar(0)?)?;
    let w = ops::where_(&neg, &*ops::add(idx, dim)?, idx)?;
    clamp_to(&w, dim)
}

/// Row offsets of `k`-component index tuples `idx [.., k]` into a row-major
/// block of extents `dims` (len k): each component wraps once and clamps.
fn tuple_rows(idx: &Array, dims: &[i32]) -> LResult {
    let mut shape = idx.shape();
    shape.pop();
    if dims.is_empty() {
        return zeros(&shape, MxDType::I32);
    }
    let comp = wrap_clamp(idx, &*i32_vec(dims)?)?;
    let weighted = ops::multiply(&comp, &*i32_vec(&strides(dims)?)?)?;
    let rows = ops::sum(&weighted, &[-1], false)?;
    cast(&rows, MxDType::I32)
}

/// `arange(n)` shaped to broadcast along dim `d` of a rank-`rank` array.
fn coord(n: i32, d: usize, rank: usize) -> LResult {
    let mut shape = vec![1i32; rank];
    shape[d] = n;
    Ok(ops::reshape(&*arange_i32(n)?, &shape)?)
}

/// Apply updates `u2 [M, S]` to rows `t [M]` (i32, in range) of `d2 [P, S]`
/// with `red`, as rlx-cpu does: sequentially in update order.
fn scatter_rows(d2: &Array, t: &Array, u2: &Array, red: Red) -> LResult {
    let ds = d2.shape();
    let (p, s) = (ds[0], ds[1]);
    let m = t.shape()[0];
    if m == 0 || p == 0 || s == 0 {
        return Ok(d2.clone_handle());
    }
    let u3 = ops::reshape(u2, &[m, 1, s])?;
    Ok(match red {
        Red::None => {
            // The last update to each row wins: find its position exactly
            // instead of relying on MLX's write order for duplicates.
            let pos = ops::reshape(&*arange_i32(m)?, &[m, 1])?;
            let last = ops::scatter_max(&*array::full(&[p], -1.0, MxDType::I32)?, t, &pos, 0)?;
            let pick = ops::take(u2, &*ops::maximum(&last, &*i32_scalar(0)?)?, 0)?;
            let hit = ops::reshape(&*ops::greater_equal(&last, &*i32_scalar(0)?)?, &[p, 1])?;
            ops::where_(&hit, &pick, d2)?
        }
        Red::Add => ops::scatter_add(d2, t, &u3, 0)?,
        Red::Mul => ops::scatter_prod(d2, t, &u3, 0)?,
        Red::Max | Red::Min => {
            // f32::max/min ignore NaN: a NaN update never wins and a NaN
            // slot takes the best non-NaN update.
            let dt = d2.dtype();
            let max = red == Red::Max;
            let fill = if max {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            };
            let nan = ops::isnan(&u3)?;
            let clean = ops::where_(&nan, &*scalar(fill, dt)?, &u3)?;
            let init = array::full(&[p, s], fill, dt)?;
            let best = if max {
                ops::scatter_max(&init, t, &clean, 0)?
            } else {
                ops::scatter_min(&init, t, &clean, 0)?
            };
            let valid = ops::astype(&*ops::logical_not(&nan)?, MxDType::I32)?;
            let count = ops::scatter_add(&*zeros(&[p, s], MxDType::I32)?, t, &valid, 0)?;
            let hit = ops::greater(&count, &*i32_scalar(0)?)?;
            let both = if max {
                ops::maximum(d2, &best)?
            } else {
                ops::minimum(d2, &best)?
            };
            let comb = ops::where_(&*ops::isnan(d2)?, &best, &both)?;
            ops::where_(&hit, &comb, d2)?
        }
    })
}

/// A 0-d f32 array that is exactly 1 when `bad` (a bool scalar) is false;
/// when it is true, evaluating it fails (MLX's triangular inversion of a
/// zero 1x1 matrix reports the zero pivot as an error).
fn fail_if(bad: &Array) -> LResult {
    let piv = ops::where_(
        bad,
        &*scalar(0.0, MxDType::F32)?,
        &*scalar(1.0, MxDType::F32)?,
    )?;
    let inv = linalg::tri_inv(&*ops::reshape(&piv, &[1, 1])?, false)?;
    Ok(ops::reshape(&inv, &[])?)
}

fn scatter_add(cx: &Ctx, a: &[&Array]) -> LResult {
    const OP: &str = "ScatterAdd";
    arity(a, 2, OP)?;
    crate::op_fields!(cx, ScatterAdd { axis });
    let ud = cx.in_dims(0);
    let id = cx.in_dims(1);
    let od = cx.out_dims();
    let r = ud.len();
    let ax = *axis;
    float_input(cx, 0, OP, "updates")?;
    same_dtype(cx, 0, OP, "updates")?;
    if ax >= r || od.len() != r || (0..r).any(|d| d != ax && od[d] != ud[d]) {
        return Err(format!(
            "{OP}: updates {ud:?} and output {od:?} along axis {ax}: this shape is not supported \
             (the output must equal the updates except along axis)"
        )
        .into());
    }
    let m = ud[ax];
    if prod(&id) != m as i64 {
        return Err(format!(
            "{OP}: indices {id:?} must hold one index per update ({m}); this shape is not supported"
        )
        .into());
    }
    check_size(&od, OP, "output")?;
    let dt = work(cx.out_dtype());
    let n = od[ax];
    let rest: Vec<i32> = (0..r).filter(|&d| d != ax).map(|d| od[d]).collect();
    let s = prod(&rest).i32()?;
    if m == 0 || prod(&od) == 0 {
        return zeros(&od, dt);
    }
    // rlx-cpu: `idx as usize` (negative -> row 0); row >= n is an error.
    let idx = ops::reshape(&*index_i32(a[1], cx.in_dtype(1), OP)?, &[m])?;
    let idx = ops::maximum(&idx, &*i32_scalar(0)?)?;
    let bad = ops::any(
        &*ops::greater_equal(&idx, &*i32_scalar(n as i64)?)?,
        &[0],
        false,
    )?;
    let t = ops::minimum(&idx, &*i32_scalar(n as i64 - 1)?)?;
    let u = ops::moveaxis(&*cast(a[0], dt)?, ax.i32()?, 0)?;
    let u2 = ops::reshape(&u, &[m, s])?;
    let out2 = scatter_rows(&*zeros(&[n, s], dt)?, &t, &u2, Red::Add)?;
    let mut front = vec![n];
    front.extend_from_slice(&rest);
    let out = ops::moveaxis(&*ops::reshape(&out2, &front)?, 0, ax.i32()?)?;
    Ok(ops::multiply(&out, &*cast(&*fail_if(&bad)?, dt)?)?)
}

fn scatter_nd(cx: &Ctx, a: &[&Array]) -> LResult {
    const OP: &str = "ScatterNd";
    arity(a, 3, OP)?;
    crate::op_fields!(cx, ScatterNd { reduction });
    let dd = cx.in_dims(0);
    let id = cx.in_dims(1);
    let ud = cx.in_dims(2);
    float_input(cx, 0, OP, "data")?;
    float_input(cx, 2, OP, "updates")?;
    let q = id.len();
    let k = id.last().copied().unwrap_or(-1);
    if q == 0 || k < 0 || k as usize > dd.len() {
        return Err(format!(
            "{OP}: indices {id:?} must end in a tuple length <= data rank {}; this shape is not supported",
            dd.len()
        )
        .into());
    }
    let k = k as usize;
    let mut want = id[..q - 1].to_vec();
    want.extend_from_slice(&dd[k..]);
    if ud != want {
        return Err(format!(
            "{OP}: updates {ud:?} must be indices[:-1] + data[k:] = {want:?}; this shape is not supported"
        )
        .into());
    }
    check_size(&dd, OP, "data")?;
    let dt = work(cx.out_dtype());
    let data = cast(a[0], dt)?;
    let m = prod(&id[..q - 1]).i32()?;
    let p = prod(&dd[..k]).i32()?;
    let s = prod(&dd[k..]).i32()?;
    if m == 0 || p == 0 || s == 0 {
        return Ok(data);
    }
    let idx = ops::reshape(&*index_i32(a[1], cx.in_dtype(1), OP)?, &[m, k.i32()?])?;
    let t = tuple_rows(&idx, &dd[..k])?;
    let d2 = ops::reshape(&data, &[p, s])?;
    let u2 = ops::reshape(&*cast(a[2], dt)?, &[m, s])?;
    let out = scatter_rows(&d2, &t, &u2, *reduction)?;
    Ok(ops::reshape(&out, &dd)?)
}

fn scatter_elements(cx: &Ctx, a: &[&Array]) -> LResult {
    const OP: &str = "ScatterElements";
    arity(a, 3, OP)?;
    crate::op_fields!(cx, ScatterElements { axis, reduction });
    let dd = cx.in_dims(0);
    let id = cx.in_dims(1);
    let ud = cx.in_dims(2);
    float_input(cx, 0, OP, "data")?;
    float_input(cx, 2, OP, "updates")?;
    let r = dd.len();
    if r == 0 || id.len() != r || ud != id {
        return Err(format!(
            "{OP}: data {dd:?}, indices {id:?}, updates {ud:?}: this shape is not supported \
             (indices and updates must have one shape, of data's rank >= 1)"
        )
        .into());
    }
    let ax = norm_axis(*axis as i64, r, OP)?;
    check_size(&dd, OP, "data")?;
    let dt = work(cx.out_dtype());
    let data = cast(a[0], dt)?;
    // rlx-cpu zeroes non-finite data values before scattering.
    let data = ops::where_(&*ops::isfinite(&data)?, &data, &*scalar(0.0, dt)?)?;
    let n = prod(&dd).i32()?;
    let m = prod(&id).i32()?;
    if m == 0 || n == 0 {
        return Ok(data);
    }
    let idx = index_i32(a[1], cx.in_dtype(1), OP)?;
    // rlx-cpu: `indices[i].max(0)`: a negative index is 0, not wrapped.
    let idx = ops::maximum(&idx, &*i32_scalar(0)?)?;
    let u2 = ops::reshape(&*cast(a[2], dt)?, &[m, 1])?;
    if r == 1 {
        // Past the end drops the update: send it to a spare slot at n.
        let keep = ops::less(&idx, &*i32_scalar(n as i64)?)?;
        let t = ops::where_(&keep, &idx, &*i32_scalar(n as i64)?)?;
        let d2 = ops::reshape(&*ops::pad(&data, &[0], &[0], &[1], 0.0)?, &[n + 1, 1])?;
        let out = scatter_rows(&d2, &*ops::reshape(&t, &[m])?, &u2, *reduction)?;
        return Ok(ops::slice(
            &*ops::reshape(&out, &[n + 1])?,
            &[0],
            &[n],
            &[1],
        )?);
    }
    // Rank >= 2: every coordinate clamps into data's extent.
    let st = strides(&dd)?;
    let mut off = ops::multiply(
        &*clamp_to(&idx, &*i32_scalar(dd[ax] as i64)?)?,
        &*i32_scalar(st[ax] as i64)?,
    )?;
    for d in (0..r).filter(|&d| d != ax) {
        let c = ops::minimum(&*coord(id[d], d, r)?, &*i32_scalar(dd[d] as i64 - 1)?)?;
        off = ops::add(&off, &*ops::multiply(&c, &*i32_scalar(st[d] as i64)?)?)?;
    }
    let t = ops::reshape(&off, &[m])?;
    let out = scatter_rows(&*ops::reshape(&data, &[n, 1])?, &t, &u2, *reduction)?;
    Ok(ops::reshape(&out, &dd)?)
}

fn gather_nd(cx: &Ctx, a: &[&Array]) -> LResult {
    const OP: &str = "GatherNd";
    arity(a, 2, OP)?;
    crate::op_fields!(cx, GatherNd { batch_dims });
    let dd = cx.in_dims(0);
    let id = cx.in_dims(1);
    let od = cx.out_dims();
    float_input(cx, 0, OP, "data")?;
    same_dtype(cx, 0, OP, "data")?;
    let (r, q) = (dd.len(), id.len());
    // rlx-cpu reads a negative batch_dims as 0.
    let b = (*batch_dims).max(0) as usize;
    let k = id.last().copied().unwrap_or(-1);
    if q == 0 || k < 0 || b > q - 1 || b + k as usize > r || dd[..b] != id[..b] {
        return Err(format!(
            "{OP}: data {dd:?}, indices {id:?}, batch_dims {batch_dims}: this shape is not supported \
             (indices [batch.., .., k] with the data's batch extents and batch_dims + k <= data rank)"
        )
        .into());
    }
    let k = k as usize;
    let mut want = id[..q - 1].to_vec();
    want.extend_from_slice(&dd[b + k..]);
    if od != want {
        return Err(format!(
            "{OP}: the output {od:?} must be indices[:-1] + data[batch_dims + k:] = {want:?}"
        )
        .into());
    }
    check_size(&dd, OP, "data")?;
    if prod(&od) == 0 {
        return zeros(&od, a[0].dtype());
    }
    if prod(&dd) == 0 {
        return Err(format!("{OP}: gathering from empty data {dd:?} is not supported").into());
    }
    let bc = prod(&dd[..b]).i32()?;
    let t = prod(&id[b..q - 1]).i32()?;
    let pk = prod(&dd[b..b + k]).i32()?;
    let s = prod(&dd[b + k..]).i32()?;
    let idx = ops::reshape(&*index_i32(a[1], cx.in_dtype(1), OP)?, &[bc, t, k.i32()?])?;
    let rows = tuple_rows(&idx, &dd[b..b + k])?;
    let base = ops::multiply(
        &*ops::reshape(&*arange_i32(bc)?, &[bc, 1])?,
        &*i32_scalar(pk as i64)?,
    )?;
    let rows = ops::add(&rows, &base)?;
    let d2 = ops::reshape(a[0], &[bc * pk, s])?;
    let g = ops::take(&d2, &rows, 0)?;
    Ok(ops::reshape(&g, &od)?)
}

fn gather_elements(cx: &Ctx, a: &[&Array]) -> LResult {
    const OP: &str = "GatherElements";
    arity(a, 2, OP)?;
    crate::op_fields!(cx, GatherElements { axis });
    let dd = cx.in_dims(0);
    let id = cx.in_dims(1);
    let od = cx.out_dims();
    same_dtype(cx, 0, OP, "data")?;
    let r = dd.len();
    if r == 0 || id.len() != r || od != id {
        return Err(format!(
            "{OP}: data {dd:?}, indices {id:?}, output {od:?}: this shape is not supported \
             (indices of data's rank >= 1, output of the indices' shape)"
        )
        .into());
    }
    let ax = norm_axis(*axis as i64, r, OP)?;
    check_size(&dd, OP, "data")?;
    if prod(&od) == 0 {
        return zeros(&od, a[0].dtype());
    }
    if prod(&dd) == 0 {
        return Err(format!("{OP}: gathering from empty data {dd:?} is not supported").into());
    }
    let st = strides(&dd)?;
    let idx = index_i32(a[1], cx.in_dtype(1), OP)?;
    let mut off = ops::multiply(
        &*wrap_clamp(&idx, &*i32_scalar(dd[ax] as i64)?)?,
        &*i32_scalar(st[ax] as i64)?,
    )?;
    for d in (0..r).filter(|&d| d != ax) {
        let c = ops::minimum(&*coord(id[d], d, r)?, &*i32_scalar(dd[d] as i64 - 1)?)?;
        off = ops::add(&off, &*ops::multiply(&c, &*i32_scalar(st[d] as i64)?)?)?;
    }
    Ok(ops::take_flat(a[0], &off)?)
}
