//! What the fuzzer decides in a state step of `sequences` (`state_steps.rs`):
//! the steps themselves, and names, sizes, values and row feeds biased to the
//! slot's own graph, so that calls get past the plugin's first checks often
//! enough to reach what is behind them.

use arbitrary::Arbitrary;
use rlx_plugin_api::{DType, HostTensor, Role};
use rlx_plugin_loader::PluginExecutable;

/// Names of the graphs' inputs, params and outputs, and a few that are none.
pub const NAMES: [&str; 14] = [
    "s", "k", "h", "x", "t", "u", "w", "next", "y", "row", "kk", "out", "", "nope",
];

pub const DTYPES: [DType; 6] = [
    DType::F32,
    DType::F16,
    DType::I32,
    DType::BF16,
    DType::U8,
    DType::Bool,
];

/// The graphs' own shapes, and a few near them.
pub const SHAPES: [&[usize]; 8] = [
    &[2, 3],
    &[1, 4, 2],
    &[1, 1, 2],
    &[3],
    &[3, 2],
    &[6],
    &[],
    &[0, 3],
];

/// A name: the slot's state input (`s`, `k` or `h`), its own inputs,
/// outputs and params most of the time (a state's name is an input's, a
/// feed's output an output's), so that calls get past the name checks;
/// else one of `NAMES` or any string. (Coverage cannot steer the fuzzer
/// to names the plugin accepts: it sees this harness, not the plugin.)
#[derive(Arbitrary, Debug)]
pub enum Name {
    State,
    Input(u8),
    Output(u8),
    Param(u8),
    Known(u8),
    Other(String),
}

impl Name {
    pub fn get(&self, exe: &PluginExecutable) -> String {
        match self {
            Name::State => state_input(exe),
            Name::Input(i) => own(exe, Role::Input, *i),
            Name::Output(i) => own(exe, Role::Output, *i),
            Name::Param(i) => own(exe, Role::Param, *i),
            Name::Known(i) => NAMES[*i as usize % NAMES.len()].to_string(),
            Name::Other(s) => s.clone(),
        }
    }
}

/// A name where the step wants one of a kind (a state, an output, a
/// param): that kind of the slot's own most of the time, else any
/// [`Name`].
#[derive(Arbitrary, Debug)]
pub struct Named {
    own: u8,
    other: Name,
}

impl Named {
    pub fn state(&self, exe: &PluginExecutable) -> String {
        self.pick(exe, state_input)
    }
    pub fn output(&self, exe: &PluginExecutable) -> String {
        self.pick(exe, |e| own(e, Role::Output, self.own))
    }
    pub fn param(&self, exe: &PluginExecutable) -> String {
        self.pick(exe, |e| own(e, Role::Param, self.own))
    }
    pub fn pick(
        &self,
        exe: &PluginExecutable,
        mine: impl Fn(&PluginExecutable) -> String,
    ) -> String {
        if self.own < 200 {
            mine(exe)
        } else {
            self.other.get(exe)
        }
    }
}

/// The `i`-th value of `role` in the signature, by name ("" if none).
pub fn own(exe: &PluginExecutable, role: Role, i: u8) -> String {
    let names: Vec<&str> = exe.values(role).map(|v| v.name.as_str()).collect();
    match names.len() {
        0 => String::new(),
        n => names[i as usize % n].to_string(),
    }
}

/// The input of the slot's graph that holds its state (else its first).
pub fn state_input(exe: &PluginExecutable) -> String {
    let inputs: Vec<&str> = exe.values(Role::Input).map(|v| v.name.as_str()).collect();
    let pick = inputs.iter().find(|n| ["s", "k", "h"].contains(n));
    pick.or(inputs.first())
        .map_or(String::new(), |n| n.to_string())
}

/// A `u64` that is small most of the time (0..4, what a row feed of the
/// graphs here takes), sometimes below 16, else one of the edges.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub struct Big(u8);

impl Big {
    pub fn get(self) -> u64 {
        const EDGES: [u64; 8] = [
            u64::MAX,
            u64::MAX / 2 + 1,
            1 << 32,
            u32::MAX as u64,
            1 << 20,
            1 << 40,
            u64::MAX - 1,
            (1 << 62) + 3,
        ];
        match self.0 {
            b @ 0..=199 => (b % 4) as u64,
            b @ 200..=247 => (b % 16) as u64,
            b => EDGES[(b - 248) as usize],
        }
    }
}

#[derive(Arbitrary, Debug)]
pub enum ShapeSpec {
    Known(u8),
    Dims(Vec<u8>),
}

impl ShapeSpec {
    pub fn get(&self) -> Vec<usize> {
        match self {
            ShapeSpec::Known(i) => SHAPES[*i as usize % SHAPES.len()].to_vec(),
            ShapeSpec::Dims(d) => d.iter().take(4).map(|x| *x as usize % 9).collect(),
        }
    }
}

/// A value to bind: one that fits the input it is bound to (its dtype
/// and shape from the signature), or any dtype and shape.
#[derive(Arbitrary, Debug)]
pub enum Value {
    Fits {
        fill: u8,
    },
    Any {
        dtype: u8,
        shape: ShapeSpec,
        fill: u8,
    },
}

impl Value {
    pub fn tensor(&self, exe: &PluginExecutable, name: &str) -> HostTensor {
        let (dtype, shape, fill) = match self {
            Value::Any { dtype, shape, fill } => {
                (DTYPES[*dtype as usize % DTYPES.len()], shape.get(), *fill)
            }
            Value::Fits { fill } => {
                let fits = exe
                    .values(Role::Input)
                    .find(|v| v.name == name)
                    .and_then(|v| Some((v.dtype, v.shape.iter().copied().collect::<Option<_>>()?)));
                let (d, s) = fits.unwrap_or((DType::F32, vec![2, 3]));
                (d, s, *fill)
            }
        };
        let n: usize = shape.iter().product();
        // Bool wants 0 or 1; any other byte pattern is some number.
        let byte = if dtype == DType::Bool { fill & 1 } else { fill };
        HostTensor::new(dtype, shape, vec![byte; n * dtype.size_bytes()]).expect("sized")
    }
}

/// Every field of an `RlxRowFeed`; `dst_rows`, when given, holds `batch`
/// rows (the caller's promise), so only for a batch of at most 64.
#[derive(Arbitrary, Debug)]
pub struct Rows {
    /// 255: a struct_size one field short (the rest: the whole struct).
    pub short: u8,
    pub row_elems: Big,
    pub n_rows: Big,
    pub src_row: Big,
    pub dst_row: Big,
    pub batch: Big,
    pub src_batch_rows: Big,
    pub dst_batch_rows: Big,
    pub dst_rows: Option<Vec<u8>>,
}

#[derive(Arbitrary, Debug)]
pub enum StateStep {
    /// The params and the state input bound to values that fit, the state
    /// fed from output 0: `ROWS` for the cache, `REPLACE` for the others.
    Setup {
        slot: u8,
        fill: u8,
    },
    Compile {
        graph: u8,
        mode: u8,
    },
    Bind {
        slot: u8,
        name: Named,
        value: Value,
    },
    Unbind {
        slot: u8,
        name: Named,
    },
    Read {
        slot: u8,
        name: Named,
        first: Big,
        n: u8,
        dtype: u8,
    },
    List {
        slot: u8,
    },
    SetFeed {
        slot: u8,
        name: Named,
        kind: u8,
        output: Named,
    },
    FeedRows {
        slot: u8,
        name: Option<Named>,
        rows: Rows,
    },
    ReadOutput {
        slot: u8,
        output: Named,
        first: Big,
        n: u8,
        dtype: u8,
    },
    Run {
        slot: u8,
        give_state: bool,
        wrong: bool,
    },
    Clone {
        slot: u8,
    },
    Share {
        dst: u8,
        src: u8,
    },
    Dead {
        slot: u8,
        dead: u8,
        call: u8,
    },
    Submit {
        slot: u8,
        give_state: bool,
        wrong: bool,
        times: u8,
    },
    Wait {
        slot: u8,
        how: u8,
    },
    ParamRange {
        slot: u8,
        name: Named,
        offset: Big,
        len: u8,
    },
    SetRng {
        slot: u8,
        policy: u8,
        seed: u64,
    },
    SetExtent {
        slot: u8,
        active: Big,
        upper: Big,
    },
    Memory,
}

/// The dtype of a read's buffer: mostly that of the value `name` of
/// `role` (a state has its input's), else any.
pub fn pick_dtype(exe: &PluginExecutable, role: Role, name: &str, pick: u8) -> DType {
    let own = exe.values(role).find(|v| v.name == name).map(|v| v.dtype);
    match own {
        Some(d) if pick < 192 => d,
        _ => DTYPES[pick as usize % DTYPES.len()],
    }
}
