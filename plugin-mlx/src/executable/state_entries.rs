//! The executable's state entries (`Executable::state_*`): each
//! checks its names and layouts, then acts on [`super::States`].

use super::state::{read_range, Held};
use super::{layout_text, on_device, MlxExecutable};
use crate::lower::A;
use rlx_plugin_api::{
    Feed, PluginError, PluginResult, Role, RowFeed, StateBuf, TensorRef, ValueInfo,
};

impl MlxExecutable {
    /// The slot of the input `name`, or `NOT_FOUND` listing the inputs.
    fn state_slot_for(&self, name: &str) -> PluginResult<usize> {
        self.input_slot(name).ok_or_else(|| {
            PluginError::not_found(format!(
                "the graph has no input named {name:?} to hold as state (inputs: {})",
                self.inputs
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
    }

    /// The slot of the held state `name`, or `NOT_FOUND` listing them.
    fn held_slot(&self, name: &str) -> PluginResult<usize> {
        match self.input_slot(name) {
            Some(slot) if self.states.is_held(slot) => Ok(slot),
            _ => Err(PluginError::not_found(format!(
                "no state is called {name:?} (states: {})",
                self.state_names().join(", ")
            ))),
        }
    }

    fn state_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .states
            .held
            .keys()
            .map(|s| self.inputs[*s].0.as_str())
            .collect();
        names.sort();
        if names.is_empty() {
            names.push("none");
        }
        names
    }

    pub(super) fn bind_state(&mut self, name: &str, value: TensorRef<'_>) -> PluginResult<()> {
        let slot = self.state_slot_for(name)?;
        let id = self.inputs[slot].1;
        self.check_leaf("state", name, id, value.dtype, &value.shape)?;
        let _on = on_device(&self.device)?;
        let arr = self.new_leaf("state", name, id, &value.shape, &value.compact_cow()?)?;
        self.hold_at(slot, arr);
        Ok(())
    }

    /// Hold `value` as the state of input `slot` (a state held already
    /// keeps its feed).
    fn hold_at(&mut self, slot: usize, value: A) {
        match self.states.held.get_mut(&slot) {
            Some(h) => h.value = value,
            None => {
                let feed = Feed::None;
                self.states.held.insert(slot, Held { value, feed });
            }
        }
        // The input's array of the last run is not this state's to reuse.
        if let Some(k) = self.kept_inputs.get_mut(slot) {
            *k = None;
        }
    }

    /// Hold as the state `name` the array `src` (this
    /// executable when `None`) keeps as its state or last output `value`:
    /// the same array, not a copy (MLX arrays are not written in place while
    /// another reference holds them, so each executable's runs replace only
    /// their own).
    pub(super) fn bind_state_from(
        &mut self,
        name: &str,
        src: Option<&dyn rlx_plugin_api::Executable>,
        value: &str,
    ) -> PluginResult<()> {
        let other = match src {
            Some(e) => Some(MlxExecutable::of(e, "bind_from")?),
            None => None,
        };
        if name.is_empty() {
            return match other {
                Some(from) => self.take_states(from, value),
                // Its own states are already its own.
                None => Ok(()),
            };
        }
        let from: &MlxExecutable = other.unwrap_or(self);
        let slot = self.state_slot_for(name)?;
        let (arr, layout) = from.value_named(value)?;
        let want = self.declared_layout(self.inputs[slot].1);
        if layout != want {
            return Err(PluginError::invalid_argument(format!(
                "state {name:?} is {} but {value:?} is {}",
                layout_text(&want),
                layout_text(&layout)
            )));
        }
        let arr = arr.clone_handle();
        self.hold_at(slot, arr);
        Ok(())
    }

    /// Every state of `from` held here under its own name, with its feed:
    /// all or nothing (each an input here of its dtype and shape, each feed
    /// an output here of the dtype, and for `REPLACE` the shape, it had).
    fn take_states(&mut self, from: &MlxExecutable, value: &str) -> PluginResult<()> {
        if !value.is_empty() {
            return Err(PluginError::invalid_argument(
                "bind_from: with no state name, every state is taken; the value name must be \
                 empty too",
            ));
        }
        let mut taken = Vec::with_capacity(from.states.held.len());
        for (src_slot, held) in &from.states.held {
            let (name, src_id) = &from.inputs[*src_slot];
            let slot = self.state_slot_for(name)?;
            let (want, got) = (
                self.declared_layout(self.inputs[slot].1),
                from.declared_layout(*src_id),
            );
            if want != got {
                return Err(PluginError::invalid_argument(format!(
                    "state {name:?} is {} here but {} in the source",
                    layout_text(&want),
                    layout_text(&got)
                )));
            }
            if let Some(o) = held.feed.output() {
                let fits = match (self.graph.outputs.get(o), from.graph.outputs.get(o)) {
                    (Some(mine), Some(theirs)) => {
                        let (m, t) = (self.declared_layout(*mine), from.declared_layout(*theirs));
                        m.0 == t.0 && (matches!(held.feed, Feed::Rows(_)) || m.1 == t.1)
                    }
                    _ => false,
                };
                if !fits {
                    return Err(PluginError::invalid_argument(format!(
                        "state {name:?} is fed from output {o}, which this executable does not \
                         have as the source has it"
                    )));
                }
            }
            taken.push((slot, held.value.clone_handle(), held.feed));
        }
        for (slot, value, feed) in taken {
            self.hold_at(slot, value);
            self.states.held.get_mut(&slot).expect("held above").feed = feed;
        }
        Ok(())
    }

    /// The state called `name`, else the last run's output of that name,
    /// with its declared dtype and dims; `NOT_FOUND` naming both lists.
    fn value_named(
        &self,
        name: &str,
    ) -> PluginResult<(
        &rlx_mlx_shim::Array,
        (rlx_plugin_api::DType, rlx_plugin_api::tensor::Dims<usize>),
    )> {
        if let Some(slot) = self.input_slot(name).filter(|s| self.states.is_held(*s)) {
            let layout = self.declared_layout(self.inputs[slot].1);
            return Ok((&self.states.held[&slot].value, layout));
        }
        let output = (0..self.graph.outputs.len()).find(|&i| self.output_label(i) == name);
        match output {
            Some(i) => {
                let a = self.states.last.get(i).ok_or_else(|| {
                    PluginError::invalid_argument(format!(
                        "output {name:?} has no value: the source executable has not run"
                    ))
                })?;
                Ok((a, self.declared_layout(self.graph.outputs[i])))
            }
            None => Err(PluginError::not_found(format!(
                "the source executable has no state or output called {name:?} (states: {}; \
                 outputs: {})",
                self.state_names().join(", "),
                (0..self.graph.outputs.len())
                    .map(|i| self.output_label(i))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    pub(super) fn unbind_state(&mut self, name: &str) -> PluginResult<()> {
        let slot = self.held_slot(name)?;
        self.states.held.remove(&slot);
        Ok(())
    }

    pub(super) fn read_state(
        &mut self,
        name: &str,
        first: usize,
        into: StateBuf<'_>,
    ) -> PluginResult<()> {
        let slot = self.held_slot(name)?;
        let (dtype, _) = self.declared_layout(self.inputs[slot].1);
        if into.dtype != dtype {
            return Err(PluginError::invalid_argument(format!(
                "state {name:?} is {dtype}; the buffer lent to read it is {}",
                into.dtype
            )));
        }
        let _on = on_device(&self.device)?;
        read_range(&self.states.held[&slot].value, first, into.bytes)
            .map_err(|e| e.context(format!("reading state {name:?}")))
    }

    pub(super) fn list_states(&self) -> Vec<ValueInfo> {
        let mut v: Vec<ValueInfo> = self
            .states
            .held
            .keys()
            .map(|slot| {
                let (name, id) = &self.inputs[*slot];
                self.value_info(Role::State, name.clone(), *id)
            })
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    pub(super) fn set_state_feed(&mut self, name: &str, feed: Feed) -> PluginResult<()> {
        let slot = self.held_slot(name)?;
        if let Some(o) = feed.output() {
            let out = *self.graph.outputs.get(o).ok_or_else(|| {
                PluginError::not_found(format!(
                    "output {o} does not exist: the graph has {} outputs",
                    self.graph.outputs.len()
                ))
            })?;
            let (sd, ss) = self.declared_layout(self.inputs[slot].1);
            let (od, os) = self.declared_layout(out);
            let same_shape = matches!(feed, Feed::Rows(_)) || ss == os;
            if sd != od || !same_shape {
                return Err(PluginError::invalid_argument(format!(
                    "state {name:?} is {sd}{:?} but output {o} is {od}{:?}: a {} feed needs an \
                     output of the state's {}",
                    ss.as_slice(),
                    os.as_slice(),
                    if matches!(feed, Feed::Rows(_)) {
                        "row"
                    } else {
                        "replace"
                    },
                    if matches!(feed, Feed::Rows(_)) {
                        "dtype"
                    } else {
                        "dtype and shape"
                    }
                )));
            }
        }
        self.states.held.get_mut(&slot).expect("held").feed = feed;
        Ok(())
    }

    pub(super) fn feed_state_rows(
        &mut self,
        name: Option<&str>,
        rows: &RowFeed,
    ) -> PluginResult<()> {
        let slots: Vec<usize> = match name {
            Some(n) => vec![self.held_slot(n)?],
            None => self
                .states
                .held
                .iter()
                .filter(|(_, h)| matches!(h.feed, Feed::Rows(_)))
                .map(|(s, _)| *s)
                .collect(),
        };
        if slots.is_empty() {
            return Err(PluginError::invalid_argument(
                "no state is fed rows: set a ROWS feed on one first",
            ));
        }
        let _on = on_device(&self.device)?;
        let inputs = &self.inputs;
        self.states
            .feed_rows(&slots, rows, &|s| inputs[s].0.clone())
    }

    pub(super) fn read_last_output(
        &mut self,
        output: usize,
        first: usize,
        into: StateBuf<'_>,
    ) -> PluginResult<()> {
        let id = *self.graph.outputs.get(output).ok_or_else(|| {
            PluginError::not_found(format!(
                "output {output} does not exist: the graph has {} outputs",
                self.graph.outputs.len()
            ))
        })?;
        let (dtype, _) = self.declared_layout(id);
        if into.dtype != dtype {
            return Err(PluginError::invalid_argument(format!(
                "output {output} is {dtype}; the buffer lent to read it is {}",
                into.dtype
            )));
        }
        let a = self.states.last.get(output).ok_or_else(|| {
            PluginError::invalid_argument("no run has completed yet: there is no output to read")
        })?;
        let _on = on_device(&self.device)?;
        read_range(a, first, into.bytes).map_err(|e| e.context(format!("reading output {output}")))
    }
}
