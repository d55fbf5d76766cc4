//! The number type the per-splat projection is written over: `f64` for a
//! render, [`Dual`] for the backward, which needs the exact Jacobian of
//! each splat's screen-space quantities with respect to its parameters.
//! Forward-mode is the right shape for that: one splat has at most 62
//! parameters and nine outputs, and the projection is a few hundred
//! operations, so one pass per splat carries every partial at once.

use std::ops::{Add, Div, Mul, Neg, Sub};

/// Parameters of one splat: position 3, log-scale 3, rotation 4, opacity
/// logit 1, colour 3, and up to 16 SH coefficients × 3.
pub const MAX_PARAMS: usize = 14 + 16 * 3;

pub trait Scalar:
    Copy
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
{
    fn c(v: f64) -> Self;
    fn v(&self) -> f64;
    fn exp(self) -> Self;
    fn sqrt(self) -> Self;
    /// The larger, by value; the derivative follows the one chosen (ties:
    /// `self`).
    fn max(self, o: Self) -> Self {
        if o.v() > self.v() {
            o
        } else {
            self
        }
    }
}

impl Scalar for f64 {
    fn c(v: f64) -> Self {
        v
    }
    fn v(&self) -> f64 {
        *self
    }
    fn exp(self) -> Self {
        f64::exp(self)
    }
    fn sqrt(self) -> Self {
        f64::sqrt(self)
    }
}

/// A value and its partials with respect to one splat's parameters.
#[derive(Clone, Copy, Debug)]
pub struct Dual {
    pub v: f64,
    pub d: [f64; MAX_PARAMS],
}

impl Dual {
    /// Parameter `i` itself: value `v`, partial 1 with respect to itself.
    pub fn var(v: f64, i: usize) -> Dual {
        let mut d = Dual::c(v);
        d.d[i] = 1.0;
        d
    }
    fn map(self, v: f64, dv: f64) -> Dual {
        let mut o = self;
        o.v = v;
        o.d.iter_mut().for_each(|x| *x *= dv);
        o
    }
}

impl Add for Dual {
    type Output = Dual;
    fn add(mut self, o: Dual) -> Dual {
        self.v += o.v;
        self.d.iter_mut().zip(o.d).for_each(|(a, b)| *a += b);
        self
    }
}

impl Sub for Dual {
    type Output = Dual;
    fn sub(mut self, o: Dual) -> Dual {
        self.v -= o.v;
        self.d.iter_mut().zip(o.d).for_each(|(a, b)| *a -= b);
        self
    }
}

impl Mul for Dual {
    type Output = Dual;
    // The product rule: (uv)' = u'v + uv'.
    #[allow(clippy::suspicious_arithmetic_impl)]
    fn mul(mut self, o: Dual) -> Dual {
        self.d
            .iter_mut()
            .zip(o.d)
            .for_each(|(a, b)| *a = *a * o.v + self.v * b);
        self.v *= o.v;
        self
    }
}

impl Div for Dual {
    type Output = Dual;
    fn div(mut self, o: Dual) -> Dual {
        let inv = 1.0 / o.v;
        let q = self.v * inv;
        self.d
            .iter_mut()
            .zip(o.d)
            .for_each(|(a, b)| *a = (*a - q * b) * inv);
        self.v = q;
        self
    }
}

impl Neg for Dual {
    type Output = Dual;
    fn neg(self) -> Dual {
        self.map(-self.v, -1.0)
    }
}

impl Scalar for Dual {
    fn c(v: f64) -> Self {
        Dual {
            v,
            d: [0.0; MAX_PARAMS],
        }
    }
    fn v(&self) -> f64 {
        self.v
    }
    fn exp(self) -> Self {
        let e = self.v.exp();
        self.map(e, e)
    }
    fn sqrt(self) -> Self {
        let r = self.v.sqrt();
        self.map(r, 0.5 / r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// d/dx of x·exp(x)/sqrt(x + 1) - x at x = 0.7, against central differences.
    #[test]
    fn duals_carry_exact_partials() {
        fn f<T: Scalar>(x: T) -> T {
            x * x.exp() / (x + T::c(1.0)).sqrt() - x
        }
        let x = 0.7;
        let d = f(Dual::var(x, 3));
        let h = 1e-6;
        let fd = (f(x + h) - f(x - h)) / (2.0 * h);
        assert!((d.v - f(x)).abs() < 1e-15);
        assert!((d.d[3] - fd).abs() < 1e-8, "{} vs {fd}", d.d[3]);
        assert!(d.d.iter().enumerate().all(|(i, v)| i == 3 || *v == 0.0));
    }
}
