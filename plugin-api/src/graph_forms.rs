//! Graph forms (docs/ABI.md §24): a graph in a form both sides read faster than
//! `.rlxmodel` text, for plugins (feature `graph-forms`) and hosts alike, so
//! that the two ends share one definition.
//!
//! The one form so far, [`rlx_ir_bincode`]: rlx-ir's own serde form of a
//! graph written by bincode. rlx-ir leaves four fields of a graph out of
//! its serde form (variables, output names, symbolic attributes and
//! derived dims); the first two travel beside it here, one entry per graph
//! (the graph, then every body of its nodes' ops, depth first), and a
//! graph with either of the last two is not encoded at all: it goes as
//! text, which carries them.

use rlx_ir::{Graph, NodeId};
use serde::{Deserialize, Serialize};

/// The form's name for rlx-ir `rlx_ir_version` whose serde layout has the
/// fingerprint `layout` ([`layout_fingerprint`]). rlx-ir's serde layout is
/// that release's and no other's, so both sides must be built against the
/// same release, and from the same sources: a `[patch]` or a fork under one
/// version number may lay a graph out otherwise, which the fingerprint
/// tells apart. `v1` is this module's layout around it.
pub fn rlx_ir_bincode(rlx_ir_version: &str, layout: &str) -> String {
    format!("rlx-ir {rlx_ir_version} bincode v1 layout {layout}")
}

/// Of `forms`, the one that is `form` in another layout (the same name up
/// to its layout fingerprint), if any: a host and a plugin built from
/// different rlx-ir sources under one version.
pub fn in_other_layout<'a>(form: &str, forms: &'a [String]) -> Option<&'a String> {
    let base = |f: &'a str| f.split(" layout ").next().unwrap_or(f);
    let ours = form.split(" layout ").next().unwrap_or(form);
    forms.iter().find(|f| f.as_str() != form && base(f) == ours)
}

/// [`rlx_ir_bincode`] for the rlx-ir this crate is built with.
pub fn this_rlx_ir_bincode() -> String {
    rlx_ir_bincode(rlx_ir::rlxmodel::RLX_VERSION, layout_fingerprint())
}

/// The fingerprint of the serde layout of rlx-ir's `Graph` in this build:
/// every type it reaches, with its fields and variants in order, as
/// `serde-reflection` traces them ([`graph_schema`]), hashed (FNV-1a, 64
/// bits, hex: the same on every platform and compiler). Computed once.
pub fn layout_fingerprint() -> &'static str {
    static FP: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    FP.get_or_init(|| hash_schema(graph_schema()))
}

/// The serde schema of rlx-ir's `Graph`: every container it reaches, with
/// every variant of every enum. Tracing explores the variants of the enum
/// it is asked for and takes the first variant of any other it meets, so
/// each enum a graph holds is traced by name here; a test keeps the list
/// whole (an enum missing from it fails the trace).
pub fn graph_schema() -> Result<serde_reflection::Registry, String> {
    use rlx_ir::op::*;
    use serde_reflection::{Tracer, TracerConfig};
    let mut t = Tracer::new(TracerConfig::default());
    macro_rules! trace {
        ($($ty:ty),* $(,)?) => {
            $(t.trace_simple_type::<$ty>().map_err(|e| e.to_string())?;)*
        };
    }
    trace!(Graph, rlx_ir::Op, rlx_ir::DType, rlx_ir::Dim);
    trace!(
        Activation,
        AdaNormKind,
        AttentionBwdWrt,
        BinaryOp,
        ChainOperand,
        ChainStep,
        CmpOp,
        rlx_ir::double_single::DfOp,
        rlx_ir::fft::FftAlgo,
        rlx_ir::fft::FftNorm,
        rlx_ir::fft::FftQScale,
        rlx_ir::fft::FftContraction,
        rlx_ir::fft::FftTwiddles,
        rlx_ir::number_format::FormatScaling,
        MaskKind,
        PadMode,
        QrPart,
        rlx_ir::quant::QuantScheme,
        ReduceOp,
        RegionPrologue,
        RopeStyle,
        rlx_ir::quant::ScaleLayout,
        ScaleMode,
        rlx_ir::quant::ScaledFormat,
        ScatterNdReduction,
        SpdMatFn,
        SteKind,
        SvdPart,
        SynthBwdWrt,
        SynthKind,
        TransformStep,
    );
    t.registry().map_err(|e| e.to_string())
}

/// The hash of a traced schema (a sorted map of containers), or, should
/// tracing fail, of its error: deterministic for one build either way (a
/// test keeps rlx-ir's Graph traced whole).
fn hash_schema(schema: Result<serde_reflection::Registry, String>) -> String {
    let text = match schema {
        Ok(r) => format!("{r:?}"),
        Err(e) => format!("untraced: {e}"),
    };
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// What rlx-ir's serde form leaves out of one graph and this form keeps.
#[derive(Serialize, Deserialize)]
struct Side {
    vars: Vec<(NodeId, usize)>,
    output_names: Vec<(usize, String)>,
}

#[derive(Serialize)]
struct Encoding<'a> {
    graph: &'a Graph,
    sides: Vec<Side>,
}

#[derive(Deserialize)]
struct Decoding {
    graph: Graph,
    sides: Vec<Side>,
}

/// Every graph in `g`, `g` first, then its nodes' bodies depth first.
fn each_graph<'a>(g: &'a Graph, f: &mut impl FnMut(&'a Graph)) {
    f(g);
    for n in g.nodes() {
        for body in n.op.subgraphs() {
            each_graph(body, f);
        }
    }
}

fn each_graph_mut(g: &mut Graph, f: &mut impl FnMut(&mut Graph)) {
    f(g);
    for n in g.nodes_mut() {
        for body in n.op.subgraphs_mut() {
            each_graph_mut(body, f);
        }
    }
}

/// `graph` in [`rlx_ir_bincode`]'s form, or why it cannot be (a symbolic
/// graph, which only text carries whole).
pub fn encode(graph: &Graph) -> Result<Vec<u8>, String> {
    let mut sides = Vec::new();
    let mut symbolic = false;
    each_graph(graph, &mut |g| {
        symbolic |= !g.sym_attrs().is_empty() || !g.sym_defs().is_empty();
        sides.push(Side {
            vars: g.vars().to_vec(),
            output_names: g.output_names().to_vec(),
        });
    });
    if symbolic {
        return Err("the graph has symbolic attributes or derived dims".into());
    }
    bincode::serialize(&Encoding { graph, sides }).map_err(|e| e.to_string())
}

/// The deepest nesting of bodies (a Scan's inside a While's inside an
/// If's: three) a decoded graph may have: what `.rlxmodel` text's bracket
/// limit (`graph_text::MAX_NESTING`) allows, about, so that a plugin's
/// lowering, which recurses into each body, meets no deeper graph this way
/// than as text.
pub const MAX_BODY_DEPTH: usize = 64;

/// `DeserializeSeed` for [`Decoding`] that grows the stack on the heap as
/// nested bodies need it (bincode recurses once per level, with no limit
/// of its own).
struct Stacked;

impl<'de> serde::de::DeserializeSeed<'de> for Stacked {
    type Value = Decoding;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Decoding, D::Error> {
        Decoding::deserialize(serde_stacker::Deserializer::new(d))
    }
}

/// How deep `g`'s bodies nest (0: none) and how many graphs it holds
/// (itself and every body), walked without recursion.
fn bodies(g: &Graph) -> (usize, usize) {
    let (mut deepest, mut graphs) = (0, 0);
    let mut stack = vec![(g, 0usize)];
    while let Some((g, depth)) = stack.pop() {
        deepest = deepest.max(depth);
        graphs += 1;
        for n in g.nodes() {
            stack.extend(n.op.subgraphs().into_iter().map(|b| (b, depth + 1)));
        }
    }
    (deepest, graphs)
}

/// Drop `g` a body at a time: a graph nested deeper than the stack allows
/// a recursive drop must not take the process down with it.
fn drop_flat(g: Graph) {
    let mut stack = vec![g];
    while let Some(mut g) = stack.pop() {
        for n in g.nodes_mut() {
            for body in n.op.subgraphs_mut() {
                stack.push(std::mem::replace(body, Graph::new("")));
            }
        }
    }
}

/// What `.rlxmodel` text guarantees by its grammar and rlx-ir's serde form
/// does not: in every graph, node `i` has id `i` and reads only nodes
/// before it, outputs are nodes, a variable is an input fed by an output,
/// and a name is an output's. Walked without recursion.
fn check_structure(g: &Graph) -> Result<(), String> {
    let mut stack = vec![g];
    while let Some(g) = stack.pop() {
        let len = g.nodes().len();
        for (i, n) in g.nodes().iter().enumerate() {
            if n.id.0 as usize != i {
                return Err(format!("graph {:?}: node {i} has id {}", g.name, n.id));
            }
            if let Some(bad) = n.inputs.iter().find(|x| x.0 as usize >= i) {
                return Err(format!(
                    "graph {:?}: {} reads {bad}, which is not defined before it",
                    g.name, n.id
                ));
            }
            stack.extend(n.op.subgraphs());
        }
        if let Some(bad) = g.outputs.iter().find(|o| o.0 as usize >= len) {
            return Err(format!("graph {:?}: output {bad} is not a node", g.name));
        }
        let n_out = g.outputs.len();
        for (input, out) in g.vars() {
            let is_input = g
                .nodes()
                .get(input.0 as usize)
                .is_some_and(|n| matches!(n.op, rlx_ir::Op::Input { .. }));
            if !is_input || *out >= n_out {
                return Err(format!(
                    "graph {:?}: variable {input} fed by output {out} is not an input fed by \
                     one of its {n_out} outputs",
                    g.name
                ));
            }
        }
        if let Some((i, name)) = g.output_names().iter().find(|(i, _)| *i >= n_out) {
            return Err(format!(
                "graph {:?}: the name {name:?} is given to output {i} of {n_out}",
                g.name
            ));
        }
    }
    Ok(())
}

/// The graph [`encode`] wrote. Errors (never a panic, a stack overflow or
/// an allocation much larger than `bytes`) on anything else, on a graph
/// whose bodies nest deeper than [`MAX_BODY_DEPTH`], and on one that text
/// could not have written ([`check_structure`]).
pub fn decode(bytes: &[u8]) -> Result<Graph, String> {
    use bincode::Options;
    // `bincode::serialize`'s encoding; a slice is read no further than
    // its end, and serde allocates a sequence's claimed length only as
    // its elements arrive.
    let d: Decoding = bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .reject_trailing_bytes()
        .deserialize_seed(Stacked, bytes)
        .map_err(|e| {
            format!(
                "not a graph in the form {}: {e} (a host and plugin built from different \
                 rlx-ir sources under one version? RLX_PLUGIN_GRAPH_FORM=text sends text)",
                this_rlx_ir_bincode()
            )
        })?;
    let (depth, count) = bodies(&d.graph);
    if depth > MAX_BODY_DEPTH {
        drop_flat(d.graph);
        return Err(format!(
            "the graph's bodies nest {depth} deep, more than the {MAX_BODY_DEPTH} allowed"
        ));
    }
    let (mut graph, sides) = (d.graph, d.sides);
    if count != sides.len() {
        return Err(format!(
            "the graph holds {count} graphs but {} entries of variables and output names",
            sides.len()
        ));
    }
    let mut sides = sides.into_iter();
    each_graph_mut(&mut graph, &mut |g| {
        if let Some(s) = sides.next() {
            g.set_vars(s.vars);
            g.set_output_names(s.output_names);
        }
    });
    check_structure(&graph)?;
    Ok(graph)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::op::BinaryOp;
    use rlx_ir::{DType, Op, Shape};

    /// A constant with values text must spell out (-0, -inf, NaN), a Scan
    /// whose body names its output, a variable and an output name.
    fn graph() -> Graph {
        let s = Shape::new(&[2, 3], DType::F32);
        let mut body = Graph::new("body");
        let c = body.input("c", s.clone());
        let next = body.binary(BinaryOp::Mul, c, c, s.clone());
        body.set_outputs(vec![next]);
        body.name_output(0, "next");
        let mut g = Graph::new("g");
        let x = g.input("x", s.clone());
        let data = [1.5f32, -0.0, f32::NEG_INFINITY, 2.0, 3.0, f32::NAN]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let k = g.add_node(Op::Constant { data }, vec![], s.clone());
        let y = g.binary(BinaryOp::Add, x, k, s.clone());
        let z = g.scan(y, body, 4);
        g.set_outputs(vec![y, z]);
        g.name_output(1, "z");
        g.set_vars(vec![(x, 0)]);
        g
    }

    fn names(g: &Graph) -> Vec<Vec<(usize, String)>> {
        let mut out = Vec::new();
        each_graph(g, &mut |g| out.push(g.output_names().to_vec()));
        out
    }

    /// [`layout_fingerprint`]'s hash of a simple type `T` (one whose enums,
    /// if any, are `T` itself): what tells two layouts of one name apart.
    fn fingerprint_of<T: serde::de::DeserializeOwned>() -> String {
        let mut t = serde_reflection::Tracer::new(serde_reflection::TracerConfig::default());
        let schema = t
            .trace_simple_type::<T>()
            .map_err(|e| e.to_string())
            .and_then(|_| t.registry().map_err(|e| e.to_string()));
        hash_schema(schema)
    }

    #[test]
    fn the_layout_fingerprint_is_traced_and_tells_layouts_apart() {
        let fp = layout_fingerprint();
        assert_eq!(fp.len(), 16, "{fp}");
        assert_eq!(fp, hash_schema(graph_schema()), "stable");
        assert!(this_rlx_ir_bincode().ends_with(&format!(" layout {fp}")));
        // The schema was traced whole, not its failure hashed.
        let t = std::time::Instant::now();
        let registry = graph_schema().unwrap();
        eprintln!(
            "traced {} containers in {:?}: {fp}",
            registry.len(),
            t.elapsed()
        );
        assert!(registry.contains_key("Op") && registry.contains_key("Shape"));
        // Two layouts of one name differ: a field added, fields reordered.
        mod a {
            #[allow(dead_code)]
            #[derive(serde::Deserialize)]
            pub struct Node {
                pub id: u32,
                pub name: String,
            }
        }
        mod b {
            #[allow(dead_code)]
            #[derive(serde::Deserialize)]
            pub struct Node {
                pub id: u32,
                pub name: String,
                pub extra: bool,
            }
        }
        mod c {
            #[allow(dead_code)]
            #[derive(serde::Deserialize)]
            pub struct Node {
                pub name: String,
                pub id: u32,
            }
        }
        let (fa, fb, fc) = (
            fingerprint_of::<a::Node>(),
            fingerprint_of::<b::Node>(),
            fingerprint_of::<c::Node>(),
        );
        assert!(fa != fb && fa != fc && fb != fc, "{fa} {fb} {fc}");
    }

    #[test]
    fn a_graph_comes_back_whole() {
        let g = graph();
        let back = decode(&encode(&g).unwrap()).unwrap();
        assert_eq!(
            rlx_ir::rlxmodel::to_text(&back).unwrap(),
            rlx_ir::rlxmodel::to_text(&g).unwrap()
        );
        assert_eq!(back.vars(), g.vars());
        assert_eq!(names(&back), names(&g));
        assert_eq!(names(&g)[1], vec![(0, "next".to_string())]);
    }

    #[test]
    fn a_symbolic_graph_is_left_to_text() {
        let mut g = graph();
        g.set_sym_defs(vec![rlx_ir::dynamic::SymDef {
            sym: 2,
            of: 1,
            times: None,
            scale: 16,
            linear: 0,
            inner: 1,
            div: 1,
            plus: None,
            plus_scale: 0,
            offset: 0,
        }]);
        assert!(encode(&g).unwrap_err().contains("symbolic"));
    }

    /// `levels` Scans, each the body of the next.
    fn nested(levels: usize) -> Graph {
        let s = Shape::new(&[2], DType::F32);
        let mut g = Graph::new("innermost");
        let c = g.input("c", s.clone());
        g.set_outputs(vec![c]);
        for _ in 0..levels {
            let mut outer = Graph::new("level");
            let c = outer.input("c", s.clone());
            let y = outer.scan(c, g, 1);
            outer.set_outputs(vec![y]);
            g = outer;
        }
        g
    }

    #[test]
    fn bodies_nested_too_deep_are_refused_not_a_stack_overflow() {
        let ok = nested(MAX_BODY_DEPTH);
        let back = decode(&encode(&ok).unwrap()).unwrap();
        assert_eq!(bodies(&back).0, MAX_BODY_DEPTH);
        drop_flat(back);
        drop_flat(ok);
        // Deeper than a thread's stack takes recursively: encoded (rlx-ir's
        // serde recurses) on a thread with a stack to match, decoded here.
        let deep = std::thread::Builder::new()
            .stack_size(1 << 30)
            .spawn(|| {
                let g = nested(20_000);
                let bytes = encode(&g).unwrap();
                drop_flat(g);
                bytes
            })
            .unwrap()
            .join()
            .unwrap();
        let e = decode(&deep).unwrap_err();
        assert!(e.contains("nest 20000 deep"), "{e}");
        let e = decode(&encode(&nested(MAX_BODY_DEPTH + 1)).unwrap()).unwrap_err();
        assert!(e.contains("nest 65 deep"), "{e}");
    }

    #[test]
    fn a_graph_text_could_not_have_written_is_refused() {
        type Spoil = fn(&mut Graph);
        let cases: [(&str, Spoil); 5] = [
            ("has id", |g| g.nodes_mut()[1].id = rlx_ir::NodeId(7)),
            ("not defined before it", |g| {
                g.nodes_mut()[0].inputs = vec![rlx_ir::NodeId(2)]
            }),
            ("is not a node", |g| g.outputs[0] = rlx_ir::NodeId(99)),
            ("is not an input fed", |g| {
                g.set_vars(vec![(rlx_ir::NodeId(3), 0)])
            }),
            ("is given to output", |g| {
                g.set_output_names(vec![(5, "z".into())])
            }),
        ];
        for (want, spoil) in cases {
            let mut g = graph();
            spoil(&mut g);
            let e = decode(&encode(&g).unwrap()).unwrap_err();
            assert!(e.contains(want), "{want}: {e}");
        }
    }

    #[test]
    fn anything_else_is_an_error() {
        let bytes = encode(&graph()).unwrap();
        for cut in [0, 1, 8, bytes.len() / 2, bytes.len() - 1] {
            assert!(decode(&bytes[..cut]).is_err(), "{cut} bytes");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
        // A huge length where the name's length is: refused, not allocated.
        let mut huge = bytes;
        huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode(&huge).is_err());
    }
}
