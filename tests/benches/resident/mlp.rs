//! The MLP that `train` (and the `op_counts` bench) trains, and the
//! deterministic values it starts from.

use rlx_ir::Graph;
use rlx_plugin_tests::train_mlp::{mse_mlp, MlpDims};
use rlx_runtime::train::TrainableParam;
use std::collections::HashMap;

pub const BATCH: usize = 256;
pub const D_IN: usize = 1024;
pub const D_HID: usize = 4096;
pub const D_OUT: usize = 1024;

/// `loss = mean((relu(x·w1 + b1)·w2 + b2 - t)^2)`.
pub fn mlp() -> (Graph, Vec<TrainableParam>) {
    mse_mlp(
        "mlp_train",
        MlpDims {
            batch: BATCH,
            d_in: D_IN,
            d_hid: D_HID,
            d_out: D_OUT,
        },
    )
}

pub use rlx_plugin_tests::train_mlp::values;

/// The initial parameters, by name.
pub fn initial() -> HashMap<String, Vec<f32>> {
    [
        ("w1", values(D_IN * D_HID, 1, 0.03)),
        ("b1", vec![0.0; D_HID]),
        ("w2", values(D_HID * D_OUT, 2, 0.015)),
        ("b2", vec![0.0; D_OUT]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// One batch: inputs `x` and targets `t`.
pub fn batch() -> (Vec<f32>, Vec<f32>) {
    (values(BATCH * D_IN, 3, 1.0), values(BATCH * D_OUT, 4, 1.0))
}
