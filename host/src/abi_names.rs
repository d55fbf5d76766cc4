//! The plugin ABI's names for rlx-ir's dtypes and op kinds, both ways:
//! what the adapter (`backend`), the placement (`partition`) and the
//! custom-op bridges read a plugin's tables with.

use rlx_ir::OpKind;
use rlx_plugin_api::DType;

/// The rlx-ir op kind an ABI op-kind name spells, if this rlx-ir knows it.
pub fn op_kind(name: &str) -> Option<OpKind> {
    serde_json::from_str::<OpKind>(&format!("\"{name}\"")).ok()
}

/// The plugin-ABI dtype of an rlx-ir dtype (`None`: no ABI equivalent).
pub fn abi_dtype(d: rlx_ir::DType) -> Option<DType> {
    use rlx_ir::DType as D;
    Some(match d {
        D::F32 => DType::F32,
        D::F16 => DType::F16,
        D::BF16 => DType::BF16,
        D::F64 => DType::F64,
        D::I8 => DType::I8,
        D::I16 => DType::I16,
        D::I32 => DType::I32,
        D::I64 => DType::I64,
        D::U8 => DType::U8,
        D::U32 => DType::U32,
        D::Bool => DType::Bool,
        D::C64 => DType::C64,
        D::C128 => return None,
    })
}

/// The rlx-ir dtype of a plugin-ABI dtype.
pub fn ir_dtype(d: DType) -> rlx_ir::DType {
    use rlx_ir::DType as D;
    match d {
        DType::F32 => D::F32,
        DType::F16 => D::F16,
        DType::BF16 => D::BF16,
        DType::F64 => D::F64,
        DType::I8 => D::I8,
        DType::I16 => D::I16,
        DType::I32 => D::I32,
        DType::I64 => D::I64,
        DType::U8 => D::U8,
        DType::U32 => D::U32,
        DType::Bool => D::Bool,
        DType::C64 => D::C64,
    }
}
