//! Clones, shared params, param ranges and RNG changes: what
//! an executable shares with another, or changes without a recompile.

use super::state::{flat, idx};
use super::{
    compile_graph, layout_text, leaf_named, on_device, rng_options, InputSlots, MlxExecutable,
};
use rlx_mlx_shim::{array, ops};
use rlx_plugin_api::{CompileOptions, Executable, PluginError, PluginResult};
use std::sync::Arc;

impl MlxExecutable {
    /// A second executable of the same graph: the checked graph, its
    /// custom ops and the bound params are shared (arrays are immutable,
    /// so a param bound later on either replaces only its own), the state
    /// is copied the same way, and run buffers are its own. In compiled
    /// mode it calls the same `mx::compile` function (one program; calls
    /// take the function's lock, so clones may still run on several
    /// threads): MLX keeps a function's traces per thread, so a clone's
    /// first run on a thread that traced it replays the trace, where a
    /// function of its own would trace the graph again (a decode step
    /// compiled again every token would trace every token).
    pub(super) fn clone_exe(&self) -> PluginResult<MlxExecutable> {
        // It reads the list of params the shared function writes back.
        let compiled = self.compiled.clone();
        let compiled_writes = self.compiled_writes.clone();
        Ok(MlxExecutable {
            graph: self.graph.clone(),
            mode: self.mode,
            rng: self.rng,
            inputs: self.inputs.clone(),
            params: self.params.clone(),
            bound: self
                .bound
                .iter()
                .map(|(id, a)| (*id, a.clone_handle()))
                .collect(),
            kept_inputs: InputSlots::new(),
            compiled,
            plan: self.plan.clone(),
            args: array::new_array_list(),
            device: self.device.clone(),
            custom: self.custom.clone(),
            compiled_writes,
            states: self.states.cloned(),
            pending: Default::default(),
            extent: self.extent,
            // Narrowed again, with its own compiled function, at its first run.
            narrowed: Vec::new(),
            hoisting: self.hoisting.clone(),
            hoisted: self.hoisted.cloned(),
            // The kernels are the process's: built (or being built) once.
            warmup: self.warmup.as_ref().map(|w| w.share()),
        })
    }

    /// Take `src`'s param arrays for every param of this graph: all or
    /// nothing, each of the same dtype and shape.
    pub(super) fn share_from(&mut self, src: &dyn Executable) -> PluginResult<usize> {
        let src = MlxExecutable::of(src, "share_params")?;
        let mut taken = Vec::with_capacity(self.params.len());
        for (name, id) in &self.params {
            let sid = leaf_named(&src.params, name).ok_or_else(|| {
                PluginError::invalid_argument(format!("share_params: src has no param {name:?}"))
            })?;
            let (want, got) = (self.declared_layout(*id), src.declared_layout(sid));
            if want != got {
                return Err(PluginError::invalid_argument(format!(
                    "share_params: param {name:?} is {} here but {} in src",
                    layout_text(&want),
                    layout_text(&got)
                )));
            }
            let a = src.bound.get(&sid).ok_or_else(|| {
                PluginError::invalid_argument(format!(
                    "share_params: param {name:?} is not bound in src"
                ))
            })?;
            taken.push((*id, a.clone_handle()));
        }
        let n = taken.len();
        self.bound.extend(taken);
        // Values made once from the params (hoist.rs) come along when both
        // run one program (a clone of src's, or src a clone of ours): they
        // were made from the very arrays now bound here, which is what
        // `Hoisted::current` checks before using them.
        if let (Some(mine), Some(theirs)) = (&self.hoisting, &src.hoisting) {
            if Arc::ptr_eq(mine, theirs) {
                self.hoisted = src.hoisted.cloned();
            }
        }
        Ok(n)
    }

    /// Overwrite `data.len()` bytes of param `name` from `byte_offset`:
    /// whole elements inside the param, which must be bound.
    pub(super) fn bind_range(
        &mut self,
        name: &str,
        byte_offset: usize,
        data: &[u8],
    ) -> PluginResult<()> {
        let id = leaf_named(&self.params, name).ok_or_else(|| {
            PluginError::not_found(format!("the graph has no param named {name:?}"))
        })?;
        let old = self.bound.get(&id).ok_or_else(|| {
            PluginError::invalid_argument(format!(
                "param {name:?} is not bound: bind it whole before overwriting part of it"
            ))
        })?;
        let (dtype, _) = self.declared_layout(id);
        let item = dtype.size_bytes();
        let total = old.nbytes();
        if !byte_offset.is_multiple_of(item) || !data.len().is_multiple_of(item) {
            return Err(PluginError::invalid_argument(format!(
                "param {name:?} is {dtype}: bytes {byte_offset}..{} are not whole {item}-byte \
                 elements",
                byte_offset + data.len()
            )));
        }
        if byte_offset
            .checked_add(data.len())
            .is_none_or(|e| e > total)
        {
            return Err(PluginError::invalid_argument(format!(
                "param {name:?} has {total} bytes; bytes {byte_offset}..{} are past its end",
                byte_offset.saturating_add(data.len())
            )));
        }
        if data.is_empty() {
            return Ok(());
        }
        let _on = on_device(&self.device)?;
        let internal =
            |e: rlx_mlx_shim::ShimError| PluginError::internal(format!("param {name:?}: {e}"));
        let (first, n) = (byte_offset / item, data.len() / item);
        let piece = array::array_from_bytes(data, &[idx(n)?], old.dtype()).map_err(internal)?;
        let updated = ops::slice_update(
            &*flat(old)?,
            &piece,
            &[idx(first)?],
            &[idx(first + n)?],
            &[1],
        )
        .map_err(internal)?;
        let next = ops::reshape(&updated, &old.shape()).map_err(internal)?;
        next.eval().map_err(internal)?;
        self.bound.insert(id, next);
        Ok(())
    }

    /// Another RNG policy and seed for the graph's random ops; in compiled
    /// mode the function is traced again with them at the next run.
    pub(super) fn set_rng_policy(&mut self, policy: u32, seed: u64) -> PluginResult<()> {
        let rng = rng_options(&CompileOptions {
            rng_policy: policy,
            rng_seed: seed,
            ..CompileOptions::default()
        })?;
        if self.compiled.is_some() {
            // Its own function from now on (clones keep the one they share).
            self.compiled_writes = Arc::default();
            self.compiled = Some(Arc::new(compile_graph(
                self.graph.clone(),
                rng,
                self.custom.clone(),
                &self.inputs,
                &self.params,
                self.compiled_writes.clone(),
                self.hoisting.clone(),
            )?));
        }
        self.rng = rng;
        // A narrowed graph's compiled function was traced with the old one.
        self.narrowed.clear();
        Ok(())
    }
}
