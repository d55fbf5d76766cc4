//! Parity of the shape ops (Reshape, Transpose, Narrow, Concat, Expand,
//! Gather) on the MLX plugin against rlx-runtime's CPU backend.
//!
//! These ops move elements and compute nothing, so the answer is the same
//! whatever the dtype and the comparison is exact (tolerance 0).
//!
//! Reference: rlx-cpu moves f32, f64, i32 and i64 itself (checked directly
//! below). Its kernels for the other dtypes are not usable as a reference:
//! f16/bf16 layout ops stay half-width on the CPU and Narrow of an f16
//! tensor returns wrong elements (and several half layout outputs in one
//! graph trip an alignment check that aborts the process); u8/i8/bool moves
//! read 4-byte elements and return garbage. For those dtypes the reference
//! is the CPU running the *same graph with every value declared f32*, fed
//! values that are exact in the tested dtype: a data-movement op's answer
//! does not depend on the dtype, so that is rlx's answer for it.

use rand::{Rng, SeedableRng};
use rlx_ir::{DType as IrDType, Graph, GraphExt, Op, Shape};
use rlx_plugin_tests::parity::{check_against, leaves, random_values, run_cpu, Feed, Tol};

fn s(d: &[usize], t: IrDType) -> Shape {
    Shape::new(d, t)
}

/// Every dtype the plugin claims for the data-movement ops.
const ALL: [IrDType; 11] = [
    IrDType::F32,
    IrDType::F16,
    IrDType::BF16,
    IrDType::F64,
    IrDType::I8,
    IrDType::I16,
    IrDType::I32,
    IrDType::I64,
    IrDType::U8,
    IrDType::U32,
    IrDType::Bool,
];

/// The dtypes rlx-cpu moves correctly itself.
fn cpu_moves(dt: IrDType) -> bool {
    matches!(
        dt,
        IrDType::F32 | IrDType::F64 | IrDType::I32 | IrDType::I64
    )
}

const EXACT: Tol = Tol { abs: 0.0, rel: 0.0 };

/// Seeded values exact in `dt` (and in f32): random in [-1, 1) for floats
/// (rounded to the dtype), integers spread over the dtype's range for ints.
fn values(n: usize, dt: IrDType, seed: u64) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut int =
        |lo: i64, hi: i64| -> Vec<f32> { (0..n).map(|_| rng.gen_range(lo..=hi) as f32).collect() };
    match dt {
        IrDType::F32 | IrDType::F64 | IrDType::F16 | IrDType::BF16 => {
            random_values(n, dt, -1.0, 1.0, seed)
        }
        IrDType::I8 => int(-128, 127),
        IrDType::I16 => int(-32768, 32767),
        IrDType::I32 | IrDType::I64 => int(-1 << 24, 1 << 24),
        IrDType::U8 => int(0, 255),
        IrDType::U32 => int(0, 1 << 24),
        IrDType::Bool => int(0, 1),
        other => panic!("no values for {other:?}"),
    }
}

/// Feeds for every leaf, by its dtype.
fn feeds(g: &Graph, seed: u64) -> Vec<Feed> {
    leaves(g)
        .iter()
        .enumerate()
        .map(|(i, l)| Feed {
            name: l.name.clone(),
            values: values(l.dims.iter().product(), l.dtype, seed + 31 * i as u64),
        })
        .collect()
}

/// The same graph with every value declared f32.
fn as_f32(g: &Graph) -> Graph {
    let mut g = g.clone();
    for n in g.nodes_mut() {
        assert!(
            !matches!(n.op, Op::Constant { .. }),
            "as_f32 does not convert constants"
        );
        n.shape = n.shape.clone().with_dtype(IrDType::F32);
    }
    g
}

/// Check a data-movement graph built for `dt` exactly, in every mode.
fn check_move(what: &str, g: &Graph, dt: IrDType, f: &[Feed]) {
    let what = format!("{what} {dt:?}");
    let reference = run_cpu(&as_f32(g), f);
    if cpu_moves(dt) {
        let direct = run_cpu(g, f);
        assert_eq!(direct, reference, "{what}: rlx-cpu disagrees with itself");
    }
    check_against(&what, g, f, &reference, EXACT);
}

fn for_all(what: &str, build: impl Fn(IrDType) -> Graph) {
    for (k, dt) in ALL.into_iter().enumerate() {
        let g = build(dt);
        let f = feeds(&g, 100 + k as u64);
        check_move(what, &g, dt, &f);
    }
}

#[test]
fn reshape_parity() {
    // (input dims, new_shape, declared dims)
    let cases: &[(&[usize], &[i64], &[usize])] = &[
        (&[7], &[1, 7], &[1, 7]),
        (&[2, 3, 5], &[5, -1], &[5, 6]),
        (&[3, 1, 4, 2], &[24], &[24]),
        (&[6, 5], &[2, -1, 5], &[2, 3, 5]),
        (&[1], &[], &[]),
        (&[2, 3, 1, 5, 1], &[1, 30], &[1, 30]),
    ];
    for (i, (ind, ns, out)) in cases.iter().enumerate() {
        for_all(&format!("reshape#{i} {ind:?}->{ns:?}"), |dt| {
            let mut g = Graph::new("reshape");
            let x = g.input("x", s(ind, dt));
            let r = g.reshape(x, ns.to_vec(), s(out, dt));
            g.set_outputs(vec![r]);
            g
        });
    }
    // A reshape of a transposed (non-contiguous) value.
    for_all("reshape of transpose", |dt| {
        let mut g = Graph::new("reshape_t");
        let x = g.input("x", s(&[3, 5, 2], dt));
        let t = g.transpose_(x, vec![2, 0, 1]);
        let r = g.reshape(t, vec![6, 5], s(&[6, 5], dt));
        g.set_outputs(vec![r]);
        g
    });
}

#[test]
fn transpose_parity() {
    let cases: &[(&[usize], &[usize])] = &[
        (&[7], &[0]),
        (&[3, 5], &[1, 0]),
        (&[2, 3, 5], &[2, 0, 1]),
        (&[2, 3, 5], &[0, 2, 1]),
        (&[2, 3, 1, 5], &[3, 1, 0, 2]),
        (&[2, 1, 3, 2, 3], &[4, 2, 0, 3, 1]),
    ];
    for (ind, perm) in cases {
        for_all(&format!("transpose {ind:?} {perm:?}"), |dt| {
            let mut g = Graph::new("transpose");
            let x = g.input("x", s(ind, dt));
            let t = g.transpose_(x, perm.to_vec());
            g.set_outputs(vec![t]);
            g
        });
    }
}

#[test]
fn narrow_parity() {
    // (dims, axis, start, len)
    let cases: &[(&[usize], usize, usize, usize)] = &[
        (&[7], 0, 2, 4),
        (&[3, 5], 1, 0, 1),
        (&[3, 5], 0, 0, 3),
        (&[2, 3, 5], 0, 1, 1),
        (&[2, 3, 5], 2, 1, 3),
        (&[2, 3, 4, 5], 2, 1, 3),
        (&[2, 3, 4, 13], 3, 5, 7),
    ];
    for (ind, axis, start, len) in cases {
        for_all(
            &format!("narrow {ind:?} axis {axis} [{start}, +{len})"),
            |dt| {
                let mut g = Graph::new("narrow");
                let x = g.input("x", s(ind, dt));
                let n = g.narrow_(x, *axis, *start, *len);
                g.set_outputs(vec![n]);
                g
            },
        );
    }
}

#[test]
fn concat_parity() {
    // (input dims, axis)
    let cases: &[(&[&[usize]], usize)] = &[
        (&[&[3]], 0),
        (&[&[3], &[5]], 0),
        (&[&[2, 1], &[2, 3], &[2, 4]], 1),
        (&[&[1, 3, 5], &[2, 3, 5], &[4, 3, 5]], 0),
        (&[&[2, 3, 1], &[2, 3, 1]], 2),
        (
            &[&[2, 1, 3, 2], &[2, 1, 3, 5], &[2, 1, 3, 1], &[2, 1, 3, 7]],
            3,
        ),
        (&[&[2, 3, 4, 5], &[2, 7, 4, 5]], 1),
    ];
    for (ins, axis) in cases {
        for_all(&format!("concat {ins:?} axis {axis}"), |dt| {
            let mut g = Graph::new("concat");
            let xs: Vec<_> = ins
                .iter()
                .enumerate()
                .map(|(i, d)| g.input(format!("x{i}"), s(d, dt)))
                .collect();
            let c = g.concat_(xs, *axis);
            g.set_outputs(vec![c]);
            g
        });
    }
}

#[test]
fn expand_parity() {
    // (input dims, target): numpy broadcasting, implicit leading 1s.
    let cases: &[(&[usize], &[usize])] = &[
        (&[1], &[5]),
        (&[3, 1], &[3, 4]),
        (&[5], &[2, 3, 5]),
        (&[1, 3, 1], &[2, 3, 7]),
        (&[2, 1, 3, 1], &[2, 5, 3, 4]),
        (&[3, 1], &[2, 1, 3, 5]),
        (&[1, 1], &[1, 1]),
    ];
    for (ind, target) in cases {
        for_all(&format!("expand {ind:?}->{target:?}"), |dt| {
            let mut g = Graph::new("expand");
            let x = g.input("x", s(ind, dt));
            let e = g.add_node(
                Op::Expand {
                    target_shape: target.iter().map(|d| *d as i64).collect(),
                },
                vec![x],
                s(target, dt),
            );
            g.set_outputs(vec![e]);
            g
        });
    }
}

/// A gather graph: `table` gathered on `axis` by `idx` of dtype `idt`.
fn gather_graph(tdims: &[usize], dt: IrDType, idims: &[usize], idt: IrDType, axis: usize) -> Graph {
    let mut g = Graph::new("gather");
    let t = g.input("table", s(tdims, dt));
    let i = g.input("idx", s(idims, idt));
    let mut out: Vec<usize> = tdims[..axis].to_vec();
    out.extend_from_slice(idims);
    out.extend_from_slice(&tdims[axis + 1..]);
    let o = g.gather(t, i, axis, s(&out, dt));
    g.set_outputs(vec![o]);
    g
}

#[test]
fn gather_parity() {
    // (table dims, index dims, axis)
    let cases: &[(&[usize], &[usize], usize)] = &[
        // embedding lookup: [vocab, d] by [seq] ids -> [seq, d]
        (&[11, 6], &[5], 0),
        (&[9], &[4], 0),
        (&[4, 7], &[3], 1),
        (&[2, 5, 3], &[2, 3], 1),
        (&[3, 2, 4, 5], &[7], 3),
        (&[13, 1, 3], &[2, 2, 2], 0),
    ];
    for (tdims, idims, axis) in cases {
        let extent = tdims[*axis];
        for idt in [IrDType::F32, IrDType::I64, IrDType::I32] {
            for (k, dt) in ALL.into_iter().enumerate() {
                let g = gather_graph(tdims, dt, idims, idt, *axis);
                let mut rng = rand::rngs::StdRng::seed_from_u64(7 + k as u64);
                let f = vec![
                    Feed {
                        name: "table".into(),
                        values: values(tdims.iter().product(), dt, 300 + k as u64),
                    },
                    Feed {
                        name: "idx".into(),
                        values: (0..idims.iter().product::<usize>())
                            .map(|_| rng.gen_range(0..extent) as f32)
                            .collect(),
                    },
                ];
                let what = format!("gather {tdims:?} by {idims:?} ({idt:?}) axis {axis}");
                // rlx-cpu reads i32 indices as f32 bits, so with i32 indices
                // only the f32 graph is a reference.
                if idt == IrDType::I32 {
                    let reference = run_cpu(&as_f32(&g), &f);
                    check_against(&format!("{what} {dt:?}"), &g, &f, &reference, EXACT);
                } else {
                    check_move(&what, &g, dt, &f);
                }
            }
        }
    }
}

/// Indices that are negative, fractional, NaN or past the axis. rlx-cpu
/// reads an f32 index as `i as usize` (truncation toward zero; negatives
/// and NaN saturate to 0) and an i64 index as `max(i, 0)`, and skips an
/// index past the axis, leaving that output slice unwritten. The plugin
/// writes zeros there (what a fresh CPU output buffer holds) and never reads
/// outside the table. The reference is computed here, independently.
#[test]
fn gather_index_edge_cases() {
    let tdims = [5usize, 3];
    let table: Vec<f32> = (0..15).map(|v| v as f32 + 1.0).collect();
    let row = |r: Option<usize>| -> Vec<f32> {
        match r {
            Some(r) => table[r * 3..r * 3 + 3].to_vec(),
            None => vec![0.0; 3],
        }
    };
    // f32 indices
    let idx = [-1.0f32, -0.5, 2.7, 4.0, 5.0, 100.0, f32::NAN, 1e10, 3.0];
    let want_rows = [
        Some(0),
        Some(0),
        Some(2),
        Some(4),
        None,
        None,
        Some(0),
        None,
        Some(3),
    ];
    for dt in [IrDType::F32, IrDType::F16, IrDType::BF16] {
        let g = gather_graph(&tdims, dt, &[idx.len()], IrDType::F32, 0);
        let f = vec![
            Feed {
                name: "table".into(),
                values: table.clone(),
            },
            Feed {
                name: "idx".into(),
                values: idx.to_vec(),
            },
        ];
        let want: Vec<f32> = want_rows.iter().flat_map(|r| row(*r)).collect();
        // The CPU agrees wherever it writes (every in-range index).
        if dt == IrDType::F32 {
            let cpu = run_cpu(&g, &f);
            for (k, r) in want_rows.iter().enumerate() {
                if r.is_some() {
                    assert_eq!(cpu[0][k * 3..k * 3 + 3], want[k * 3..k * 3 + 3], "row {k}");
                }
            }
        }
        check_against(
            &format!("gather edge f32 idx {dt:?}"),
            &g,
            &f,
            &[want],
            EXACT,
        );
    }
    // i64 and i32 indices: negatives clamp to 0, past the axis gives zeros.
    let idx = [-3.0f32, 0.0, 4.0, 5.0, 7.0, 1.0];
    let want_rows = [Some(0), Some(0), Some(4), None, None, Some(1)];
    let want: Vec<f32> = want_rows.iter().flat_map(|r| row(*r)).collect();
    for idt in [IrDType::I64, IrDType::I32] {
        let g = gather_graph(&tdims, IrDType::F32, &[idx.len()], idt, 0);
        let f = vec![
            Feed {
                name: "table".into(),
                values: table.clone(),
            },
            Feed {
                name: "idx".into(),
                values: idx.to_vec(),
            },
        ];
        if idt == IrDType::I64 {
            let cpu = run_cpu(&g, &f);
            for (k, r) in want_rows.iter().enumerate() {
                if r.is_some() {
                    assert_eq!(cpu[0][k * 3..k * 3 + 3], want[k * 3..k * 3 + 3], "row {k}");
                }
            }
        }
        check_against(
            &format!("gather edge {idt:?} idx"),
            &g,
            &f,
            std::slice::from_ref(&want),
            EXACT,
        );
    }
    // Same on a non-zero axis: [2, 5] gathered on axis 1.
    let g = gather_graph(&[2, 5], IrDType::F32, &[4], IrDType::F32, 1);
    let t2: Vec<f32> = (0..10).map(|v| v as f32 + 1.0).collect();
    let f = vec![
        Feed {
            name: "table".into(),
            values: t2.clone(),
        },
        Feed {
            name: "idx".into(),
            values: vec![4.0, -2.0, 9.0, 1.5],
        },
    ];
    let want = vec![5.0, 1.0, 0.0, 2.0, 10.0, 6.0, 0.0, 7.0];
    check_against("gather edge axis 1", &g, &f, &[want], EXACT);
}

/// Shape ops inside a larger graph (a transpose feeding a narrow feeding a
/// concat with an expanded value), f32 against the CPU directly.
#[test]
fn shape_chain_parity() {
    for (k, dt) in ALL.into_iter().enumerate() {
        let mut g = Graph::new("chain");
        let x = g.input("x", s(&[3, 4, 5], dt));
        let y = g.input("y", s(&[1, 3], dt));
        let t = g.transpose_(x, vec![2, 0, 1]); // [5, 3, 4]
        let n = g.narrow_(t, 2, 1, 2); // [5, 3, 2]
        let r = g.reshape(n, vec![5, 6], s(&[5, 6], dt));
        let e = g.add_node(
            Op::Expand {
                target_shape: vec![2, 3],
            },
            vec![y],
            s(&[2, 3], dt),
        );
        let er = g.reshape(e, vec![1, 6], s(&[1, 6], dt));
        let c = g.concat_(vec![r, er], 0); // [6, 6]
        g.set_outputs(vec![c, t]);
        let f = feeds(&g, 900 + k as u64);
        check_move("transpose->narrow->reshape ++ expand", &g, dt, &f);
    }
}

/// Malformed shape nodes fail at compile time, naming the node: a reshape
/// that changes the element count, an expand that is not a broadcast.
#[test]
fn malformed_shape_nodes_fail_at_compile_naming_the_node() {
    use rlx_plugin_api::Mode;
    let p = rlx_plugin_tests::parity::mlx();
    let mut g = Graph::new("bad_reshape");
    let x = g.input("x", s(&[2, 3], IrDType::F32));
    let r = g.add_node(
        Op::Reshape { new_shape: vec![7] },
        vec![x],
        s(&[7], IrDType::F32),
    );
    g.set_outputs(vec![r]);
    let e = p
        .compile(&rlx_ir::rlxmodel::to_text(&g).unwrap(), Mode::Lazy)
        .err()
        .expect("6 elements do not reshape to 7");
    assert!(
        e.message.contains("node %1")
            && e.message.contains("Reshape")
            && e.message.contains("must preserve the element count"),
        "{e}"
    );

    let mut g = Graph::new("bad_expand");
    let x = g.input("x", s(&[2, 3], IrDType::F32));
    let r = g.add_node(
        Op::Expand {
            target_shape: vec![4, 3],
        },
        vec![x],
        s(&[4, 3], IrDType::F32),
    );
    g.set_outputs(vec![r]);
    for mode in rlx_plugin_tests::parity::modes_for(&g) {
        let e = p
            .compile(&rlx_ir::rlxmodel::to_text(&g).unwrap(), mode)
            .err()
            .expect("[2, 3] does not broadcast to [4, 3]");
        assert!(
            e.message.contains("node %1") && e.message.contains("Expand"),
            "{e}"
        );
    }
}

#[test]
fn dynamic_update_slice_writes_at_the_run_time_start_clamped() {
    // operand [2, 5, 3], update [2, 2, 3] on axis 1; starts inside, past
    // the end (clamped to 3), negative (clamped to 0) and fractional
    // (truncated). Reference: the write done here, and rlx-cpu's result.
    let od = [2usize, 5, 3];
    let ud = [2usize, 2, 3];
    let operand: Vec<f32> = (0..30).map(|v| v as f32).collect();
    let update: Vec<f32> = (0..12).map(|v| -(v as f32) - 1.0).collect();
    for start in [1.0f32, 4.0, 9.0, -2.0, 2.7] {
        let mut g = Graph::new("dus");
        let o = g.input("o", s(&od, IrDType::F32));
        let u = g.input("u", s(&ud, IrDType::F32));
        let st = g.input("start", s(&[1], IrDType::F32));
        let y = g.add_node(
            Op::DynamicUpdateSlice { axis: 1 },
            vec![o, u, st],
            s(&od, IrDType::F32),
        );
        g.set_outputs(vec![y]);
        let at = (start.max(0.0) as usize).min(od[1] - ud[1]);
        let mut want = operand.clone();
        for b in 0..2 {
            for r in 0..2 {
                for c in 0..3 {
                    want[(b * 5 + at + r) * 3 + c] = update[(b * 2 + r) * 3 + c];
                }
            }
        }
        let feeds = vec![
            Feed {
                name: "o".into(),
                values: operand.clone(),
            },
            Feed {
                name: "u".into(),
                values: update.clone(),
            },
            Feed {
                name: "start".into(),
                values: vec![start],
            },
        ];
        let cpu = run_cpu(&g, &feeds);
        assert_eq!(cpu[0], want, "rlx-cpu at start {start}");
        check_against(
            &format!("DynamicUpdateSlice at {start}"),
            &g,
            &feeds,
            &[want],
            Tol::for_dtype(IrDType::F32),
        );
    }
}
