//! Single-op graphs the kit generates per op kind (their data, reference
//! and comparison are in `reference`).
//!
//! Every operand of a case is a graph input (eager entries bind inputs in
//! order and have no params). A case's `dtype` is the dtype of the op's
//! output, which is what a lowering entry's dtype list names.

use rlx_ir::infer::GraphExt;
use rlx_ir::op::{Activation, BinaryOp, CmpOp, ReduceOp};
use rlx_ir::{DType as IrDType, Graph, NodeId, Op, Shape};
use rlx_plugin_api::DType;

use crate::reference::Fill;

/// One generated single-op graph.
pub struct Case {
    /// The op-kind name of the lowering entry it exercises.
    pub op_kind: &'static str,
    /// Which form of the op (`Add`, `batched`); empty for the only one.
    pub variant: &'static str,
    /// The output dtype (what the entry's dtype list must name).
    pub dtype: DType,
    pub graph: Graph,
    /// Fills by leaf name; the dtype's default for the others.
    pub fills: Vec<(String, Fill)>,
}

impl Case {
    /// `Binary.Add f32`, `Softmax f16`.
    pub fn label(&self) -> String {
        if self.variant.is_empty() {
            format!("{} {}", self.op_kind, self.dtype)
        } else {
            format!("{}.{} {}", self.op_kind, self.variant, self.dtype)
        }
    }

    fn fill(&self, name: &str, dt: IrDType) -> Fill {
        self.fills
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, f)| *f)
            .unwrap_or(match dt {
                IrDType::Bool => Fill::Bool,
                d if d.is_float() => Fill::Uniform(-1.0, 1.0),
                _ => Fill::Int(-5, 5),
            })
    }
}

fn ir(d: DType) -> IrDType {
    match d {
        DType::F32 => IrDType::F32,
        DType::F16 => IrDType::F16,
        DType::BF16 => IrDType::BF16,
        DType::F64 => IrDType::F64,
        DType::I8 => IrDType::I8,
        DType::I16 => IrDType::I16,
        DType::I32 => IrDType::I32,
        DType::I64 => IrDType::I64,
        DType::U8 => IrDType::U8,
        DType::U32 => IrDType::U32,
        DType::Bool => IrDType::Bool,
        DType::C64 => IrDType::C64,
    }
}

const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];
const MOVES: [DType; 2] = [DType::F32, DType::I32];

/// A graph of inputs `a`, `b`, … with the given shapes and one op.
fn graph(dt: DType, dims: &[&[usize]], build: impl Fn(&mut Graph, &[NodeId]) -> NodeId) -> Graph {
    let mut g = Graph::new("conformance");
    let ids: Vec<NodeId> = dims
        .iter()
        .zip(["a", "b", "c", "d"])
        .map(|(d, n)| g.input(n, Shape::new(d, ir(dt))))
        .collect();
    let y = build(&mut g, &ids);
    g.set_outputs(vec![y]);
    g
}

fn case(op_kind: &'static str, variant: &'static str, dtype: DType, graph: Graph) -> Case {
    Case {
        op_kind,
        variant,
        dtype,
        graph,
        fills: Vec::new(),
    }
}

impl Case {
    fn with(mut self, name: &str, f: Fill) -> Case {
        self.fills.push((name.into(), f));
        self
    }
}

/// Every case the kit has for `op_kind` (empty: none). For each dtype
/// the first case is the op's simplest form.
pub fn cases_for(op_kind: &str) -> Vec<Case> {
    match op_kind {
        "Binary" => binary_cases(),
        "Activation" => activation_cases(),
        "MatMul" => matmul_cases(),
        "Softmax" => each(&FLOATS, |dt| {
            vec![case(
                "Softmax",
                "",
                dt,
                graph(dt, &[&[2, 5]], |g, x| g.sm(x[0], -1)),
            )]
        }),
        "Reduce" => reduce_cases(),
        "Reshape" => each(&MOVES, |dt| {
            vec![case(
                "Reshape",
                "",
                dt,
                graph(dt, &[&[2, 6]], |g, x| g.reshape_(x[0], vec![3, 4])),
            )]
        }),
        "Transpose" => each(&MOVES, |dt| {
            vec![case(
                "Transpose",
                "",
                dt,
                graph(dt, &[&[2, 3, 4]], |g, x| g.transpose_(x[0], vec![2, 0, 1])),
            )]
        }),
        "Narrow" => each(&MOVES, |dt| {
            vec![case(
                "Narrow",
                "",
                dt,
                graph(dt, &[&[4, 3]], |g, x| g.narrow_(x[0], 0, 1, 2)),
            )]
        }),
        "Concat" => each(&MOVES, |dt| {
            vec![case(
                "Concat",
                "",
                dt,
                graph(dt, &[&[2, 3], &[2, 2]], |g, x| {
                    g.concat_(vec![x[0], x[1]], 1)
                }),
            )]
        }),
        "Expand" => each(&MOVES, |dt| {
            vec![case(
                "Expand",
                "",
                dt,
                graph(dt, &[&[1, 3]], |g, x| {
                    let s = Shape::new(&[4, 3], ir(dt));
                    g.add_node(
                        Op::Expand {
                            target_shape: vec![4, 3],
                        },
                        vec![x[0]],
                        s,
                    )
                }),
            )]
        }),
        "Cast" => cast_cases(),
        "Where" => where_cases(),
        "Compare" => compare_cases(),
        "RmsNorm" => norm_cases("RmsNorm"),
        "LayerNorm" => norm_cases("LayerNorm"),
        "StopGradient" => vec![case(
            "StopGradient",
            "",
            DType::F32,
            graph(DType::F32, &[&[2, 3]], |g, x| g.stop_gradient(x[0])),
        )],
        "Constant" => vec![case(
            "Constant",
            "",
            DType::F32,
            graph(DType::F32, &[], |g, _| g.full(&[2, 3], 1.5, IrDType::F32)),
        )],
        "Gather" => vec![gather_case()],
        "Reverse" => each(&MOVES, |dt| {
            vec![case(
                "Reverse",
                "",
                dt,
                graph(dt, &[&[2, 3]], |g, x| {
                    let s = g.shape(x[0]).clone();
                    g.add_node(Op::Reverse { axes: vec![1] }, vec![x[0]], s)
                }),
            )]
        }),
        "Cumsum" => each(&MOVES, |dt| {
            vec![case(
                "Cumsum",
                "",
                dt,
                graph(dt, &[&[2, 4]], |g, x| {
                    let s = g.shape(x[0]).clone();
                    let op = Op::Cumsum {
                        axis: 1,
                        exclusive: false,
                    };
                    g.add_node(op, vec![x[0]], s)
                }),
            )]
        }),
        "ArgMax" | "ArgMin" => vec![arg_case(op_kind == "ArgMax")],
        _ => Vec::new(),
    }
}

fn each(dtypes: &[DType], f: impl Fn(DType) -> Vec<Case>) -> Vec<Case> {
    dtypes.iter().flat_map(|d| f(*d)).collect()
}

fn binary_cases() -> Vec<Case> {
    let ops = [
        ("Add", BinaryOp::Add),
        ("Sub", BinaryOp::Sub),
        ("Mul", BinaryOp::Mul),
        ("Div", BinaryOp::Div),
        ("Max", BinaryOp::Max),
        ("Min", BinaryOp::Min),
    ];
    let mut out = each(&FLOATS, |dt| {
        let mut v: Vec<Case> = ops
            .iter()
            .map(|(name, op)| {
                let c = case(
                    "Binary",
                    name,
                    dt,
                    graph(dt, &[&[2, 3], &[2, 3]], |g, x| {
                        let s = g.shape(x[0]).clone();
                        g.binary(*op, x[0], x[1], s)
                    }),
                );
                // Divisors away from zero.
                if *name == "Div" {
                    c.with("b", Fill::Uniform(0.5, 2.0))
                } else {
                    c
                }
            })
            .collect();
        v.push(case(
            "Binary",
            "Add(broadcast)",
            dt,
            graph(dt, &[&[2, 3], &[3]], |g, x| g.add(x[0], x[1])),
        ));
        v
    });
    out.extend(ops[..3].iter().map(|(name, op)| {
        case(
            "Binary",
            name,
            DType::I32,
            graph(DType::I32, &[&[2, 3], &[2, 3]], |g, x| {
                let s = g.shape(x[0]).clone();
                g.binary(*op, x[0], x[1], s)
            }),
        )
    }));
    out
}

fn activation_cases() -> Vec<Case> {
    use Activation::*;
    let acts: [(&'static str, Activation, Fill); 12] = [
        ("Relu", Relu, Fill::Uniform(-1.0, 1.0)),
        ("Exp", Exp, Fill::Uniform(-2.0, 2.0)),
        ("Tanh", Tanh, Fill::Uniform(-2.0, 2.0)),
        ("Sigmoid", Sigmoid, Fill::Uniform(-3.0, 3.0)),
        ("Neg", Neg, Fill::Uniform(-1.0, 1.0)),
        ("Abs", Abs, Fill::Uniform(-1.0, 1.0)),
        ("Silu", Silu, Fill::Uniform(-3.0, 3.0)),
        ("Gelu", Gelu, Fill::Uniform(-3.0, 3.0)),
        ("Sqrt", Sqrt, Fill::Uniform(0.1, 4.0)),
        ("Log", Log, Fill::Uniform(0.1, 4.0)),
        ("Sin", Sin, Fill::Uniform(-3.0, 3.0)),
        ("Cos", Cos, Fill::Uniform(-3.0, 3.0)),
    ];
    each(&FLOATS, |dt| {
        acts.iter()
            .map(|(name, act, fill)| {
                case(
                    "Activation",
                    name,
                    dt,
                    graph(dt, &[&[2, 4]], |g, x| {
                        let s = g.shape(x[0]).clone();
                        g.activation(*act, x[0], s)
                    }),
                )
                .with("a", *fill)
            })
            .collect()
    })
}

fn matmul_cases() -> Vec<Case> {
    each(&FLOATS, |dt| {
        vec![
            case(
                "MatMul",
                "",
                dt,
                graph(dt, &[&[2, 3], &[3, 4]], |g, x| g.mm(x[0], x[1])),
            ),
            case(
                "MatMul",
                "batched",
                dt,
                graph(dt, &[&[2, 2, 3], &[2, 3, 4]], |g, x| g.mm(x[0], x[1])),
            ),
        ]
    })
}

fn reduce_cases() -> Vec<Case> {
    let ops = [
        ("Sum", ReduceOp::Sum),
        ("Mean", ReduceOp::Mean),
        ("Max", ReduceOp::Max),
    ];
    each(&FLOATS, |dt| {
        ops.iter()
            .map(|(name, op)| {
                case(
                    "Reduce",
                    name,
                    dt,
                    graph(dt, &[&[3, 4]], |g, x| {
                        g.reduce(x[0], *op, vec![1], false, Shape::new(&[3], ir(dt)))
                    }),
                )
            })
            .collect()
    })
}

fn cast_cases() -> Vec<Case> {
    let one = |variant, from: DType, to: DType, fill| {
        case(
            "Cast",
            variant,
            to,
            graph(from, &[&[2, 3]], |g, x| g.cast(x[0], ir(to))),
        )
        .with("a", fill)
    };
    vec![
        one("from_f32", DType::F32, DType::I32, Fill::Uniform(-8.0, 8.0)),
        one("from_i32", DType::I32, DType::F32, Fill::Int(-50, 50)),
        one("from_f32", DType::F32, DType::F16, Fill::Uniform(-4.0, 4.0)),
    ]
}

fn where_cases() -> Vec<Case> {
    each(&[DType::F32, DType::F16], |dt| {
        let mut g = Graph::new("conformance");
        let c = g.input("cond", Shape::new(&[2, 3], IrDType::Bool));
        let a = g.input("a", Shape::new(&[2, 3], ir(dt)));
        let b = g.input("b", Shape::new(&[2, 3], ir(dt)));
        let y = g.add_node(Op::Where, vec![c, a, b], Shape::new(&[2, 3], ir(dt)));
        g.set_outputs(vec![y]);
        vec![case("Where", "", dt, g)]
    })
}

fn compare_cases() -> Vec<Case> {
    [("Lt", CmpOp::Lt), ("Ge", CmpOp::Ge), ("Eq", CmpOp::Eq)]
        .iter()
        .map(|(name, op)| {
            let c = case(
                "Compare",
                name,
                DType::Bool,
                graph(DType::F32, &[&[2, 3], &[2, 3]], |g, x| {
                    g.add_node(
                        Op::Compare(*op),
                        vec![x[0], x[1]],
                        Shape::new(&[2, 3], IrDType::Bool),
                    )
                }),
            );
            // Small integers, so that equal pairs occur.
            c.with("a", Fill::Int(0, 3)).with("b", Fill::Int(0, 3))
        })
        .collect()
}

fn norm_cases(kind: &'static str) -> Vec<Case> {
    each(&FLOATS, |dt| {
        let c = case(
            kind,
            "",
            dt,
            graph(dt, &[&[2, 8], &[8], &[8]], |g, x| {
                if kind == "RmsNorm" {
                    g.rms_norm(x[0], x[1], x[2], 1e-5)
                } else {
                    g.ln(x[0], x[1], x[2], 1e-5)
                }
            }),
        );
        vec![c.with("b", Fill::Uniform(0.5, 1.5))]
    })
}

/// Indices along axis 1 of a [3, 4] f32 input, as f32 (rlx's encoding).
fn arg_case(max: bool) -> Case {
    let (kind, op) = if max {
        (
            "ArgMax",
            Op::ArgMax {
                axis: 1,
                keep_dim: false,
            },
        )
    } else {
        (
            "ArgMin",
            Op::ArgMin {
                axis: 1,
                keep_dim: false,
            },
        )
    };
    case(
        kind,
        "",
        DType::F32,
        graph(DType::F32, &[&[3, 4]], |g, x| {
            g.add_node(op.clone(), vec![x[0]], Shape::new(&[3], IrDType::F32))
        }),
    )
}

fn gather_case() -> Case {
    let mut g = Graph::new("conformance");
    let table = g.input("table", Shape::new(&[5, 3], IrDType::F32));
    let idx = g.input("idx", Shape::new(&[4], IrDType::F32));
    let y = g.gather_(table, idx, 0);
    g.set_outputs(vec![y]);
    case("Gather", "", DType::F32, g).with("idx", Fill::Int(0, 5))
}

/// The case's leaves (seed 7).
pub fn case_leaves(c: &Case) -> Result<Vec<super::reference::Leaf>, String> {
    super::reference::leaves(&c.graph, &|n, d| c.fill(n, d), 7)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::{abi_dtype, op_kinds};

    const KINDS: [&str; 23] = [
        "Binary",
        "Activation",
        "MatMul",
        "Softmax",
        "Reduce",
        "Reshape",
        "Transpose",
        "Narrow",
        "Concat",
        "Expand",
        "Cast",
        "Where",
        "Compare",
        "RmsNorm",
        "LayerNorm",
        "StopGradient",
        "Constant",
        "Gather",
        "Reverse",
        "Cumsum",
        "ArgMax",
        "ArgMin",
        "Input",
    ];

    #[test]
    fn every_case_is_one_op_of_its_kind_and_round_trips_as_text() {
        let mut n = 0;
        for k in KINDS {
            for c in cases_for(k) {
                assert_eq!(
                    op_kinds(&c.graph),
                    vec![c.op_kind.to_string()],
                    "{}",
                    c.label()
                );
                let text = rlx_ir::rlxmodel::to_text(&c.graph).unwrap();
                rlx_ir::rlxmodel::from_text(&text).unwrap();
                let out = abi_dtype(c.graph.shape(c.graph.outputs[0]).dtype());
                assert_eq!(out, Some(c.dtype), "{}", c.label());
                case_leaves(&c).unwrap();
                n += 1;
            }
        }
        assert!(n > 60, "{n} cases");
        assert!(cases_for("Input").is_empty());
    }
}
