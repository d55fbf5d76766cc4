//! One bound for every integer a lowering reads, checked once per node
//! before any lowering runs (right after the memory check, so that a
//! tensor no device could hold is reported as that): MLX takes dimensions,
//! axes and sizes as `int32`, and an integer past that range, cast, is a
//! wrapped value: a wrong shape or a wrong answer without an error. So
//! every node's shape and every integer attribute is held to the range
//! here, and a graph that breaks it is refused with `INVALID_ARGUMENT`
//! naming the node, the attribute and the bound. Lowerings then convert
//! through [`crate::lower::dim`] and friends, which cannot wrap.
//!
//! The rules:
//! - every dimension of a node's shape is at most [`MAX_DIM`], and the
//!   product of its dimensions at most [`MAX_ELEMENTS`];
//! - every integer attribute of the op (its serialized form, nested
//!   graphs included) lies in `int32`'s range, except those that are not
//!   sizes: RNG seeds and keys, a constant's bytes, a custom op's bytes;
//! - the integer lists that spell a shape or a window (`new_shape`,
//!   `target_shape`, `size`, `reps`, `kernel_size`) multiply to at most
//!   [`MAX_ELEMENTS`] in magnitude.

use crate::graph_text::describe;
use rlx_ir::{Graph, Node, Op};
use rlx_plugin_api::{PluginError, PluginResult};
use serde_json::Value;

/// The largest dimension MLX takes (`int32`).
pub const MAX_DIM: u64 = i32::MAX as u64;

/// The most elements one tensor may hold: its byte count at 16 bytes an
/// element fits `int64` with room for index arithmetic. (What the device
/// can allocate is checked apart, against its memory: `memory::check_graph`.)
pub const MAX_ELEMENTS: u64 = 1 << 56;

/// Attributes that are not sizes, left out of the `int32` rule: RNG seeds
/// and keys, a constant's bytes and a custom op's opaque attribute bytes.
const NOT_SIZES: [&str; 5] = ["seed", "key", "op_seed", "data", "attrs"];

/// Attributes that spell a shape or a window: their product is bounded too.
const SHAPES: [&str; 5] = ["new_shape", "target_shape", "size", "reps", "kernel_size"];

/// Check every node of `g` (its shape and its integer attributes) against
/// the bounds above, before any lowering reads them. Called after the
/// memory check (`memory::check_graph`), so that a tensor no device could
/// hold is reported as that (`RESOURCE_EXHAUSTED`).
pub fn check_graph(g: &Graph) -> PluginResult<()> {
    g.nodes().iter().try_for_each(|n| {
        check_shape(g, n)?;
        check_attributes(g, n)?;
        check_declared(g, n)
    })
}

/// Operands and attributes that rlx-ir's own shape rule rejects (or
/// overflows on) are refused here, with the rule's reason: lowerings build
/// from the node's declared shape, so an attribute that contradicts it (a
/// `Reshape` whose `new_shape` holds another element count than its
/// declared shape) would otherwise be passed over without an error. The
/// shape a rule gives is not compared with the declared one: rlx-ir's rules
/// are wrong for some ops (DotGeneral, If, Scan, regions) and spell some
/// shapes otherwise (a full reduction as `[]`, declared `[1]`).
fn check_declared(g: &Graph, n: &Node) -> PluginResult<()> {
    use rlx_ir::infer_shape::infer_output_shape_reporting;
    if matches!(
        n.op,
        Op::Input { .. } | Op::Param { .. } | Op::Constant { .. }
    ) {
        return Ok(());
    }
    let bad = |what: String| PluginError::invalid_argument(format!("{}: {what}", describe(g, n)));
    // rlx-ir's rules index and multiply attributes unchecked: one that
    // panics (an axis past the rank, a product past usize) is a node past
    // its range.
    match crate::expected_panic::catch(|| infer_output_shape_reporting(g, n)) {
        Err(why) => Err(bad(format!(
            "rlx-ir's shape rule fails on its attributes ({why})"
        ))),
        Ok((_, Some(why))) => Err(bad(format!("rlx-ir's shape rule rejects it: {why}"))),
        Ok((_, None)) => Ok(()),
    }
}

fn check_shape(g: &Graph, n: &Node) -> PluginResult<()> {
    let bad = |what: String| PluginError::invalid_argument(format!("{}: {what}", describe(g, n)));
    let dims: Vec<u64> = g
        .shape(n.id)
        .dims()
        .iter()
        .filter_map(|d| match d {
            rlx_ir::Dim::Static(d) => Some(*d as u64),
            rlx_ir::Dim::Dynamic(_) => None,
        })
        .collect();
    if let Some((i, d)) = dims.iter().enumerate().find(|(_, d)| **d > MAX_DIM) {
        return Err(bad(format!(
            "dimension {i} of its shape is {d}, more than the {MAX_DIM} a dimension may be"
        )));
    }
    if product(dims.iter().map(|d| *d as u128)).is_none() {
        return Err(bad(format!(
            "its shape {dims:?} holds more than the {MAX_ELEMENTS} elements a tensor may"
        )));
    }
    Ok(())
}

fn check_attributes(g: &Graph, n: &Node) -> PluginResult<()> {
    let bad = |what: String| PluginError::invalid_argument(format!("{}: {what}", describe(g, n)));
    // A constant's attributes are its bytes: nothing to bound.
    if matches!(n.op, Op::Constant { .. }) {
        return Ok(());
    }
    let op = serde_json::to_value(&n.op)
        .map_err(|e| bad(format!("its attributes cannot be read ({e})")))?;
    let mut path = String::new();
    attributes(&op, &mut path).map_err(bad)
}

/// The product of magnitudes, if it is at most [`MAX_ELEMENTS`] (a zero
/// anywhere makes it zero, however large the others).
fn product(xs: impl Iterator<Item = u128>) -> Option<u128> {
    let xs: Vec<u128> = xs.collect();
    if xs.contains(&0) {
        return Some(0);
    }
    xs.iter()
        .try_fold(1u128, |p, x| p.checked_mul(*x))
        .filter(|p| *p <= MAX_ELEMENTS as u128)
}

/// Walk one attribute value; `path` names it (`Reshape.new_shape[0]`).
fn attributes(v: &Value, path: &mut String) -> Result<(), String> {
    match v {
        Value::Number(x) => {
            let fits = match (x.as_i64(), x.as_u64()) {
                (Some(i), _) => i32::try_from(i).is_ok(),
                (None, Some(_)) => false,
                // A float attribute: not a size.
                (None, None) => true,
            };
            if !fits {
                return Err(format!(
                    "attribute {path} = {x} is outside [{}, {}], the range MLX takes",
                    i32::MIN,
                    i32::MAX
                ));
            }
            Ok(())
        }
        Value::Array(items) => {
            let n = path.len();
            for (i, item) in items.iter().enumerate() {
                path.push_str(&format!("[{i}]"));
                attributes(item, path)?;
                path.truncate(n);
            }
            Ok(())
        }
        Value::Object(fields) => {
            let n = path.len();
            for (k, item) in fields {
                if NOT_SIZES.contains(&k.as_str()) {
                    continue;
                }
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(k);
                attributes(item, path)?;
                if SHAPES.contains(&k.as_str()) {
                    shape_product(item, path)?;
                }
                path.truncate(n);
            }
            Ok(())
        }
        Value::Null | Value::Bool(_) | Value::String(_) => Ok(()),
    }
}

/// A shape-like list whose entries multiply past [`MAX_ELEMENTS`].
fn shape_product(v: &Value, path: &str) -> Result<(), String> {
    let Value::Array(items) = v else {
        return Ok(());
    };
    let mags = items
        .iter()
        .filter_map(|x| x.as_i64())
        .map(|x| x.unsigned_abs() as u128);
    if product(mags).is_none() {
        return Err(format!(
            "attribute {path} multiplies to more than the {MAX_ELEMENTS} elements a tensor may hold"
        ));
    }
    Ok(())
}
