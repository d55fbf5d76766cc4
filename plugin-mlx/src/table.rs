//! The lowering table, gathered: one row per op kind from each family of
//! `lower/`, and the `Custom` row of `custom/` (which lowers through the
//! families' context). The supported-op list the plugin registers is
//! derived from it.

use crate::lower::{self, Lowering};
use rlx_ir::OpKind;
use std::collections::HashMap;
use std::sync::OnceLock;

/// The whole table, in family order.
pub fn table() -> &'static [Lowering] {
    static TABLE: OnceLock<Vec<Lowering>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = Vec::new();
        for family in [
            lower::io::entries(),
            lower::elementwise::entries(),
            lower::linalg::entries(),
            lower::shape::entries(),
            lower::reduce::entries(),
            lower::norm::entries(),
            lower::attention::entries(),
            lower::fused::entries(),
            lower::order::entries(),
            lower::contract::entries(),
            lower::conv::entries(),
            lower::region::entries(),
            lower::index::entries(),
            lower::solve::entries(),
            lower::random::entries(),
            lower::signal::entries(),
            lower::pocketfft::entries(),
            lower::grouped::entries(),
            lower::quant::entries(),
            lower::control::entries(),
            lower::recurrent::entries(),
            lower::ssm::entries(),
            lower::splat::entries(),
            lower::train_act::entries(),
            lower::train_norm::entries(),
            lower::train_conv::entries(),
            lower::double_single::entries(),
            lower::number_format::entries(),
            crate::custom::entries(),
        ] {
            t.extend(family);
        }
        t
    })
}

/// The lowering for an op kind (the table's first row for it): one lookup
/// in an index made once, as every node of every build asks.
pub fn find(kind: OpKind) -> Option<&'static Lowering> {
    static INDEX: OnceLock<HashMap<OpKind, &'static Lowering>> = OnceLock::new();
    INDEX
        .get_or_init(|| {
            let mut index = HashMap::new();
            for l in table() {
                index.entry(l.op_kind).or_insert(l);
            }
            index
        })
        .get(&kind)
        .copied()
}
