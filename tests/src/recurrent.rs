//! The recurrent layers' shapes (rlx's `Lstm`, `Gru`, `Rnn`: packed
//! weights, one layer-direction after another) and the op node, for the
//! recurrent suites (`mlx_recurrent`, `mlx_rnn_f16`).

use rlx_ir::{DType, Graph, NodeId, Op, Shape};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cell {
    Lstm,
    Gru,
    Rnn { relu: bool },
}

#[derive(Clone, Copy, Debug)]
pub struct Spec {
    pub cell: Cell,
    pub batch: usize,
    pub seq: usize,
    pub input: usize,
    pub hidden: usize,
    pub layers: usize,
    pub bi: bool,
    pub carry: bool,
}

impl Spec {
    pub fn gates(&self) -> usize {
        match self.cell {
            Cell::Lstm => 4,
            Cell::Gru => 3,
            Cell::Rnn { .. } => 1,
        }
    }
    pub fn dirs(&self) -> usize {
        if self.bi {
            2
        } else {
            1
        }
    }
    /// Layer-directions.
    pub fn ld(&self) -> usize {
        self.layers * self.dirs()
    }
    pub fn w_ih_len(&self) -> usize {
        let gh = self.gates() * self.hidden;
        (0..self.layers)
            .map(|l| {
                let in_l = if l == 0 {
                    self.input
                } else {
                    self.dirs() * self.hidden
                };
                self.dirs() * gh * in_l
            })
            .sum()
    }
    pub fn w_hh_len(&self) -> usize {
        self.ld() * self.gates() * self.hidden * self.hidden
    }
    pub fn bias_len(&self) -> usize {
        self.ld() * self.gates() * self.hidden
    }
    /// `h0` / `c0`: `[layer-directions, batch, hidden]`.
    pub fn state_dims(&self) -> [usize; 3] {
        [self.ld(), self.batch, self.hidden]
    }

    /// The op, over `ins` (x, w_ih, w_hh, b_ih[, b_hh][, h0[, c0]]), as
    /// `g`'s only output `[batch, seq, dirs * hidden]`.
    pub fn add_op(&self, g: &mut Graph, ins: Vec<NodeId>) {
        let (hidden_size, num_layers, bidirectional, carry) =
            (self.hidden, self.layers, self.bi, self.carry);
        let op = match self.cell {
            Cell::Lstm => Op::Lstm {
                hidden_size,
                num_layers,
                bidirectional,
                carry,
            },
            Cell::Gru => Op::Gru {
                hidden_size,
                num_layers,
                bidirectional,
                carry,
            },
            Cell::Rnn { relu } => Op::Rnn {
                hidden_size,
                num_layers,
                bidirectional,
                carry,
                relu,
            },
        };
        let out = Shape::new(
            &[self.batch, self.seq, self.dirs() * self.hidden],
            DType::F32,
        );
        let y = g.add_node(op, ins, out);
        g.set_outputs(vec![y]);
    }
}
