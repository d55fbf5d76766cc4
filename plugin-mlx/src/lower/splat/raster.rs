//! Tile binning and front-to-back compositing of projected splats, and the
//! compositing's backward: the discrete half of the renderer (docs/SPLAT.md).

use super::scene::{Camera, Projected};

/// The op's render settings.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    pub width: u32,
    pub height: u32,
    pub tile_size: u32,
    pub radius_scale: f64,
    pub alpha_cutoff: f64,
    pub max_splat_steps: u32,
    pub transmittance_threshold: f64,
    pub max_list_entries: u32,
}

/// Per tile, the splats it composites, nearest first.
pub struct Bins {
    tiles_x: usize,
    ranges: Vec<(usize, usize)>,
    list: Vec<usize>,
}

impl Bins {
    /// Every (tile, splat) pair whose square `[u ± r] × [v ± r]` meets the
    /// tile, sorted by tile, then depth, then index, and cut to the first
    /// `max_list_entries`.
    pub fn new(splats: &[Option<Projected<f64>>], st: &Settings) -> Bins {
        let ts = st.tile_size as f64;
        let tiles_x = st.width.div_ceil(st.tile_size) as usize;
        let tiles_y = st.height.div_ceil(st.tile_size) as usize;
        let span = |lo: f64, hi: f64, n: usize| -> Option<(usize, usize)> {
            let (a, b) = ((lo / ts).floor(), (hi / ts).floor());
            if !(b >= 0.0 && a < n as f64) {
                return None;
            }
            Some((a.max(0.0) as usize, (b as usize).min(n - 1)))
        };
        let mut keys: Vec<(usize, f64, usize)> = Vec::new();
        for (i, p) in splats.iter().enumerate() {
            let Some(p) = p else { continue };
            let Some((x0, x1)) = span(p.u - p.radius, p.u + p.radius, tiles_x) else {
                continue;
            };
            let Some((y0, y1)) = span(p.v - p.radius, p.v + p.radius, tiles_y) else {
                continue;
            };
            for ty in y0..=y1 {
                for tx in x0..=x1 {
                    keys.push((ty * tiles_x + tx, p.depth, i));
                }
            }
        }
        keys.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(a.2.cmp(&b.2)));
        keys.truncate(st.max_list_entries as usize);
        let mut ranges = vec![(0, 0); tiles_x * tiles_y];
        for (at, k) in keys.iter().enumerate() {
            let r = &mut ranges[k.0];
            if r.1 == 0 {
                r.0 = at;
            }
            r.1 += 1;
        }
        Bins {
            tiles_x,
            ranges,
            list: keys.into_iter().map(|k| k.2).collect(),
        }
    }

    fn for_pixel(&self, x: usize, y: usize, ts: usize) -> &[usize] {
        let (start, len) = self.ranges[(y / ts) * self.tiles_x + x / ts];
        &self.list[start..start + len]
    }
}

/// One splat composited at a pixel.
struct Hit {
    splat: usize,
    alpha: f64,
    /// Transmittance before it.
    t: f64,
    gauss: f64,
    clamped: bool,
    dx: f64,
    dy: f64,
}

/// Composite one pixel; returns the hits and the final transmittance.
fn walk(
    bins: &Bins,
    splats: &[Option<Projected<f64>>],
    st: &Settings,
    x: usize,
    y: usize,
    hits: &mut Vec<Hit>,
) -> f64 {
    hits.clear();
    let (px, py) = (x as f64 + 0.5, y as f64 + 0.5);
    let mut t = 1.0;
    for &i in bins.for_pixel(x, y, st.tile_size as usize) {
        if hits.len() >= st.max_splat_steps as usize {
            break;
        }
        let p = splats[i].as_ref().expect("binned splats are projected");
        let (dx, dy) = (px - p.u, py - p.v);
        let [a, b, c] = p.conic;
        let power = -0.5 * (a * dx * dx + c * dy * dy) - b * dx * dy;
        if power > 0.0 {
            continue;
        }
        let gauss = power.exp();
        let raw = p.opacity * gauss;
        let alpha = raw.min(0.99);
        if alpha < st.alpha_cutoff {
            continue;
        }
        if t * (1.0 - alpha) < st.transmittance_threshold {
            break;
        }
        hits.push(Hit {
            splat: i,
            alpha,
            t,
            gauss,
            clamped: raw > 0.99,
            dx,
            dy,
        });
        t *= 1.0 - alpha;
    }
    t
}

/// Rows are split into this many bands, each composited on its own
/// thread. The split does not depend on the machine, so neither does the
/// order in which the backward sums a splat's gradient: results are the
/// same bits everywhere.
const BANDS: usize = 8;

/// `f` over `BANDS` contiguous row ranges of `0..h`, in parallel, results
/// in row order.
fn in_bands<T: Send>(h: usize, f: impl Fn(std::ops::Range<usize>) -> T + Sync) -> Vec<T> {
    let per = h.div_ceil(BANDS).max(1);
    let f = &f;
    std::thread::scope(|sc| {
        let jobs: Vec<_> = (0..h.div_ceil(per))
            .map(|b| sc.spawn(move || f(b * per..((b + 1) * per).min(h))))
            .collect();
        jobs.into_iter()
            .map(|j| j.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// The framebuffer, `[height][width][rgba]`.
pub fn render(splats: &[Option<Projected<f64>>], cam: &Camera, st: &Settings) -> Vec<f64> {
    let bins = Bins::new(splats, st);
    let w = st.width as usize;
    in_bands(st.height as usize, |rows| {
        let mut out = Vec::with_capacity(rows.len() * w * 4);
        let mut hits = Vec::new();
        for y in rows {
            for x in 0..w {
                let t = walk(&bins, splats, st, x, y, &mut hits);
                let mut rgb = cam.background.map(|b| t * b);
                for hit in &hits {
                    let col = splats[hit.splat].as_ref().unwrap().color;
                    for (acc, c) in rgb.iter_mut().zip(col) {
                        *acc += c * hit.alpha * hit.t;
                    }
                }
                out.extend([rgb[0], rgb[1], rgb[2], 1.0 - t]);
            }
        }
        out
    })
    .concat()
}

/// The loss's gradient with respect to each splat's screen quantities:
/// `[u, v, conic a, b, c, opacity, r, g, b]`, given `d_rgb` per pixel
/// (`[height][width][3]`).
pub fn backward(
    splats: &[Option<Projected<f64>>],
    cam: &Camera,
    st: &Settings,
    d_rgb: &[f64],
) -> Vec<[f64; 9]> {
    let bins = Bins::new(splats, st);
    let w = st.width as usize;
    let bands = in_bands(st.height as usize, |rows| {
        let mut grads = vec![[0.0; 9]; splats.len()];
        let mut hits = Vec::new();
        for y in rows {
            for x in 0..w {
                let g = &d_rgb[(y * w + x) * 3..][..3];
                if g.iter().all(|v| *v == 0.0) {
                    continue;
                }
                let t_final = walk(&bins, splats, st, x, y, &mut hits);
                // `after`: g · (what is composited behind the current hit).
                let mut after: f64 = (0..3).map(|ch| g[ch] * t_final * cam.background[ch]).sum();
                for hit in hits.iter().rev() {
                    let p = splats[hit.splat].as_ref().unwrap();
                    let gs = &mut grads[hit.splat];
                    let weight = hit.alpha * hit.t;
                    let mut g_dot_c = 0.0;
                    for ch in 0..3 {
                        gs[6 + ch] += g[ch] * weight;
                        g_dot_c += g[ch] * p.color[ch];
                    }
                    let d_alpha = hit.t * g_dot_c - after / (1.0 - hit.alpha);
                    after += g_dot_c * weight;
                    if hit.clamped {
                        continue;
                    }
                    gs[5] += d_alpha * hit.gauss;
                    let d_power = d_alpha * hit.alpha;
                    let [a, b, c] = p.conic;
                    let (dx, dy) = (hit.dx, hit.dy);
                    gs[0] += d_power * (a * dx + b * dy);
                    gs[1] += d_power * (c * dy + b * dx);
                    gs[2] += d_power * (-0.5 * dx * dx);
                    gs[3] += d_power * (-dx * dy);
                    gs[4] += d_power * (-0.5 * dy * dy);
                }
            }
        }
        grads
    });
    let mut total = vec![[0.0; 9]; splats.len()];
    for band in bands {
        for (t, g) in total.iter_mut().zip(band) {
            t.iter_mut().zip(g).for_each(|(a, b)| *a += b);
        }
    }
    total
}
