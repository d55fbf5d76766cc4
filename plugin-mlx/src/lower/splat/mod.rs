//! GaussianSplatRender and GaussianSplatRenderBackward (rlx-ir 0.2.19
//! `src/op.rs`): 3-D Gaussian splatting, projected, tile-binned and
//! composited front to back. rlx-ir names the inputs, the settings and the
//! packed gradient layout; the renderer itself is defined in docs/SPLAT.md
//! and implemented here. It runs as one node of the MLX graph on the CPU
//! stream (the plugin's kernel machinery, `host_kernel.rs`), in f64,
//! whatever the device the rest of the graph runs on.
//!
//! `scene` projects one splat (smooth in its parameters), `raster` bins and
//! composites (the discrete part) and differentiates the compositing; the
//! backward chains the compositing's gradient through each splat's exact
//! projection Jacobian (`scalar::Dual`).

mod raster;
mod scalar;
mod scene;

use super::{arity, Ctx, LResult, Lowering};
use crate::lower::host_kernel::{self, Call};
use raster::Settings;
use rlx_mlx_shim::Array;
use rlx_plugin_api::{CustomKernel, DType, PluginError, PluginResult, TensorView};
use scalar::{Dual, Scalar};
use scene::{project, Camera, Projected, Splat};
use std::sync::Arc;

/// Element counts of the seven scene inputs, checked at compile.
#[derive(Clone, Copy)]
struct Layout {
    count: usize,
    /// SH coefficients per splat (0, 1, 4, 9 or 16).
    sh: usize,
}

fn layout(cx: &Ctx, op: &str) -> LResult<Layout> {
    let n = |i: usize| cx.in_dims(i).iter().map(|d| *d as usize).product::<usize>();
    let pos = n(0);
    if pos % 3 != 0 {
        return Err(format!("{op}: positions hold {pos} values, not a multiple of 3").into());
    }
    let count = pos / 3;
    for (i, name, per) in [
        (1, "scales", 3),
        (2, "rotations", 4),
        (3, "opacities", 1),
        (4, "colors", 3),
    ] {
        if n(i) != count * per {
            return Err(format!(
                "{op}: {name} hold {} values; {count} splats need {}",
                n(i),
                count * per
            )
            .into());
        }
    }
    let sh_len = n(5);
    let sh = if count == 0 { 0 } else { sh_len / (3 * count) };
    if sh_len != sh * 3 * count || ![0, 1, 4, 9, 16].contains(&sh) {
        return Err(format!(
            "{op}: sh_coeffs hold {sh_len} values; {count} splats take 3·K each with K in 0, 1, 4, 9, 16 (SH degree up to 3)"
        )
        .into());
    }
    if n(6) < 15 {
        return Err(format!("{op}: meta holds {} values; at least 15 are needed", n(6)).into());
    }
    for i in 0..cx.node.inputs.len() {
        if cx.in_dtype(i) != rlx_ir::DType::F32 {
            return Err(format!("{op} takes f32 inputs; input {i} is {:?}", cx.in_dtype(i)).into());
        }
    }
    Ok(Layout { count, sh })
}

/// The backward's own settings: `loss_grad_clip`, `sh_band`, `max_anisotropy`.
type Training = (f64, u32, f64);

/// The eight render settings both ops carry, checked.
#[allow(clippy::too_many_arguments)]
fn render_settings(
    op: &str,
    width: u32,
    height: u32,
    tile_size: u32,
    radius_scale: f32,
    alpha_cutoff: f32,
    max_splat_steps: u32,
    transmittance_threshold: f32,
    max_list_entries: u32,
) -> LResult<Settings> {
    if tile_size == 0 {
        return Err(format!("{op}: tile_size must be at least 1").into());
    }
    for (name, v) in [
        ("radius_scale", radius_scale),
        ("alpha_cutoff", alpha_cutoff),
        ("transmittance_threshold", transmittance_threshold),
    ] {
        if !v.is_finite() {
            return Err(format!("{op}: {name} is {v}").into());
        }
    }
    Ok(Settings {
        width,
        height,
        tile_size,
        radius_scale: radius_scale as f64,
        alpha_cutoff: alpha_cutoff as f64,
        max_splat_steps,
        transmittance_threshold: transmittance_threshold as f64,
        max_list_entries,
    })
}

fn settings(cx: &Ctx, op: &str) -> LResult<(Settings, Option<Training>)> {
    match &cx.node.op {
        rlx_ir::Op::GaussianSplatRender {
            width,
            height,
            tile_size,
            radius_scale,
            alpha_cutoff,
            max_splat_steps,
            transmittance_threshold,
            max_list_entries,
        } => Ok((
            render_settings(
                op,
                *width,
                *height,
                *tile_size,
                *radius_scale,
                *alpha_cutoff,
                *max_splat_steps,
                *transmittance_threshold,
                *max_list_entries,
            )?,
            None,
        )),
        rlx_ir::Op::GaussianSplatRenderBackward {
            width,
            height,
            tile_size,
            radius_scale,
            alpha_cutoff,
            max_splat_steps,
            transmittance_threshold,
            max_list_entries,
            loss_grad_clip,
            sh_band,
            max_anisotropy,
        } => Ok((
            render_settings(
                op,
                *width,
                *height,
                *tile_size,
                *radius_scale,
                *alpha_cutoff,
                *max_splat_steps,
                *transmittance_threshold,
                *max_list_entries,
            )?,
            Some((*loss_grad_clip as f64, *sh_band, *max_anisotropy as f64)),
        )),
        _ => Err(super::wrong_op(op, cx)),
    }
}

fn values(t: &TensorView) -> Vec<f64> {
    rlx_plugin_api::convert::f32_from_le(t.data)
        .into_iter()
        .map(f64::from)
        .collect()
}

/// Every input as f64, in the op's order.
struct Scene {
    inputs: Vec<Vec<f64>>,
    layout: Layout,
}

impl Scene {
    fn read(views: &[TensorView], layout: Layout) -> PluginResult<Scene> {
        if views.iter().any(|v| v.dtype != DType::F32) {
            return Err(PluginError::internal("the splat kernel takes f32 buffers"));
        }
        Ok(Scene {
            inputs: views.iter().map(values).collect(),
            layout,
        })
    }

    fn camera(&self, st: &Settings) -> PluginResult<Camera> {
        Camera::from_meta(&self.inputs[6], st.width, st.height)
            .map_err(PluginError::invalid_argument)
    }

    /// Splat `i` in the number type `T`, `seed(value, parameter index)`
    /// making each parameter; the first `sh_used` SH coefficients are read.
    fn splat<T: Scalar>(
        &self,
        i: usize,
        sh_used: usize,
        seed: impl Fn(f64, usize) -> T,
    ) -> Splat<T> {
        let at = |k: usize, per: usize, j: usize| self.inputs[k][i * per + j];
        let sh = (0..sh_used)
            .map(|k| {
                let base = (i * self.layout.sh + k) * 3;
                [0, 1, 2].map(|ch| seed(self.inputs[5][base + ch], 14 + 3 * k + ch))
            })
            .collect();
        Splat {
            position: [0, 1, 2].map(|j| seed(at(0, 3, j), j)),
            log_scale: [0, 1, 2].map(|j| seed(at(1, 3, j), 3 + j)),
            rotation: [0, 1, 2, 3].map(|j| seed(at(2, 4, j), 6 + j)),
            logit: seed(at(3, 1, 0), 10),
            color: [0, 1, 2].map(|j| seed(at(4, 3, j), 11 + j)),
            sh,
        }
    }

    fn project_all(
        &self,
        st: &Settings,
        cam: &Camera,
        sh_used: usize,
        aniso: Option<f64>,
    ) -> Vec<Option<Projected<f64>>> {
        (0..self.layout.count)
            .map(|i| {
                project(
                    cam,
                    &self.splat(i, sh_used, |v, _| v),
                    st.radius_scale,
                    aniso,
                )
            })
            .collect()
    }
}

/// `max_anisotropy` as the projection applies it: a finite ratio >= 1, else off.
fn anisotropy(a: f64) -> Option<f64> {
    (a.is_finite() && a >= 1.0).then_some(a)
}

/// `loss_grad_clip` as applied to the incoming gradient: a finite bound > 0, else off.
fn clip(v: f64, bound: f64) -> f64 {
    if bound.is_finite() && bound > 0.0 {
        v.clamp(-bound, bound)
    } else {
        v
    }
}

fn write_f32(dst: &mut [u8], vals: impl Iterator<Item = f64>) {
    for (o, v) in dst.chunks_exact_mut(4).zip(vals) {
        o.copy_from_slice(&(v as f32).to_le_bytes());
    }
}

fn render_kernel(layout: Layout, st: Settings) -> CustomKernel {
    Arc::new(move |ins, outs, _| {
        let scene = Scene::read(ins, layout)?;
        let cam = scene.camera(&st)?;
        let splats = scene.project_all(&st, &cam, layout.sh, None);
        let image = raster::render(&splats, &cam, &st);
        write_f32(outs[0].data, image.into_iter());
        Ok(())
    })
}

fn backward_kernel(
    layout: Layout,
    st: Settings,
    (grad_clip, sh_band, aniso): (f64, u32, f64),
) -> CustomKernel {
    let sh_used = layout.sh.min((sh_band as usize + 1).pow(2));
    let aniso = anisotropy(aniso);
    Arc::new(move |ins, outs, _| {
        let scene = Scene::read(&ins[..7], layout)?;
        let cam = scene.camera(&st)?;
        let d_loss = values(&ins[7]);
        let d_rgb: Vec<f64> = d_loss
            .chunks_exact(4)
            .flat_map(|px| [0, 1, 2].map(|ch| clip(px[ch], grad_clip)))
            .collect();
        let splats = scene.project_all(&st, &cam, sh_used, aniso);
        let screen = raster::backward(&splats, &cam, &st, &d_rgb);
        let n = layout.count;
        let sh_slots = layout.sh.max(1);
        let mut packed = vec![0.0; n * 14 + n * sh_slots * 3];
        let offsets = [0, 3 * n, 6 * n, 10 * n, 11 * n, 14 * n];
        for (i, g) in screen.iter().enumerate() {
            if splats[i].is_none() || g.iter().all(|v| *v == 0.0) {
                continue;
            }
            let s = scene.splat(i, sh_used, Dual::var);
            let p = project(&cam, &s, st.radius_scale, aniso).expect("projected in the forward");
            let q = [
                p.u, p.v, p.conic[0], p.conic[1], p.conic[2], p.opacity, p.color[0], p.color[1],
                p.color[2],
            ];
            let partial = |k: usize| -> f64 { q.iter().zip(g).map(|(d, gk)| d.d[k] * gk).sum() };
            for j in 0..3 {
                packed[offsets[0] + 3 * i + j] = partial(j);
                packed[offsets[1] + 3 * i + j] = partial(3 + j);
                packed[offsets[4] + 3 * i + j] = partial(11 + j);
            }
            for j in 0..4 {
                packed[offsets[2] + 4 * i + j] = partial(6 + j);
            }
            packed[offsets[3] + i] = partial(10);
            for k in 0..sh_used * 3 {
                packed[offsets[5] + i * sh_slots * 3 + k] = partial(14 + k);
            }
        }
        write_f32(outs[0].data, packed.into_iter());
        Ok(())
    })
}

fn render(cx: &Ctx, a: &[&Array]) -> LResult {
    arity(a, 7, "GaussianSplatRender")?;
    let layout = layout(cx, "GaussianSplatRender")?;
    let (st, _) = settings(cx, "GaussianSplatRender")?;
    let k = render_kernel(layout, st);
    host_kernel::node(cx, a, Call::Into(k), &[], "GaussianSplatRender")
}

fn render_backward(cx: &Ctx, a: &[&Array]) -> LResult {
    const OP: &str = "GaussianSplatRenderBackward";
    arity(a, 8, OP)?;
    let layout = layout(cx, OP)?;
    let (st, extra) = settings(cx, OP)?;
    let pixels = st.width as usize * st.height as usize * 4;
    let got: usize = cx.in_dims(7).iter().map(|d| *d as usize).product();
    if got != pixels {
        return Err(format!(
            "{OP}: d_loss_rgba holds {got} values; the {}x{} framebuffer has {pixels}",
            st.width, st.height
        )
        .into());
    }
    let k = backward_kernel(layout, st, extra.expect("the backward's settings"));
    host_kernel::node(cx, a, Call::Into(k), &[], OP)
}

pub fn entries() -> Vec<Lowering> {
    vec![
        crate::row!(
            GaussianSplatRender,
            &[rlx_ir::DType::F32],
            HostEvaluated,
            "docs/SPLAT.md's renderer (look-at pinhole camera, EWA projection, SH up to degree 3, tile lists sorted by depth, front-to-back compositing) as one node on MLX's CPU stream, in f64",
            render
        ),
        crate::row!(
            GaussianSplatRenderBackward,
            &[rlx_ir::DType::F32],
            HostEvaluated,
            "the render's exact gradient: compositing differentiated back to front per pixel, chained through each splat's projection Jacobian (forward-mode duals); one node on MLX's CPU stream, in f64",
            render_backward
        ),
    ]
}
