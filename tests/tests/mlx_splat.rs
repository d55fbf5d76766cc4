//! GaussianSplatRender and GaussianSplatRenderBackward on the MLX plugin,
//! every mode.
//!
//! rlx-cpu computes these only when an outside renderer registers itself,
//! so there is no CPU result to compare with. The reference is written
//! here, in f64, from the definition in docs/SPLAT.md, and it is written
//! differently from the plugin's: explicit 3×3 covariance products, tiles
//! found by interval overlap, and per-pixel lists built by brute force. It
//! is checked first against scenes computed by hand (one splat, two
//! splats in depth order, the step and transmittance limits). The
//! backward's reference is central finite differences (h = 1e-6) of the
//! reference's loss Σ clip(dL)·rgb; scenes keep every splat clear of the
//! cut-offs, where the render is not differentiable.
//!
//! Tolerances: the render 2e-6 abs + 1e-5 rel (the plugin works in f64 and
//! rounds to f32); gradients 1e-4 abs + 1e-4 rel against the differences.

// The reference is written with explicit indices, like the formulas.
#![allow(clippy::needless_range_loop)]

use rlx_ir::ops::splat::{
    GaussianSplatBackwardParams, GaussianSplatInputs, GaussianSplatRenderParams,
};
use rlx_ir::{DType, Graph, Shape};
use rlx_plugin_api::Mode;
use rlx_plugin_tests::parity::{
    assert_close, check_against_every_mode, random_values, run_mlx, Feed, Tol,
};

const IMG: Tol = Tol {
    abs: 2e-6,
    rel: 1e-5,
};
const GRAD: Tol = Tol {
    abs: 1e-4,
    rel: 1e-4,
};

// ── the reference ──────────────────────────────────────────────────────

type M3 = [[f64; 3]; 3];

fn mm(a: &M3, b: &M3) -> M3 {
    let mut o = [[0.0; 3]; 3];
    for i in 0..3 {
        for j in 0..3 {
            o[i][j] = (0..3).map(|k| a[i][k] * b[k][j]).sum();
        }
    }
    o
}

fn tr(a: &M3) -> M3 {
    let mut o = [[0.0; 3]; 3];
    for i in 0..3 {
        for j in 0..3 {
            o[i][j] = a[j][i];
        }
    }
    o
}

fn norm(v: [f64; 3]) -> [f64; 3] {
    let n = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    [v[0] / n, v[1] / n, v[2] / n]
}

fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

#[derive(Clone, Copy)]
struct St {
    w: u32,
    h: u32,
    tile: u32,
    radius_scale: f32,
    cutoff: f32,
    steps: u32,
    t_min: f32,
    max_list: u32,
}

impl St {
    fn params(&self) -> GaussianSplatRenderParams {
        GaussianSplatRenderParams {
            width: self.w,
            height: self.h,
            tile_size: self.tile,
            radius_scale: self.radius_scale,
            alpha_cutoff: self.cutoff,
            max_splat_steps: self.steps,
            transmittance_threshold: self.t_min,
            max_list_entries: self.max_list,
        }
    }
}

/// The backward's training settings.
#[derive(Clone, Copy)]
struct Train {
    clip: f32,
    sh_band: u32,
    max_anisotropy: f32,
}

/// A scene: the op's seven inputs as the plugin gets them (f32 values).
#[derive(Clone)]
struct Scene {
    n: usize,
    /// SH coefficients per splat.
    k: usize,
    pos: Vec<f32>,
    scale: Vec<f32>,
    rot: Vec<f32>,
    logit: Vec<f32>,
    color: Vec<f32>,
    sh: Vec<f32>,
    meta: Vec<f32>,
}

struct Proj {
    u: f64,
    v: f64,
    conic: [f64; 3],
    opacity: f64,
    color: [f64; 3],
    depth: f64,
    radius: f64,
}

/// The packed parameters in the backward's layout, as f64.
fn packed(s: &Scene) -> Vec<f64> {
    [&s.pos, &s.scale, &s.rot, &s.logit, &s.color, &s.sh]
        .iter()
        .flat_map(|v| v.iter().map(|x| *x as f64))
        .collect()
}

/// Splat `i` of the packed parameters `p`, projected; `sh_used` SH
/// coefficients, the anisotropy cap if any.
fn project_ref(
    s: &Scene,
    p: &[f64],
    i: usize,
    st: &St,
    sh_used: usize,
    aniso: Option<f64>,
) -> Option<Proj> {
    let n = s.n;
    let m: Vec<f64> = s.meta.iter().map(|x| *x as f64).collect();
    let eye = [m[0], m[1], m[2]];
    let f = norm([m[3] - eye[0], m[4] - eye[1], m[5] - eye[2]]);
    let r = norm(cross(f, [m[6], m[7], m[8]]));
    let up = cross(r, f);
    let focal = st.h as f64 / 2.0 / (m[9].to_radians() / 2.0).tan();
    let w: M3 = [r, up, f];
    let pos = [p[3 * i], p[3 * i + 1], p[3 * i + 2]];
    let d = [pos[0] - eye[0], pos[1] - eye[1], pos[2] - eye[2]];
    let t: Vec<f64> = w
        .iter()
        .map(|row| (0..3).map(|k| row[k] * d[k]).sum())
        .collect();
    if t[2] <= m[10] || t[2] >= m[11] {
        return None;
    }
    let mut ls = [p[3 * n + 3 * i], p[3 * n + 3 * i + 1], p[3 * n + 3 * i + 2]];
    if let Some(a) = aniso {
        let top = ls.iter().cloned().fold(f64::MIN, f64::max);
        for l in &mut ls {
            *l = l.max(top - a.ln());
        }
    }
    let q = &p[6 * n + 4 * i..][..4];
    let qn = (q.iter().map(|x| x * x).sum::<f64>()).sqrt();
    let (x, y, z, ww) = (q[0] / qn, q[1] / qn, q[2] / qn, q[3] / qn);
    let rot: M3 = [
        [
            1.0 - 2.0 * (y * y + z * z),
            2.0 * (x * y - ww * z),
            2.0 * (x * z + ww * y),
        ],
        [
            2.0 * (x * y + ww * z),
            1.0 - 2.0 * (x * x + z * z),
            2.0 * (y * z - ww * x),
        ],
        [
            2.0 * (x * z - ww * y),
            2.0 * (y * z + ww * x),
            1.0 - 2.0 * (x * x + y * y),
        ],
    ];
    let mut s2 = [[0.0; 3]; 3];
    for j in 0..3 {
        s2[j][j] = (2.0 * ls[j]).exp();
    }
    let sigma = mm(&mm(&rot, &s2), &tr(&rot));
    let sc = mm(&mm(&w, &sigma), &tr(&w));
    let j = [
        [focal / t[2], 0.0, -focal * t[0] / (t[2] * t[2])],
        [0.0, -focal / t[2], focal * t[1] / (t[2] * t[2])],
    ];
    let mut cov = [[0.0; 2]; 2];
    for a in 0..2 {
        for b in 0..2 {
            cov[a][b] = (0..3)
                .map(|k| (0..3).map(|l| j[a][k] * sc[k][l] * j[b][l]).sum::<f64>())
                .sum();
        }
    }
    cov[0][0] += 0.3;
    cov[1][1] += 0.3;
    let det = cov[0][0] * cov[1][1] - cov[0][1] * cov[1][0];
    let tr2 = (cov[0][0] + cov[1][1]) / 2.0;
    let lmax = tr2 + (tr2 * tr2 - det).max(0.1).sqrt();
    let dir = norm(d);
    let (dx, dy, dz) = (dir[0], dir[1], dir[2]);
    // Real SH, degree ≤ 3, in (l, m) order.
    let basis = [
        0.28209479177387814,
        -0.4886025119029199 * dy,
        0.4886025119029199 * dz,
        -0.4886025119029199 * dx,
        1.0925484305920792 * dx * dy,
        -1.0925484305920792 * dy * dz,
        0.31539156525252005 * (2.0 * dz * dz - dx * dx - dy * dy),
        -1.0925484305920792 * dx * dz,
        0.5462742152960396 * (dx * dx - dy * dy),
        -0.5900435899266435 * dy * (3.0 * dx * dx - dy * dy),
        2.890611442640554 * dx * dy * dz,
        -0.4570457994644658 * dy * (4.0 * dz * dz - dx * dx - dy * dy),
        0.3731763325901154 * dz * (2.0 * dz * dz - 3.0 * dx * dx - 3.0 * dy * dy),
        -0.4570457994644658 * dx * (4.0 * dz * dz - dx * dx - dy * dy),
        1.445305721320277 * dz * (dx * dx - dy * dy),
        -0.5900435899266435 * dx * (dx * dx - 3.0 * dy * dy),
    ];
    let shb = 14 * n;
    let color = [0, 1, 2].map(|c| {
        let sh: f64 = (0..sh_used)
            .map(|kk| basis[kk] * p[shb + (i * s.k + kk) * 3 + c])
            .sum();
        (p[11 * n + 3 * i + c] + sh).max(0.0)
    });
    Some(Proj {
        u: st.w as f64 / 2.0 + focal * t[0] / t[2],
        v: st.h as f64 / 2.0 - focal * t[1] / t[2],
        conic: [cov[1][1] / det, -cov[0][1] / det, cov[0][0] / det],
        opacity: 1.0 / (1.0 + (-p[10 * n + i]).exp()),
        color,
        depth: t[2],
        radius: 3.0 * st.radius_scale as f64 * lmax.sqrt(),
    })
}

/// The framebuffer of parameters `p` (rgba per pixel, row-major).
fn render_ref(s: &Scene, p: &[f64], st: &St, sh_used: usize, aniso: Option<f64>) -> Vec<f64> {
    let projs: Vec<Option<Proj>> = (0..s.n)
        .map(|i| project_ref(s, p, i, st, sh_used, aniso))
        .collect();
    let ts = st.tile as f64;
    let tw = st.w.div_ceil(st.tile) as usize;
    let th = st.h.div_ceil(st.tile) as usize;
    // Every (tile, depth, splat) whose square meets the tile, by brute force.
    let mut entries = Vec::new();
    for ty in 0..th {
        for tx in 0..tw {
            for (i, pr) in projs.iter().enumerate() {
                let Some(pr) = pr else { continue };
                let xs =
                    pr.u + pr.radius >= tx as f64 * ts && pr.u - pr.radius < (tx + 1) as f64 * ts;
                let ys =
                    pr.v + pr.radius >= ty as f64 * ts && pr.v - pr.radius < (ty + 1) as f64 * ts;
                if xs && ys {
                    entries.push((ty * tw + tx, pr.depth, i));
                }
            }
        }
    }
    entries.sort_by(|a, b| (a.0, a.1, a.2).partial_cmp(&(b.0, b.1, b.2)).unwrap());
    entries.truncate(st.max_list as usize);
    let m = &s.meta;
    let bg = [m[12] as f64, m[13] as f64, m[14] as f64];
    let mut out = Vec::new();
    for y in 0..st.h as usize {
        for x in 0..st.w as usize {
            let tile = (y / st.tile as usize) * tw + x / st.tile as usize;
            let (mut t, mut rgb, mut steps) = (1.0f64, [0.0f64; 3], 0u32);
            for &(_, _, i) in entries.iter().filter(|e| e.0 == tile) {
                if steps == st.steps {
                    break;
                }
                let pr = projs[i].as_ref().unwrap();
                let (dx, dy) = (x as f64 + 0.5 - pr.u, y as f64 + 0.5 - pr.v);
                let [a, b, c] = pr.conic;
                let e = -(a * dx * dx + 2.0 * b * dx * dy + c * dy * dy) / 2.0;
                if e > 0.0 {
                    continue;
                }
                let alpha = (pr.opacity * e.exp()).min(0.99);
                if alpha < st.cutoff as f64 {
                    continue;
                }
                if t * (1.0 - alpha) < st.t_min as f64 {
                    break;
                }
                for ch in 0..3 {
                    rgb[ch] += pr.color[ch] * alpha * t;
                }
                t *= 1.0 - alpha;
                steps += 1;
            }
            out.extend([
                rgb[0] + t * bg[0],
                rgb[1] + t * bg[1],
                rgb[2] + t * bg[2],
                1.0 - t,
            ]);
        }
    }
    out
}

fn render_plain(s: &Scene, st: &St) -> Vec<f32> {
    render_ref(s, &packed(s), st, s.k, None)
        .into_iter()
        .map(|v| v as f32)
        .collect()
}

/// The backward by central differences of Σ clip(dL)·rgb.
fn grad_ref(s: &Scene, st: &St, tr: &Train, d_loss: &[f32]) -> Vec<f32> {
    let sh_used = s.k.min((tr.sh_band as usize + 1).pow(2));
    let aniso = (tr.max_anisotropy >= 1.0).then_some(tr.max_anisotropy as f64);
    let clip = tr.clip as f64;
    let loss = |p: &[f64]| -> f64 {
        render_ref(s, p, st, sh_used, aniso)
            .chunks(4)
            .zip(d_loss.chunks(4))
            .map(|(px, dl)| {
                (0..3)
                    .map(|c| {
                        px[c]
                            * if clip > 0.0 {
                                (dl[c] as f64).clamp(-clip, clip)
                            } else {
                                dl[c] as f64
                            }
                    })
                    .sum::<f64>()
            })
            .sum()
    };
    let mut p = packed(s);
    let h = 1e-6;
    let mut g: Vec<f32> = (0..p.len())
        .map(|j| {
            let x = p[j];
            p[j] = x + h;
            let up = loss(&p);
            p[j] = x - h;
            let down = loss(&p);
            p[j] = x;
            ((up - down) / (2.0 * h)) as f32
        })
        .collect();
    if s.k == 0 {
        g.extend(vec![0.0; 3 * s.n]);
    }
    g
}

// ── scenes and graphs ──────────────────────────────────────────────────

fn meta(
    eye: [f32; 3],
    target: [f32; 3],
    up: [f32; 3],
    fov: f32,
    bg: [f32; 3],
    st: &St,
) -> Vec<f32> {
    let mut m = vec![];
    m.extend(eye);
    m.extend(target);
    m.extend(up);
    m.extend([fov, 0.1, 100.0]);
    m.extend(bg);
    m.extend([
        st.w as f32,
        st.h as f32,
        st.tile as f32,
        st.radius_scale,
        st.cutoff,
        st.steps as f32,
        st.t_min,
        st.max_list as f32,
    ]);
    m
}

fn random_scene(n: usize, k: usize, st: &St, seed: u64) -> Scene {
    let rv = |len: usize, lo: f32, hi: f32, s: u64| {
        random_values(len, DType::F32, lo, hi, seed * 16 + s)
    };
    Scene {
        n,
        k,
        pos: rv(3 * n, -1.2, 1.2, 1),
        scale: rv(3 * n, -2.4, -1.0, 2),
        rot: rv(4 * n, -1.0, 1.0, 3),
        logit: rv(n, -1.0, 1.5, 4),
        color: rv(3 * n, 0.15, 0.9, 5),
        sh: rv(3 * n * k, -0.08, 0.08, 6),
        meta: meta(
            [0.3, 0.2, -4.0],
            [0.0, 0.0, 0.0],
            [0.05, 1.0, 0.0],
            50.0,
            [0.1, 0.2, 0.3],
            st,
        ),
    }
}

fn f32s(n: usize) -> Shape {
    Shape::new(&[n], DType::F32)
}

fn inputs(g: &mut Graph, s: &Scene) -> GaussianSplatInputs {
    GaussianSplatInputs {
        positions: g.input("positions", f32s(3 * s.n)),
        scales: g.input("scales", f32s(3 * s.n)),
        rotations: g.input("rotations", f32s(4 * s.n)),
        opacities: g.input("opacities", f32s(s.n)),
        colors: g.input("colors", f32s(3 * s.n)),
        sh_coeffs: g.input("sh", f32s(3 * s.n * s.k)),
        meta: g.input("meta", f32s(s.meta.len())),
    }
}

fn feeds(s: &Scene) -> Vec<Feed> {
    [
        ("positions", &s.pos),
        ("scales", &s.scale),
        ("rotations", &s.rot),
        ("opacities", &s.logit),
        ("colors", &s.color),
        ("sh", &s.sh),
        ("meta", &s.meta),
    ]
    .iter()
    .map(|(n, v)| Feed {
        name: n.to_string(),
        values: v.to_vec(),
    })
    .collect()
}

fn render_graph(s: &Scene, st: &St) -> Graph {
    let mut g = Graph::new("splat");
    let ins = inputs(&mut g, s);
    let out = g.gaussian_splat_render(ins, st.params());
    g.set_outputs(vec![out]);
    g
}

fn backward_graph(s: &Scene, st: &St, tr: &Train) -> Graph {
    let mut g = Graph::new("splat_backward");
    let ins = inputs(&mut g, s);
    let dl = g.input("d_loss", f32s((st.w * st.h * 4) as usize));
    let out = g.gaussian_splat_render_backward(
        ins,
        dl,
        GaussianSplatBackwardParams {
            render: st.params(),
            loss_grad_clip: tr.clip,
            sh_band: tr.sh_band,
            max_anisotropy: tr.max_anisotropy,
        },
    );
    g.set_outputs(vec![out]);
    g
}

const ST: St = St {
    w: 24,
    h: 20,
    tile: 8,
    radius_scale: 1.0,
    cutoff: 1.0 / 255.0,
    steps: 32,
    t_min: 0.01,
    max_list: 10_000,
};

/// One splat on the axis, 4 units in front of a camera with a 90° field
/// of view on 8×8 pixels (focal length 4 px).
fn one_splat(logit: f32) -> (Scene, St) {
    let st = St {
        w: 8,
        h: 8,
        tile: 4,
        ..ST
    };
    let s = Scene {
        n: 1,
        k: 1,
        pos: vec![0.0, 0.0, 0.0],
        scale: vec![0.0; 3],
        rot: vec![0.0, 0.0, 0.0, 1.0],
        logit: vec![logit],
        color: vec![1.0, 0.5, 0.25],
        sh: vec![0.0; 3],
        meta: meta(
            [0.0, 0.0, -4.0],
            [0.0; 3],
            [0.0, 1.0, 0.0],
            90.0,
            [0.0; 3],
            &st,
        ),
    };
    (s, st)
}

// ── the reference against hand computation ─────────────────────────────

#[test]
fn the_reference_matches_scenes_computed_by_hand() {
    // The splat's screen covariance is (4·1/4)² + 0.3 = 1.3 on each axis; the
    // pixel at (3.5, 3.5) is 0.5 from the centre (4, 4) in x and y:
    // alpha = sigmoid(0)·exp(-(0.25 + 0.25)/(2·1.3)).
    let (s, st) = one_splat(0.0);
    let img = render_plain(&s, &st);
    let alpha = 0.5 * (-0.5f64 / 2.6).exp();
    let px = &img[(3 * 8 + 3) * 4..][..4];
    for (got, want) in px.iter().zip([alpha, alpha * 0.5, alpha * 0.25, alpha]) {
        assert!((*got as f64 - want).abs() < 1e-7, "{px:?} vs alpha {alpha}");
    }
    // Pixel (0, 0): dx = dy = -3.5, exp(-24.5/2.6)/2 < 1/255: background.
    assert_eq!(&img[..4], &[0.0, 0.0, 0.0, 0.0]);

    // Two splats in line: the nearer composites first whatever the input
    // order, the background shows through both.
    let two = |swap: bool| {
        let (mut s, st) = one_splat(0.0);
        let (near, far) = ([0.0f32, 0.0, -1.0], [0.0f32, 0.0, 1.0]);
        let (a, b) = if swap { (far, near) } else { (near, far) };
        s.n = 2;
        s.pos = [a, b].concat();
        s.scale = vec![0.0; 6];
        s.rot = [[0.0, 0.0, 0.0, 1.0]; 2].concat();
        s.logit = vec![0.0, 0.0];
        s.color = if swap {
            vec![0.0, 0.0, 1.0, 1.0, 0.0, 0.0]
        } else {
            vec![1.0, 0.0, 0.0, 0.0, 0.0, 1.0]
        };
        s.sh = vec![0.0; 6];
        s.meta[12..15].copy_from_slice(&[0.0, 1.0, 0.0]);
        (s, st)
    };
    let (s, st) = two(false);
    let img = render_plain(&s, &st);
    // The near one at depth 3 has covariance (4/3)² + 0.3, the far at 5 (4/5)² + 0.3.
    let a1 = 0.5 * (-0.25 / (16.0 / 9.0 + 0.3f64)).exp();
    let a2 = 0.5 * (-0.25 / (16.0 / 25.0 + 0.3f64)).exp();
    let px = &img[(3 * 8 + 3) * 4..][..4];
    let want = [
        a1,
        (1.0 - a1) * (1.0 - a2),
        (1.0 - a1) * a2,
        1.0 - (1.0 - a1) * (1.0 - a2),
    ];
    for (got, w) in px.iter().zip(want) {
        assert!((*got as f64 - w).abs() < 1e-7, "{px:?} vs {want:?}");
    }
    let (s2, _) = two(true);
    assert_eq!(render_plain(&s2, &st), img, "depth order, not input order");

    // One step allowed: only the near splat.
    let img1 = render_plain(&s, &St { steps: 1, ..st });
    let px = &img1[(3 * 8 + 3) * 4..][..4];
    let want = [a1, 1.0 - a1, 0.0, a1];
    for (got, w) in px.iter().zip(want) {
        assert!((*got as f64 - w).abs() < 1e-7, "{px:?} vs {want:?}");
    }
    // A threshold above 1 - a1: the walk stops before the first splat.
    let img0 = render_plain(
        &s,
        &St {
            t_min: (1.0 - a1 as f32) + 0.01,
            ..st
        },
    );
    assert_eq!(&img0[(3 * 8 + 3) * 4..][..4], &[0.0, 1.0, 0.0, 0.0]);
}

#[test]
fn the_difference_gradient_matches_gradients_by_hand() {
    // One splat, background 0: rgb = alpha·colour at each pixel, so
    // dL/dcolour = Σ dL·alpha and dL/dlogit = Σ dL·colour·alpha·(1 - o).
    let (s, st) = one_splat(0.4);
    let img = render_ref(&s, &packed(&s), &st, 1, None);
    let d_loss: Vec<f32> = (0..st.w * st.h * 4)
        .map(|i| ((i % 7) as f32 - 3.0) / 4.0)
        .collect();
    let tr = Train {
        clip: 0.0,
        sh_band: 0,
        max_anisotropy: 0.0,
    };
    let g = grad_ref(&s, &st, &tr, &d_loss);
    let o = 1.0 / (1.0 + (-0.4f64).exp());
    let mut d_col = [0.0f64; 3];
    let mut d_logit = 0.0;
    for (px, dl) in img.chunks(4).zip(d_loss.chunks(4)) {
        for c in 0..3 {
            d_col[c] += dl[c] as f64 * px[3];
            d_logit += dl[c] as f64 * s.color[c] as f64 * px[3] * (1.0 - o);
        }
    }
    for c in 0..3 {
        assert!(
            (g[11 + c] as f64 - d_col[c]).abs() < 1e-6,
            "{} vs {}",
            g[11 + c],
            d_col[c]
        );
    }
    assert!(
        (g[10] as f64 - d_logit).abs() < 1e-6,
        "{} vs {d_logit}",
        g[10]
    );
    // The splat sits on the axis facing the camera: moving it sideways by
    // symmetry changes nothing to first order only when dL is symmetric,
    // which it is not here, so the gradient is not zero.
    assert!(g[0].abs() > 1e-3);
}

// ── the plugin ─────────────────────────────────────────────────────────

#[test]
fn render_matches_the_reference() {
    let settings = [
        ("defaults", ST),
        ("list cut", St { max_list: 25, ..ST }),
        ("two steps", St { steps: 2, ..ST }),
        (
            "early stop",
            St {
                t_min: 0.6,
                cutoff: 0.05,
                ..ST
            },
        ),
        (
            "wide tiles",
            St {
                tile: 16,
                radius_scale: 1.6,
                ..ST
            },
        ),
    ];
    for (what, st) in settings {
        for (k, seed) in [(1, 1), (4, 2), (9, 3), (16, 4)] {
            let s = random_scene(7, k, &st, seed);
            let want = render_plain(&s, &st);
            let lit = want.chunks(4).filter(|p| p[3] > 0.05).count();
            assert!(lit > 20, "{what}: the scene covers {lit} pixels");
            check_against_every_mode(
                &format!("GaussianSplatRender {what}, SH {k}"),
                &render_graph(&s, &st),
                &feeds(&s),
                &[want],
                IMG,
            );
        }
    }
}

#[test]
fn render_backward_matches_differences() {
    let cases = [
        (
            "plain",
            Train {
                clip: 0.0,
                sh_band: 3,
                max_anisotropy: 0.0,
            },
            4,
        ),
        (
            "clipped dL",
            Train {
                clip: 0.3,
                sh_band: 3,
                max_anisotropy: 0.0,
            },
            4,
        ),
        (
            "SH band 1 of 2",
            Train {
                clip: 1.0,
                sh_band: 1,
                max_anisotropy: 0.0,
            },
            9,
        ),
        (
            "anisotropy 2",
            Train {
                clip: 1.0,
                sh_band: 0,
                max_anisotropy: 2.0,
            },
            1,
        ),
    ];
    let st = St { w: 16, h: 12, ..ST };
    for (what, tr, k) in cases {
        let s = random_scene(5, k, &st, 7);
        let d_loss = random_values((st.w * st.h * 4) as usize, DType::F32, -1.0, 1.0, 99);
        let want = grad_ref(&s, &st, &tr, &d_loss);
        let mut f = feeds(&s);
        f.push(Feed {
            name: "d_loss".into(),
            values: d_loss.clone(),
        });
        check_against_every_mode(
            &format!("GaussianSplatRenderBackward {what}"),
            &backward_graph(&s, &st, &tr),
            &f,
            std::slice::from_ref(&want),
            GRAD,
        );
        if tr.sh_band == 1 {
            let n = s.n;
            for i in 0..n {
                let sh = &want[14 * n + i * 27..][..27];
                assert!(
                    sh[12..].iter().all(|v| *v == 0.0),
                    "degree 2 takes no gradient"
                );
                assert!(sh[..12].iter().any(|v| v.abs() > 1e-4));
            }
        }
    }
}

#[test]
fn bad_scenes_are_refused_with_the_reason() {
    let st = St { w: 8, h: 8, ..ST };
    let mut s = random_scene(3, 1, &st, 5);
    s.sh = vec![0.0; 3 * 3 * 2];
    s.k = 2;
    let e = run_mlx(&render_graph(&s, &st), &feeds(&s), Mode::Lazy).unwrap_err();
    assert!(e.to_string().contains("K in 0, 1, 4, 9, 16"), "{e}");
    let s = random_scene(3, 1, &st, 5);
    let mut bad = s.clone();
    let eye = bad.meta[0..3].to_vec();
    bad.meta[3..6].copy_from_slice(&eye);
    let e = run_mlx(&render_graph(&bad, &st), &feeds(&bad), Mode::Lazy).unwrap_err();
    assert!(e.to_string().contains("target is its position"), "{e}");
    let e = run_mlx(
        &render_graph(&s, &St { tile: 0, ..st }),
        &feeds(&s),
        Mode::Lazy,
    )
    .unwrap_err();
    assert!(e.to_string().contains("tile_size"), "{e}");
}

#[test]
fn splats_reach_the_plugin_through_session() {
    use rlx_host::run::{execute, ModelData};
    use rlx_plugin_host::backend::{register_plugin_backend, with_mode};
    use rlx_plugin_tests::parity::{mlx, MODES};
    use rlx_runtime::Device;
    register_plugin_backend(mlx(), Device::Mlx, Mode::Lazy);
    let s = random_scene(6, 4, &ST, 11);
    let data = ModelData {
        inputs: feeds(&s).into_iter().map(|f| (f.name, f.values)).collect(),
        params: vec![],
    };
    let want = render_plain(&s, &ST);
    for mode in MODES {
        let got = with_mode(mode, || {
            execute(Device::Mlx, &render_graph(&s, &ST), &data, 1)
        })
        .unwrap_or_else(|e| panic!("[{}] {e}", mode.name()));
        assert_close(
            &format!("splat via Session [{}]", mode.name()),
            &got.outputs[0],
            &want,
            IMG,
        );
    }
}
