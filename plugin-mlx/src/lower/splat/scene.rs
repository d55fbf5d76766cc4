//! The camera and the projection of one splat to the screen: everything of
//! the renderer that is smooth in the splat's parameters. The definition
//! is docs/SPLAT.md's; the comments give the step each line is.

use super::scalar::Scalar;

/// Screen-space quantities a render reads from one splat.
#[derive(Clone, Copy, Debug)]
pub struct Projected<T> {
    /// Pixel coordinates of the centre (x right, y down).
    pub u: T,
    pub v: T,
    /// The inverse 2-D covariance `[[a, b], [b, c]]`.
    pub conic: [T; 3],
    /// sigmoid(logit).
    pub opacity: T,
    /// max(0, colour + SH(direction)).
    pub color: [T; 3],
    /// Camera-space depth, the sort key.
    pub depth: f64,
    /// Half-width in pixels of the square the splat is binned by.
    pub radius: f64,
}

/// A look-at pinhole camera with square pixels.
#[derive(Clone, Copy, Debug)]
pub struct Camera {
    pub eye: [f64; 3],
    /// Rows of the view rotation: right, up, forward.
    pub rot: [[f64; 3]; 3],
    pub focal: f64,
    pub width: f64,
    pub height: f64,
    pub near: f64,
    pub far: f64,
    pub background: [f64; 3],
}

fn sub(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
}

fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

fn unit(a: [f64; 3]) -> Option<[f64; 3]> {
    let n = (a[0] * a[0] + a[1] * a[1] + a[2] * a[2]).sqrt();
    (n > 0.0 && n.is_finite()).then(|| [a[0] / n, a[1] / n, a[2] / n])
}

impl Camera {
    /// From the op's `meta` (its first 15 floats) and the framebuffer size.
    pub fn from_meta(meta: &[f64], width: u32, height: u32) -> Result<Camera, String> {
        if meta.len() < 15 {
            return Err(format!(
                "meta holds {} floats; the camera needs 15 (eye, target, up, fov_y, near, far, background)",
                meta.len()
            ));
        }
        let v3 = |i: usize| [meta[i], meta[i + 1], meta[i + 2]];
        let (eye, target, up) = (v3(0), v3(3), v3(6));
        let fwd = unit(sub(target, eye)).ok_or("the camera's target is its position")?;
        let right = unit(cross(fwd, up)).ok_or("the camera's up is parallel to its view")?;
        let true_up = cross(right, fwd);
        let fov = meta[9];
        if !(fov > 0.0 && fov < 180.0) {
            return Err(format!("fov_y must lie in (0, 180) degrees, got {fov}"));
        }
        let (near, far) = (meta[10], meta[11]);
        if !(near >= 0.0 && far > near) {
            return Err(format!(
                "near {near} and far {far}: 0 <= near < far is needed"
            ));
        }
        Ok(Camera {
            eye,
            rot: [right, true_up, fwd],
            focal: 0.5 * height as f64 / (0.5 * fov.to_radians()).tan(),
            width: width as f64,
            height: height as f64,
            near,
            far,
            background: v3(12),
        })
    }
}

/// One splat's parameters, as read (or seeded for differentiation).
pub struct Splat<T> {
    pub position: [T; 3],
    pub log_scale: [T; 3],
    /// x, y, z, w.
    pub rotation: [T; 4],
    pub logit: T,
    pub color: [T; 3],
    /// The SH coefficients used, `[k][channel]`.
    pub sh: Vec<[T; 3]>,
}

/// Real spherical harmonics up to degree 3 at unit direction `d`, in the
/// usual order (degree, then order -l..=l), with their normalisation.
pub fn sh_basis<T: Scalar>(d: [T; 3], k: usize) -> [T; 16] {
    let [x, y, z] = d;
    let c = T::c;
    let mut b = [c(0.0); 16];
    b[0] = c(0.282_094_791_773_878_14);
    if k > 1 {
        let c1 = 0.488_602_511_902_919_9;
        b[1] = c(-c1) * y;
        b[2] = c(c1) * z;
        b[3] = c(-c1) * x;
    }
    if k > 4 {
        let (xx, yy, zz) = (x * x, y * y, z * z);
        b[4] = c(1.092_548_430_592_079_2) * x * y;
        b[5] = c(-1.092_548_430_592_079_2) * y * z;
        b[6] = c(0.315_391_565_252_520_05) * (c(2.0) * zz - xx - yy);
        b[7] = c(-1.092_548_430_592_079_2) * x * z;
        b[8] = c(0.546_274_215_296_039_6) * (xx - yy);
        if k > 9 {
            b[9] = c(-0.590_043_589_926_643_5) * y * (c(3.0) * xx - yy);
            b[10] = c(2.890_611_442_640_554) * x * y * z;
            b[11] = c(-0.457_045_799_464_465_8) * y * (c(4.0) * zz - xx - yy);
            b[12] = c(0.373_176_332_590_115_4) * z * (c(2.0) * zz - c(3.0) * xx - c(3.0) * yy);
            b[13] = c(-0.457_045_799_464_465_8) * x * (c(4.0) * zz - xx - yy);
            b[14] = c(1.445_305_721_320_277) * z * (xx - yy);
            b[15] = c(-0.590_043_589_926_643_5) * x * (xx - c(3.0) * yy);
        }
    }
    b
}

/// Project one splat, or `None` when it is culled (outside near..far, or a
/// degenerate covariance). `max_anisotropy` (>= 1) caps the ratio of its
/// largest scale to each other scale by raising the smaller log-scales.
pub fn project<T: Scalar>(
    cam: &Camera,
    s: &Splat<T>,
    radius_scale: f64,
    max_anisotropy: Option<f64>,
) -> Option<Projected<T>> {
    let c = T::c;
    let dp = [0, 1, 2].map(|i| s.position[i] - c(cam.eye[i]));
    let view = cam
        .rot
        .map(|r| dp[0] * c(r[0]) + dp[1] * c(r[1]) + dp[2] * c(r[2]));
    let [x, y, z] = view;
    if !(z.v() > cam.near && z.v() < cam.far) {
        return None;
    }
    let f = cam.focal;
    let u = c(0.5 * cam.width) + c(f) * x / z;
    let v = c(0.5 * cam.height) - c(f) * y / z;

    // Σ = R S Sᵀ Rᵀ, S = diag(exp(log-scale)).
    let mut ls = s.log_scale;
    if let Some(a) = max_anisotropy {
        let top = ls[0].max(ls[1]).max(ls[2]);
        let floor = top - c(a.ln());
        ls = ls.map(|l| l.max(floor));
    }
    let sc = ls.map(|l| l.exp());
    let [qx, qy, qz, qw] = s.rotation;
    let n2 = qx * qx + qy * qy + qz * qz + qw * qw;
    let r: [[T; 3]; 3] = if n2.v() < 1e-24 {
        [
            [c(1.0), c(0.0), c(0.0)],
            [c(0.0), c(1.0), c(0.0)],
            [c(0.0), c(0.0), c(1.0)],
        ]
    } else {
        let n = n2.sqrt();
        let (x, y, z, w) = (qx / n, qy / n, qz / n, qw / n);
        let two = c(2.0);
        [
            [
                c(1.0) - two * (y * y + z * z),
                two * (x * y - w * z),
                two * (x * z + w * y),
            ],
            [
                two * (x * y + w * z),
                c(1.0) - two * (x * x + z * z),
                two * (y * z - w * x),
            ],
            [
                two * (x * z - w * y),
                two * (y * z + w * x),
                c(1.0) - two * (x * x + y * y),
            ],
        ]
    };
    // M = V R S (V: the view rotation), so the camera-space covariance is M Mᵀ.
    let mut m = [[c(0.0); 3]; 3];
    for (i, row) in m.iter_mut().enumerate() {
        for (j, e) in row.iter_mut().enumerate() {
            let vr = cam.rot[i];
            *e = (c(vr[0]) * r[0][j] + c(vr[1]) * r[1][j] + c(vr[2]) * r[2][j]) * sc[j];
        }
    }
    // J: the derivative of (u, v) with respect to the camera-space point.
    let j0 = [c(f) / z, c(0.0), -(c(f) * x / (z * z))];
    let j1 = [c(0.0), -(c(f) / z), c(f) * y / (z * z)];
    let jm = |jr: &[T; 3], k: usize| jr[0] * m[0][k] + jr[1] * m[1][k] + jr[2] * m[2][k];
    let a0 = [0, 1, 2].map(|k| jm(&j0, k));
    let a1 = [0, 1, 2].map(|k| jm(&j1, k));
    let dot = |p: &[T; 3], q: &[T; 3]| p[0] * q[0] + p[1] * q[1] + p[2] * q[2];
    // A 0.3 px² low-pass keeps every splat at least about a pixel wide.
    let ca = dot(&a0, &a0) + c(0.3);
    let cb = dot(&a0, &a1);
    let cc = dot(&a1, &a1) + c(0.3);
    let det = ca * cc - cb * cb;
    if det.v() <= 0.0 || !det.v().is_finite() {
        return None;
    }
    let mid = 0.5 * (ca.v() + cc.v());
    let lambda = mid + (mid * mid - det.v()).max(0.1).sqrt();
    let radius = 3.0 * radius_scale * lambda.sqrt();

    let opacity = c(1.0) / (c(1.0) + (-s.logit).exp());
    let dist = dot(&dp, &dp).sqrt();
    let dir = dp.map(|d| d / dist);
    let basis = sh_basis(dir, s.sh.len());
    let color = [0, 1, 2].map(|ch| {
        let mut acc = s.color[ch];
        for (k, coeff) in s.sh.iter().enumerate() {
            acc = acc + basis[k] * coeff[ch];
        }
        acc.max(c(0.0))
    });
    Some(Projected {
        u,
        v,
        conic: [cc / det, -(cb / det), ca / det],
        opacity,
        color,
        depth: z.v(),
        radius,
    })
}
