//! Dtype mapping between rlx-ir, the plugin ABI and MLX.

use rlx_ir::DType as Ir;
use rlx_mlx_shim::DType as Mx;
use rlx_plugin_api::DType as Abi;

pub fn ir_to_mx(d: Ir) -> Option<Mx> {
    Some(match d {
        Ir::F32 => Mx::F32,
        Ir::F16 => Mx::F16,
        Ir::BF16 => Mx::BF16,
        Ir::F64 => Mx::F64,
        Ir::I8 => Mx::I8,
        Ir::I16 => Mx::I16,
        Ir::I32 => Mx::I32,
        Ir::I64 => Mx::I64,
        Ir::U8 => Mx::U8,
        Ir::U32 => Mx::U32,
        Ir::Bool => Mx::Bool,
        Ir::C64 => Mx::C64,
        Ir::C128 => return None,
    })
}

pub fn ir_to_abi(d: Ir) -> Option<Abi> {
    Some(match d {
        Ir::F32 => Abi::F32,
        Ir::F16 => Abi::F16,
        Ir::BF16 => Abi::BF16,
        Ir::F64 => Abi::F64,
        Ir::I8 => Abi::I8,
        Ir::I16 => Abi::I16,
        Ir::I32 => Abi::I32,
        Ir::I64 => Abi::I64,
        Ir::U8 => Abi::U8,
        Ir::U32 => Abi::U32,
        Ir::Bool => Abi::Bool,
        Ir::C64 => Abi::C64,
        Ir::C128 => return None,
    })
}

/// The float dtypes MLX computes on the CPU.
pub const FLOATS: &[Ir] = &[Ir::F32, Ir::F16, Ir::BF16];
/// Every dtype a graph value may have on this plugin.
pub const ALL: &[Ir] = &[
    Ir::F32,
    Ir::F16,
    Ir::BF16,
    Ir::F64,
    Ir::I8,
    Ir::I16,
    Ir::I32,
    Ir::I64,
    Ir::U8,
    Ir::U32,
    Ir::Bool,
];

/// Every dtype a graph leaf (input, param, constant) may have: [`ALL`] plus
/// complex64 (the complex layout FFTs take).
pub const LEAVES: &[Ir] = &[
    Ir::F32,
    Ir::F16,
    Ir::BF16,
    Ir::F64,
    Ir::I8,
    Ir::I16,
    Ir::I32,
    Ir::I64,
    Ir::U8,
    Ir::U32,
    Ir::Bool,
    Ir::C64,
];

pub fn abi_to_ir(d: Abi) -> Ir {
    match d {
        Abi::F32 => Ir::F32,
        Abi::F16 => Ir::F16,
        Abi::BF16 => Ir::BF16,
        Abi::F64 => Ir::F64,
        Abi::I8 => Ir::I8,
        Abi::I16 => Ir::I16,
        Abi::I32 => Ir::I32,
        Abi::I64 => Ir::I64,
        Abi::U8 => Ir::U8,
        Abi::U32 => Ir::U32,
        Abi::Bool => Ir::Bool,
        Abi::C64 => Ir::C64,
    }
}
