//! Check 2, tables and sizes: the descriptor, the supported-op list, the
//! lowering table (read raw, row by row), their agreement, and the
//! custom-op registry's size.

use super::{Kit, Outcome};
use rlx_plugin_api::sized::{declared_size, read_zero_filled};
use rlx_plugin_api::tables::{
    RlxCustomOpApi, RlxLoweringEntry, RlxLoweringTable, RlxOpList, RlxOpSupport,
    RlxPluginDescriptor,
};
use rlx_plugin_api::tensor::RlxDataType;
use rlx_plugin_api::version::ABI_VERSION;
use rlx_plugin_api::{DType, RlxStr, Strategy};
use rlx_plugin_loader::plugin::MAX_TABLE_LEN;
use rlx_plugin_loader::LoadedPlugin;
use std::collections::{BTreeMap, BTreeSet};

/// The end of `field` in `T`: a struct's size as the minor whose last
/// field it is wrote it. Pinned by field, not `STRUCT_SIZE`, so that a
/// newer minor appending fields does not raise what older plugins owe.
macro_rules! size_through {
    ($t:ty, $f:ident: $ft:ty) => {
        std::mem::offset_of!($t, $f) + std::mem::size_of::<$ft>()
    };
}

/// Each table's size in the minor that introduced it (1.0; 1.1 for the
/// custom-op registry).
const DESCRIPTOR_1_0: usize = size_through!(RlxPluginDescriptor, n_opsets: usize);
const OP_LIST_1_0: usize = size_through!(RlxOpList, n_ops: usize);
const OP_SUPPORT_1_0: usize = size_through!(RlxOpSupport, n_dtypes: usize);
const LOWERING_TABLE_1_0: usize = size_through!(RlxLoweringTable, n_entries: usize);
const LOWERING_ENTRY_1_0: usize = size_through!(RlxLoweringEntry, execute_ctx: usize);
const CUSTOM_OP_API_1_1: usize = size_through!(RlxCustomOpApi, execute: usize);

/// One row of either table, as read raw.
#[derive(Clone, Debug)]
struct Row {
    op_kind: String,
    dtypes: BTreeSet<DType>,
}

pub(super) fn run(kit: &mut Kit) {
    kit.record("tables: descriptor", |p| descriptor(p).into());
    let mut ops = None;
    kit.record("tables: supported-op list", |p| {
        read_op_list(p).map(|r| ops = Some(r)).into()
    });
    let mut lowering = None;
    kit.record("tables: lowering table", |p| {
        read_lowering(p).map(|r| lowering = Some(r)).into()
    });
    match (ops, lowering) {
        (Some(o), Some(l)) => {
            kit.record("tables: op list matches lowering table", |_| {
                agree(&o, &l).into()
            });
            kit.record("tables: op kinds are rlx-ir op kinds", |_| {
                known_kinds(&o).into()
            });
        }
        _ => {
            let why = "a table could not be read (see above)";
            kit.skip("tables: op list matches lowering table", why);
            kit.skip("tables: op kinds are rlx-ir op kinds", why);
        }
    }
    kit.record("tables: custom-op registry", custom_registry);
}

/// Does the plugin claim a minor this host knows? Unknown enum values
/// (dtypes, strategies) are faults only then: a newer minor may add them.
fn known_minor(p: &LoadedPlugin) -> bool {
    p.abi_version().minor <= ABI_VERSION.minor
}

fn descriptor(p: &LoadedPlugin) -> Result<(), String> {
    let d = p.raw_api().descriptor;
    // SAFETY: the descriptor is plugin-owned and static; null is checked.
    let size = unsafe { declared_size(d) }.ok_or("the descriptor is null")?;
    if size < DESCRIPTOR_1_0 {
        return Err(format!(
            "descriptor struct_size {size} is smaller than its 1.0 size ({DESCRIPTOR_1_0})"
        ));
    }
    // SAFETY: readable for its struct_size, which covers every field.
    let d: RlxPluginDescriptor = unsafe { read_zero_filled(d) };
    // SAFETY: plugin-owned, static strings.
    let name = unsafe { utf8(&d.name, "name")? };
    let version = unsafe { utf8(&d.version, "version")? };
    if name.is_empty() {
        return Err("the name is empty".into());
    }
    if !is_semver(&version) {
        return Err(format!("version {version:?} is not semver"));
    }
    let opsets = &p.descriptor().opsets;
    if !opsets.contains(&rlx_ir::rlxmodel::OPSET) {
        return Err(format!(
            "opsets {opsets:?} lack {}, the .rlxmodel opset this host writes",
            rlx_ir::rlxmodel::OPSET
        ));
    }
    Ok(())
}

/// # Safety
/// `s` is a readable plugin string.
unsafe fn utf8(s: &RlxStr, what: &str) -> Result<String, String> {
    // SAFETY: the caller's promise.
    unsafe { s.to_str() }
        .map(str::to_string)
        .map_err(|e| format!("{what} is not UTF-8: {e}"))
}

/// `MAJOR.MINOR.PATCH[-pre][+build]`, numbers without leading zeros.
fn is_semver(v: &str) -> bool {
    let core = v.split('+').next().unwrap_or("");
    let core = core.split('-').next().unwrap_or("");
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts.iter().all(|n| {
            !n.is_empty()
                && n.bytes().all(|b| b.is_ascii_digit())
                && (n.len() == 1 || !n.starts_with('0'))
        })
}

/// A plugin array of `n` pointers, checked for count and null.
///
/// # Safety
/// A non-null `p` with a sane `n` points at `n` readable pointers.
unsafe fn pointers<'a, T>(
    p: *const *const T,
    n: usize,
    what: &str,
) -> Result<&'a [*const T], String> {
    if n > MAX_TABLE_LEN {
        return Err(format!("{what} claims {n} rows (at most {MAX_TABLE_LEN})"));
    }
    if n == 0 {
        return Err(format!("{what} is empty"));
    }
    if p.is_null() {
        return Err(format!("{what} is null but claims {n} rows"));
    }
    // SAFETY: the caller's promise, count and pointer checked.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// A row's dtypes: non-empty, every one an ABI dtype.
///
/// # Safety
/// A non-null `p` points at `n` readable dtypes.
unsafe fn row_dtypes(
    p: *const RlxDataType,
    n: usize,
    op: &str,
    strict: bool,
) -> Result<BTreeSet<DType>, String> {
    if n == 0 || n > MAX_TABLE_LEN || p.is_null() {
        return Err(format!("{op}: {n} dtypes at {p:p}"));
    }
    // SAFETY: the caller's promise, count and pointer checked.
    let raw = unsafe { std::slice::from_raw_parts(p, n) };
    let mut out = BTreeSet::new();
    for d in raw {
        match DType::from_dl(*d) {
            Ok(t) => {
                out.insert(t);
            }
            Err(e) if strict => return Err(format!("{op}: {}", e.message)),
            Err(_) => {}
        }
    }
    Ok(out)
}

/// Check one row's header and read its op kind.
///
/// # Safety
/// `p` is null or a plugin row starting with `struct_size`.
unsafe fn row_head<T>(p: *const T, i: usize, known: usize, what: &str) -> Result<T, String> {
    // SAFETY: the caller's promise.
    let size = unsafe { declared_size(p) }.ok_or(format!("{what} row {i} is null"))?;
    if size < known {
        return Err(format!(
            "{what} row {i}: struct_size {size} is smaller than the row's size ({known})"
        ));
    }
    // SAFETY: readable for its struct_size (>= every field we read).
    Ok(unsafe { read_zero_filled(p) })
}

fn read_op_list(p: &LoadedPlugin) -> Result<Vec<Row>, String> {
    let api = p.raw_api();
    // SAFETY: zeroed is a valid RlxOpList.
    let mut list: RlxOpList = unsafe { std::mem::zeroed() };
    // SAFETY: `list` is our slot for the call.
    let s = unsafe { (api.supported_ops.unwrap())(&mut list) };
    if let Some((code, msg)) = super::raw::take_status(api, s) {
        return Err(format!(
            "supported_ops returned {}: {msg}",
            super::code_name(code)
        ));
    }
    if list.struct_size < OP_LIST_1_0 {
        return Err(format!(
            "RlxOpList struct_size {} is smaller than its 1.0 size ({OP_LIST_1_0})",
            list.struct_size
        ));
    }
    let strict = known_minor(p);
    let mut rows = Vec::new();
    // SAFETY: plugin-owned, static rows; counts and pointers checked.
    for (i, &r) in unsafe { pointers(list.ops, list.n_ops, "the op list")? }
        .iter()
        .enumerate()
    {
        let op: RlxOpSupport = unsafe { row_head(r, i, OP_SUPPORT_1_0, "the op list")? };
        let op_kind = unsafe { utf8(&op.op_kind, &format!("op list row {i}"))? };
        let dtypes = unsafe { row_dtypes(op.dtypes, op.n_dtypes, &op_kind, strict)? };
        rows.push(Row { op_kind, dtypes });
    }
    unique(&rows, "the op list")?;
    Ok(rows)
}

fn read_lowering(p: &LoadedPlugin) -> Result<Vec<Row>, String> {
    let api = p.raw_api();
    // SAFETY: zeroed is a valid RlxLoweringTable.
    let mut t: RlxLoweringTable = unsafe { std::mem::zeroed() };
    // SAFETY: `t` is our slot for the call.
    let s = unsafe { (api.lowering_table.unwrap())(&mut t) };
    if let Some((code, msg)) = super::raw::take_status(api, s) {
        return Err(format!(
            "lowering_table returned {}: {msg}",
            super::code_name(code)
        ));
    }
    if t.struct_size < LOWERING_TABLE_1_0 {
        return Err(format!(
            "RlxLoweringTable struct_size {} is smaller than its 1.0 size \
             ({LOWERING_TABLE_1_0})",
            t.struct_size
        ));
    }
    let strict = known_minor(p);
    let mut rows = Vec::new();
    // SAFETY: plugin-owned, static rows; counts and pointers checked.
    for (i, &r) in unsafe { pointers(t.entries, t.n_entries, "the lowering table")? }
        .iter()
        .enumerate()
    {
        let e: RlxLoweringEntry =
            unsafe { row_head(r, i, LOWERING_ENTRY_1_0, "the lowering table")? };
        let op_kind = unsafe { utf8(&e.op_kind, &format!("lowering row {i}"))? };
        if strict && Strategy::from_raw(e.strategy).is_none() {
            return Err(format!("{op_kind}: unknown strategy {}", e.strategy));
        }
        unsafe { utf8(&e.note, &format!("{op_kind}'s note"))? };
        let dtypes = unsafe { row_dtypes(e.dtypes, e.n_dtypes, &op_kind, strict)? };
        rows.push(Row { op_kind, dtypes });
    }
    unique(&rows, "the lowering table")?;
    Ok(rows)
}

fn unique(rows: &[Row], what: &str) -> Result<(), String> {
    let mut seen = BTreeSet::new();
    for r in rows {
        if r.op_kind.is_empty() {
            return Err(format!("{what} has a row with an empty op kind"));
        }
        if !seen.insert(r.op_kind.as_str()) {
            return Err(format!("{what} lists {} twice", r.op_kind));
        }
    }
    Ok(())
}

/// Every lowering op is a supported op with the same dtypes, and back.
fn agree(ops: &[Row], lowering: &[Row]) -> Result<(), String> {
    let map = |rows: &[Row]| -> BTreeMap<String, BTreeSet<DType>> {
        rows.iter()
            .map(|r| (r.op_kind.clone(), r.dtypes.clone()))
            .collect()
    };
    let (o, l) = (map(ops), map(lowering));
    let mut bad = Vec::new();
    for (k, d) in &l {
        match o.get(k) {
            None => bad.push(format!("{k} is in the lowering table but not the op list")),
            Some(od) if od != d => bad.push(format!(
                "{k}: dtypes {} in the op list, {} in the lowering table",
                names(od),
                names(d)
            )),
            _ => {}
        }
    }
    bad.extend(
        o.keys()
            .filter(|k| !l.contains_key(*k))
            .map(|k| format!("{k} is in the op list but not the lowering table")),
    );
    if bad.is_empty() {
        Ok(())
    } else {
        Err(bad.join("; "))
    }
}

fn names(d: &BTreeSet<DType>) -> String {
    d.iter().map(|t| t.name()).collect::<Vec<_>>().join(",")
}

/// An op kind the host's rlx-ir does not know is never sent (a typo such
/// as `Matmul`, or an op of another rlx-ir).
fn known_kinds(ops: &[Row]) -> Result<(), String> {
    let unknown: Vec<&str> = ops
        .iter()
        .map(|r| r.op_kind.as_str())
        .filter(|k| {
            serde_json::from_value::<rlx_ir::op::OpKind>(serde_json::Value::String(k.to_string()))
                .is_err()
        })
        .collect();
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "not op kinds of rlx-ir {} (this host never sends them): {}",
            rlx_ir::rlxmodel::RLX_VERSION,
            unknown.join(", ")
        ))
    }
}

fn custom_registry(p: &std::sync::Arc<LoadedPlugin>) -> Outcome {
    if p.abi_version().minor == 0 {
        return Outcome::Skip("an ABI 1.0 plugin has no custom-op registry".into());
    }
    let Some(c) = p.raw_custom_ops() else {
        return Outcome::Skip("custom_ops is null (no registry)".into());
    };
    if c.struct_size < CUSTOM_OP_API_1_1 {
        return Outcome::Fail(format!(
            "RlxCustomOpApi struct_size {} is smaller than its 1.1 size ({CUSTOM_OP_API_1_1})",
            c.struct_size
        ));
    }
    let missing: Vec<&str> = [
        ("register_op", c.register_op.is_none()),
        ("unregister", c.unregister.is_none()),
        ("lookup", c.lookup.is_none()),
        ("list", c.list.is_none()),
        ("execute", c.execute.is_none()),
    ]
    .iter()
    .filter(|(_, null)| *null)
    .map(|(n, _)| *n)
    .collect();
    if missing.is_empty() {
        Outcome::Ok
    } else {
        Outcome::Fail(format!(
            "registry functions are null: {}",
            missing.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semver_is_three_numbers_with_optional_suffixes() {
        for ok in ["0.1.0", "1.2.3-rc.1", "10.0.0+abc", "1.0.0-x+y"] {
            assert!(is_semver(ok), "{ok}");
        }
        for bad in ["", "1.2", "1.2.3.4", "01.2.3", "a.b.c", "1..3"] {
            assert!(!is_semver(bad), "{bad}");
        }
    }
}
