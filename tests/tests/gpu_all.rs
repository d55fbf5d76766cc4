//! Every MLX parity suite in one test binary, so that one file carries them
//! to a GPU machine (built with `--features gpu-suite`; see docs/CUDA.md).
#[path = "mlx_control.rs"]
mod mlx_control;
#[path = "mlx_conv.rs"]
mod mlx_conv;
#[path = "mlx_core.rs"]
mod mlx_core;
#[path = "mlx_custom.rs"]
mod mlx_custom;
#[path = "mlx_double_single.rs"]
mod mlx_double_single;
#[path = "mlx_elementwise.rs"]
mod mlx_elementwise;
#[path = "mlx_index.rs"]
mod mlx_index;
#[path = "mlx_models.rs"]
mod mlx_models;
#[path = "mlx_nn.rs"]
mod mlx_nn;
#[path = "mlx_nn2.rs"]
mod mlx_nn2;
#[path = "mlx_no_inputs.rs"]
mod mlx_no_inputs;
#[path = "mlx_order.rs"]
mod mlx_order;
#[path = "mlx_outputs.rs"]
mod mlx_outputs;
#[path = "mlx_quant.rs"]
mod mlx_quant;
#[path = "mlx_random.rs"]
mod mlx_random;
#[path = "mlx_recurrent.rs"]
mod mlx_recurrent;
#[path = "mlx_reduce.rs"]
mod mlx_reduce;
#[path = "mlx_region.rs"]
mod mlx_region;
#[path = "mlx_regressions.rs"]
mod mlx_regressions;
#[path = "mlx_round_to_format.rs"]
mod mlx_round_to_format;
#[path = "mlx_session.rs"]
mod mlx_session;
#[path = "mlx_shape.rs"]
mod mlx_shape;
#[path = "mlx_signal.rs"]
mod mlx_signal;
#[path = "mlx_solve.rs"]
mod mlx_solve;
#[path = "mlx_splat.rs"]
mod mlx_splat;
#[path = "mlx_ssm.rs"]
mod mlx_ssm;
#[path = "mlx_train_act.rs"]
mod mlx_train_act;
#[path = "mlx_train_conv.rs"]
mod mlx_train_conv;
#[path = "mlx_train_digits.rs"]
mod mlx_train_digits;
#[path = "mlx_train_loops.rs"]
mod mlx_train_loops;
#[path = "mlx_train_norm.rs"]
mod mlx_train_norm;
