//! [`PluginGraph`] as rlx-runtime's `ExecutableGraph`: each method a few lines
//! over the conversions (`graph.rs`), the handles and feeds (`handles.rs`), the
//! submitted runs (`submitted.rs`) and the plugin's clones and shared params. A
//! capability is reported exactly when the plugin offers what it needs
//! (`LoadedPlugin::offers`).

use super::graph::{ir_dtype, PluginGraph};
use super::outputs::fixed_numel;
use super::plugin_backend::rng_policy_number;
use rlx_plugin_api::{convert, DType, Feed, RowFeed, TensorRef};
use rlx_runtime::ExecutableGraph;
use smallvec::SmallVec;
use std::borrow::Cow;

impl PluginGraph {
    /// The f32 path of `run` and `run_read_outputs`: the outputs `want`ed,
    /// in f32; the others are not copied off the device.
    fn run_f32(
        &mut self,
        inputs: &[(&str, &[f32])],
        want: impl Fn(usize) -> bool,
    ) -> Vec<Option<Vec<f32>>> {
        let owned = inputs
            .iter()
            .map(|(n, v)| (*n, convert::f32_le_bytes(v), rlx_ir::DType::F32))
            .collect();
        // Off the CPU, an f32 output of fixed shape is written by the
        // plugin straight into the Vec handed on (on a GPU: its one copy
        // from device memory). Any other is converted from the plugin's
        // buffer, one copy as well (on the CPU the plugin lends MLX's
        // own). A big-endian host converts every output (its f32s are not
        // the ABI's little-endian bytes).
        let read = |t: &TensorRef<'_>| convert::bytes_to_f32(t.dtype, &t.compact_cow()?);
        let f32_le = cfg!(target_endian = "little");
        self.run_to(
            owned,
            want,
            |v| {
                (v.dtype == DType::F32 && f32_le)
                    .then(|| fixed_numel(v))
                    .flatten()
            },
            read,
            |_, v| v,
        )
    }

    /// `src` as a plugin executable of the same plugin, if it is one.
    fn same_plugin<'a>(&self, src: &'a dyn ExecutableGraph) -> Option<&'a PluginGraph> {
        src.executable_as_any()?.downcast_ref::<PluginGraph>()
    }
}

impl ExecutableGraph for PluginGraph {
    fn capabilities(&self) -> rlx_runtime::ExecutableCapabilities {
        let o = &self.offers;
        rlx_runtime::ExecutableCapabilities {
            clone: o.clone,
            persistent_handles: o.state,
            gpu_handles: o.state,
            kv_resident: o.state && o.row_feeds,
            typed_io: true,
            async_pipeline: o.submit,
            active_extent: o.active_extent,
            ..rlx_runtime::ExecutableCapabilities::NONE
        }
    }

    fn set_param(&mut self, name: &str, data: &[f32]) {
        // Lent as it is: the plugin makes the one copy it keeps.
        self.bind(name, convert::f32_le_bytes(data), rlx_ir::DType::F32);
    }

    fn set_param_typed(&mut self, name: &str, data: &[u8], dtype: rlx_ir::DType) {
        self.bind(name, Cow::Borrowed(data), dtype);
    }

    fn set_param_range(&mut self, name: &str, byte_offset: usize, data: &[u8]) -> bool {
        self.offers.param_range
            && self.params.contains_key(name)
            && self
                .exe
                .bind_param_range(name, byte_offset, data)
                .map_err(|e| log::warn!("{} plugin: param {name:?} range: {e}", self.plugin))
                .is_ok()
    }

    fn run(&mut self, inputs: &[(&str, &[f32])]) -> Vec<Vec<f32>> {
        self.run_f32(inputs, |_| true)
            .into_iter()
            .map(|o| o.expect("every output wanted"))
            .collect()
    }

    fn run_read_outputs(
        &mut self,
        inputs: &[(&str, &[f32])],
        read_indices: Option<&[usize]>,
    ) -> Vec<Vec<f32>> {
        let Some(ix) = read_indices else {
            return self.run(inputs);
        };
        // The outputs not asked for stay on the device (state feeds still
        // see every one).
        let mut outs = self.run_f32(inputs, |i| ix.contains(&i));
        ix.iter()
            .filter_map(|&i| outs.get_mut(i).and_then(|o| o.clone()))
            .collect()
    }

    fn run_typed(
        &mut self,
        inputs: &[(&str, &[u8], rlx_ir::DType)],
    ) -> Vec<(Vec<u8>, rlx_ir::DType)> {
        let borrowed = inputs
            .iter()
            .map(|(n, b, d)| (*n, Cow::Borrowed(*b), *d))
            .collect();
        let read = |t: &TensorRef<'_>| Ok((t.to_compact_bytes()?, ir_dtype(t.dtype)));
        let dtypes: SmallVec<[rlx_ir::DType; 4]> =
            self.outputs.iter().map(|v| ir_dtype(v.dtype)).collect();
        self.run_to(
            borrowed,
            |_| true,
            |v| fixed_numel(v)?.checked_mul(v.dtype.size_bytes()),
            read,
            |i, v| (v, dtypes[i]),
        )
        .into_iter()
        .map(|o| o.expect("every output wanted"))
        .collect()
    }

    fn clone_box(&self) -> Box<dyn ExecutableGraph> {
        Box::new(self.clone_graph().unwrap_or_else(|e| self.fail(e)))
    }

    fn bind_handle(&mut self, name: &str, data: &[f32]) -> bool {
        self.hold(name, data)
    }

    fn read_handle(&self, name: &str) -> Option<Vec<f32>> {
        self.read_held(name, 0, None)
    }

    fn bind_gpu_handle(&mut self, name: &str, data: &[f32]) -> bool {
        self.hold(name, data)
    }

    fn has_gpu_handle(&self, name: &str) -> bool {
        self.held.contains_key(name)
    }

    fn read_gpu_handle(&self, name: &str) -> Option<Vec<f32>> {
        self.read_held(name, 0, None)
    }

    fn read_gpu_handle_row(&self, name: &str, row: usize, row_inner: usize) -> Option<Vec<f32>> {
        self.read_held(name, row.checked_mul(row_inner)?, Some(row_inner))
    }

    fn set_gpu_handle_feed(&mut self, handle_name: &str, output_index: usize) -> bool {
        self.feed(handle_name, Feed::Replace(output_index))
    }

    fn register_kv_row_feed(&mut self, handle_name: &str, output_index: usize) -> bool {
        self.offers.row_feeds && self.feed(handle_name, Feed::Rows(output_index))
    }

    fn feed_kv_row(&mut self, src_row: usize, dst_row: usize, row_elems: usize) -> bool {
        self.feed_rows(RowFeed::rows(row_elems, src_row, dst_row, 1))
    }

    fn feed_kv_batch_major(
        &mut self,
        dst_row: usize,
        batch: usize,
        seq_cap: usize,
        row_elems: usize,
    ) -> bool {
        // new [B, 1, row] into past [B, seq_cap, row].
        self.feed_kv_batch_major_src(0, 1, dst_row, batch, seq_cap, row_elems)
    }

    fn feed_kv_batch_major_src(
        &mut self,
        src_row: usize,
        src_seq_cap: usize,
        dst_row: usize,
        batch: usize,
        dst_seq_cap: usize,
        row_elems: usize,
    ) -> bool {
        self.feed_rows(RowFeed {
            batch,
            src_batch_rows: src_seq_cap,
            dst_batch_rows: dst_seq_cap,
            ..RowFeed::rows(row_elems, src_row, dst_row, 1)
        })
    }

    fn feed_kv_batch_major_ragged(
        &mut self,
        src_row: usize,
        src_seq_cap: usize,
        dst_rows: &[usize],
        dst_seq_cap: usize,
        row_elems: usize,
    ) -> bool {
        self.feed_rows(RowFeed {
            batch: dst_rows.len(),
            src_batch_rows: src_seq_cap,
            dst_batch_rows: dst_seq_cap,
            dst_rows: Some(dst_rows.to_vec()),
            ..RowFeed::rows(row_elems, src_row, 0, 1)
        })
    }

    fn read_output_row(&self, out_idx: usize, row: usize, row_inner: usize) -> Option<Vec<f32>> {
        self.read_last_output(out_idx, row.checked_mul(row_inner)?, row_inner)
    }

    fn run_feed_gpu_handle(
        &mut self,
        inputs: &[(&str, &[f32])],
        handle_name: &str,
        output_index: usize,
    ) -> Option<Vec<f32>> {
        if !self.feed(handle_name, Feed::Replace(output_index)) {
            return None;
        }
        self.run_f32(inputs, |i| i == output_index)
            .into_iter()
            .nth(output_index)
            .flatten()
    }

    fn commit_no_wait(&mut self, inputs: &[(&str, &[f32])]) {
        if !self.offers.submit {
            let _ = self.run(inputs);
            return;
        }
        // rlx-runtime's contract: one commit in flight; its outputs are
        // not kept.
        self.drain();
        self.submit_f32(inputs);
    }

    fn sync_pending(&mut self) {
        if self.offers.submit {
            self.drain();
        }
    }

    fn run_pipelined(&mut self, input_sets: &[Vec<(&str, &[f32])>]) -> Vec<Vec<Vec<f32>>> {
        if !self.offers.submit {
            return input_sets.iter().map(|inputs| self.run(inputs)).collect();
        }
        self.drain();
        let mut outs = Vec::with_capacity(input_sets.len());
        // Two in flight: run n+1 is built and submitted (its inputs
        // converted and copied) before the host waits for run n.
        for (i, inputs) in input_sets.iter().enumerate() {
            self.submit_f32(inputs);
            if i > 0 {
                outs.push(self.wait_f32());
            }
        }
        if !input_sets.is_empty() {
            outs.push(self.wait_f32());
        }
        outs
    }

    fn set_active_extent(&mut self, extent: Option<(usize, usize)>) {
        if self.offers.active_extent {
            if let Err(e) = self.exe.set_active_extent(extent) {
                log::warn!("{} plugin: active extent {extent:?}: {e}", self.plugin);
            }
        }
    }

    fn set_rng(&mut self, rng: rlx_ir::RngOptions) {
        if !self.offers.set_rng {
            log::warn!(
                "{} plugin cannot change an executable's RNG (no ABI 1.9 set_rng); it keeps {:?}",
                self.plugin,
                self.rng
            );
            return;
        }
        match self.exe.set_rng(rng_policy_number(rng.backend), rng.seed) {
            Ok(()) => self.rng = rng,
            Err(e) => self.fail(e),
        }
    }

    fn rng(&self) -> rlx_ir::RngOptions {
        self.rng
    }

    fn copy_params_from(&mut self, src: &dyn ExecutableGraph) -> bool {
        // Params are immutable once bound, so sharing them is copying them:
        // a later bind on either replaces only its own.
        self.share_params_from(src)
    }

    fn share_params_from(&mut self, src: &dyn ExecutableGraph) -> bool {
        if !self.offers.share_params {
            return false;
        }
        let Some(src) = self.same_plugin(src) else {
            return false;
        };
        match self.exe.share_params_from(&src.exe) {
            Ok(_) => {
                self.shared_params = true;
                true
            }
            Err(e) => {
                log::debug!("{} plugin: params not shared: {e}", self.plugin);
                false
            }
        }
    }

    fn param_already_set(&self, name: &str) -> bool {
        self.shared_params && self.params.contains_key(name)
    }

    fn executable_as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn executable_as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }
}
