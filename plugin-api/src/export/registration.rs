//! Header §6: registration (`init`), the supported-op list and lowering
//! table derived from the plugin's lowering entries, and eager single-op
//! execution.

use super::args::{copy_inputs, non_null_mut, write_out, write_outputs};
use super::loaded::{loaded, tables, Tables};
use super::status::guard;
use crate::error::{PluginError, PluginResult, RlxStatus};
use crate::plugin::LoweringEntry;
use crate::sized::AbiStruct;
use crate::strings::{leak_str, RlxStr};
use crate::tables::*;
use crate::tensor::{DType, RlxDataType, RlxTensor};
use std::ffi::c_void;

pub(super) unsafe extern "C" fn init() -> *mut RlxStatus {
    guard(|| {
        let st = loaded()?;
        if st.tables.get().is_some() {
            return Ok(());
        }
        let entries = st
            .plugin
            .init(&st.registry)
            .map_err(|e| e.context("plugin registration failed"))?;
        let _ = st.tables.set(build_tables(entries)?);
        Ok(())
    })
}

fn raw_dtypes(dtypes: &[DType]) -> (*const RlxDataType, usize) {
    let v: &'static [RlxDataType] = Box::leak(dtypes.iter().map(|d| d.to_dl()).collect());
    (v.as_ptr(), v.len())
}

fn build_tables(entries: Vec<LoweringEntry>) -> PluginResult<Tables> {
    let mut seen = std::collections::BTreeSet::new();
    for e in &entries {
        if !seen.insert(e.op_kind.clone()) {
            return Err(PluginError::internal(format!(
                "lowering table lists op kind {:?} twice",
                e.op_kind
            )));
        }
    }
    let mut ops: Vec<*const RlxOpSupport> = Vec::new();
    let mut rows: Vec<*const RlxLoweringEntry> = Vec::new();
    for e in entries {
        let (dtypes, n_dtypes) = raw_dtypes(&e.dtypes);
        let op_kind = leak_str(e.op_kind.clone());
        ops.push(Box::leak(Box::new(RlxOpSupport {
            struct_size: RlxOpSupport::STRUCT_SIZE,
            op_kind,
            dtypes,
            n_dtypes,
        })));
        let has_exec = e.execute.is_some();
        let note = leak_str(e.note.clone());
        let strategy = e.strategy.to_raw();
        let ctx: &'static LoweringEntry = Box::leak(Box::new(e));
        rows.push(Box::leak(Box::new(RlxLoweringEntry {
            struct_size: RlxLoweringEntry::STRUCT_SIZE,
            op_kind,
            dtypes,
            n_dtypes,
            strategy,
            note,
            execute: if has_exec { Some(execute_op) } else { None },
            execute_ctx: ctx as *const LoweringEntry as *const c_void,
        })));
    }
    let ops: &'static [*const RlxOpSupport] = Box::leak(ops.into_boxed_slice());
    let rows: &'static [*const RlxLoweringEntry] = Box::leak(rows.into_boxed_slice());
    Ok(Tables {
        op_list: RlxOpList {
            struct_size: RlxOpList::STRUCT_SIZE,
            ops: ops.as_ptr(),
            n_ops: ops.len(),
        },
        lowering: RlxLoweringTable {
            struct_size: RlxLoweringTable::STRUCT_SIZE,
            entries: rows.as_ptr(),
            n_entries: rows.len(),
        },
    })
}

pub(super) unsafe extern "C" fn supported_ops(out: *mut RlxOpList) -> *mut RlxStatus {
    guard(|| {
        let out = non_null_mut(out, "out")?;
        write_out(out, copy_op_list(&tables()?.op_list));
        Ok(())
    })
}

pub(super) unsafe extern "C" fn lowering_table(out: *mut RlxLoweringTable) -> *mut RlxStatus {
    guard(|| {
        let out = non_null_mut(out, "out")?;
        let t = &tables()?.lowering;
        write_out(
            out,
            RlxLoweringTable {
                struct_size: t.struct_size,
                entries: t.entries,
                n_entries: t.n_entries,
            },
        );
        Ok(())
    })
}

fn copy_op_list(l: &RlxOpList) -> RlxOpList {
    RlxOpList {
        struct_size: l.struct_size,
        ops: l.ops,
        n_ops: l.n_ops,
    }
}

unsafe extern "C" fn execute_op(
    ctx: *const c_void,
    node: RlxStr,
    inputs: *const RlxTensor,
    n_inputs: usize,
    outputs: *mut RlxTensor,
    out_capacity: usize,
    n_outputs: *mut usize,
) -> *mut RlxStatus {
    guard(|| {
        let entry = (ctx as *const LoweringEntry)
            .as_ref()
            .ok_or_else(|| PluginError::invalid_argument("execute_ctx is null"))?;
        let exec = entry.execute.as_ref().ok_or_else(|| {
            PluginError::unsupported(format!("{} has no eager entry", entry.op_kind))
        })?;
        let node = node
            .to_str()
            .map_err(|e| PluginError::invalid_argument(format!("node text is not UTF-8: {e}")))?;
        let n_out = non_null_mut(n_outputs, "n_outputs")?;
        let ins = copy_inputs(inputs, n_inputs)?;
        let outs = exec(node, &ins).map_err(|e| e.context(format!("eager {}", entry.op_kind)))?;
        *n_out = write_outputs(outs, outputs, out_capacity)?;
        Ok(())
    })
}
