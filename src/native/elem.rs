//! Element arithmetic of Native's kernels, as NumPy does it: integers wrap on overflow (NumPy's
//! fixed-width integers do, and a Rust `+` would panic in a debug build), floats follow IEEE.

use ndarray::ArrayD;
use num_complex::Complex;

use super::cast::{AnyCast, Cast};
use crate::tensor::{DType, HostArray};

/// An element type Native's arithmetic kernels compute in.
pub(super) trait Elem: Copy + Send + Sync + PartialEq + 'static {
    const ZERO: Self;
    const ONE: Self;
    fn add(self, other: Self) -> Self;
    fn sub(self, other: Self) -> Self;
    fn mul(self, other: Self) -> Self;
    /// True division for floats. Integer division falls back to the CPU kernel (PyTorch's and
    /// NumPy's `/` of integers is a float), so the integers' `div` is never reached; it is
    /// total all the same (0 for a zero divisor) rather than a panic.
    fn div(self, other: Self) -> Self;
}

macro_rules! float {
    ($t:ty) => {
        impl Elem for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            fn add(self, o: Self) -> Self {
                self + o
            }
            fn sub(self, o: Self) -> Self {
                self - o
            }
            fn mul(self, o: Self) -> Self {
                self * o
            }
            fn div(self, o: Self) -> Self {
                self / o
            }
        }
    };
}
float!(f32);
float!(f64);

macro_rules! int {
    ($t:ty) => {
        impl Elem for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            fn sub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            fn div(self, o: Self) -> Self {
                self.checked_div(o).unwrap_or(0)
            }
        }
    };
}
int!(i8);
int!(i16);
int!(i32);
int!(i64);
int!(u8);
int!(u16);
int!(u32);
int!(u64);

/// NumPy's bool arithmetic: `+` is `or`, `*` is `and` (NumPy refuses `-` of bools, and `/` is a
/// float division: the kernels never call them on bools, and they are total all the same).
impl Elem for bool {
    const ZERO: Self = false;
    const ONE: Self = true;
    fn add(self, o: Self) -> Self {
        self | o
    }
    fn sub(self, o: Self) -> Self {
        self ^ o
    }
    fn mul(self, o: Self) -> Self {
        self & o
    }
    fn div(self, o: Self) -> Self {
        self & o
    }
}

macro_rules! complex {
    ($f:ty) => {
        impl Elem for Complex<$f> {
            const ZERO: Self = Complex::new(0.0, 0.0);
            const ONE: Self = Complex::new(1.0, 0.0);
            fn add(self, o: Self) -> Self {
                self + o
            }
            fn sub(self, o: Self) -> Self {
                self - o
            }
            fn mul(self, o: Self) -> Self {
                // NumPy's formula, as num-complex's.
                self * o
            }
            fn div(self, o: Self) -> Self {
                // NumPy's complex division (Smith's method, scaled by the larger part of the
                // divisor), not the textbook formula num-complex uses: the same values, and
                // no overflow for large divisors.
                let (ar, ai, br, bi) = (self.re, self.im, o.re, o.im);
                let (br_abs, bi_abs) = (br.abs(), bi.abs());
                if br_abs >= bi_abs {
                    if br_abs == 0.0 && bi_abs == 0.0 {
                        Complex::new(ar / br_abs, ai / br_abs)
                    } else {
                        let rat = bi / br;
                        let scl = 1.0 / (br + bi * rat);
                        Complex::new((ar + ai * rat) * scl, (ai - ar * rat) * scl)
                    }
                } else {
                    let rat = br / bi;
                    let scl = 1.0 / (bi + br * rat);
                    Complex::new((ar * rat + ai) * scl, (ai * rat - ar) * scl)
                }
            }
        }
    };
}
complex!(f32);
complex!(f64);

/// An element type of host memory: its array in and out of a `HostArray`, and the order the
/// comparison operators use (complex numbers have none in the standard: the kernels hand their
/// ordering comparisons on before reaching `less`).
pub(super) trait HostElem: Elem + AnyCast {
    /// The dtype.
    const DTYPE: DType;
    /// A Python scalar as this type (see `cast`).
    fn from_bool(b: bool) -> Self;
    /// See `from_bool`.
    fn from_i64(i: i64) -> Self;
    /// See `from_bool`.
    fn from_f64(f: f64) -> Self;
    /// The array, if `h` holds this element type.
    fn of(h: &HostArray) -> Option<&ArrayD<Self>>;
    /// The array as a `HostArray`.
    fn wrap(a: ArrayD<Self>) -> HostArray;
    /// `a < b`.
    fn less(a: Self, b: Self) -> bool;
    /// `a <= b`.
    fn less_equal(a: Self, b: Self) -> bool;
    /// NaN-propagating maximum and minimum (NumPy's `maximum`/`minimum`).
    fn max(a: Self, b: Self) -> Self;
    /// See `max`.
    fn min(a: Self, b: Self) -> Self;
}

macro_rules! host_elem {
    ($($t:ty => $v:ident),*) => {
        $(
            impl HostElem for $t {
                const DTYPE: DType = DType::$v;
                fn from_bool(b: bool) -> Self {
                    Cast::<$t>::cast(b)
                }
                fn from_i64(i: i64) -> Self {
                    Cast::<$t>::cast(i)
                }
                fn from_f64(f: f64) -> Self {
                    Cast::<$t>::cast(f)
                }
                #[inline(always)]
                fn of(h: &HostArray) -> Option<&ArrayD<Self>> {
                    match h {
                        HostArray::$v(a) => Some(a),
                        _ => None,
                    }
                }
                fn wrap(a: ArrayD<Self>) -> HostArray {
                    HostArray::$v(a)
                }
                #[inline(always)]
                fn less(a: Self, b: Self) -> bool {
                    a < b
                }
                #[inline(always)]
                fn less_equal(a: Self, b: Self) -> bool {
                    a <= b
                }
                #[inline(always)]
                #[allow(clippy::eq_op)]
                fn max(a: Self, b: Self) -> Self {
                    // `x != x`: NaN (never, for integers and bools).
                    if a != a || a >= b { a } else { b }
                }
                #[inline(always)]
                #[allow(clippy::eq_op)]
                fn min(a: Self, b: Self) -> Self {
                    if a != a || a <= b { a } else { b }
                }
            }
        )*
    };
}
host_elem!(
    bool => Bool, i8 => I8, i16 => I16, i32 => I32, i64 => I64, u8 => U8, u16 => U16,
    u32 => U32, u64 => U64, f32 => F32, f64 => F64
);

macro_rules! host_elem_complex {
    ($($t:ty => $v:ident),*) => {
        $(
            impl HostElem for $t {
                const DTYPE: DType = DType::$v;
                fn from_bool(b: bool) -> Self {
                    Cast::<$t>::cast(b)
                }
                fn from_i64(i: i64) -> Self {
                    Cast::<$t>::cast(i)
                }
                fn from_f64(f: f64) -> Self {
                    Cast::<$t>::cast(f)
                }
                #[inline(always)]
                fn of(h: &HostArray) -> Option<&ArrayD<Self>> {
                    match h {
                        HostArray::$v(a) => Some(a),
                        _ => None,
                    }
                }
                fn wrap(a: ArrayD<Self>) -> HostArray {
                    HostArray::$v(a)
                }
                // NumPy's lexicographic order; unused (see the trait).
                fn less(a: Self, b: Self) -> bool {
                    a.re < b.re || (a.re == b.re && a.im < b.im)
                }
                fn less_equal(a: Self, b: Self) -> bool {
                    a.re < b.re || (a.re == b.re && a.im <= b.im)
                }
                fn max(a: Self, b: Self) -> Self {
                    if Self::less(a, b) { b } else { a }
                }
                fn min(a: Self, b: Self) -> Self {
                    if Self::less(b, a) { b } else { a }
                }
            }
        )*
    };
}
host_elem_complex!(Complex<f32> => C64, Complex<f64> => C128);

/// `$body` with `$t` the element type of `dtype`.
macro_rules! with_elem {
    ($dtype:expr, $t:ident => $body:expr) => {{
        use num_complex::Complex;
        use $crate::tensor::DType;
        match $dtype {
            DType::Bool => {
                type $t = bool;
                $body
            }
            DType::I8 => {
                type $t = i8;
                $body
            }
            DType::I16 => {
                type $t = i16;
                $body
            }
            DType::I32 => {
                type $t = i32;
                $body
            }
            DType::I64 => {
                type $t = i64;
                $body
            }
            DType::U8 => {
                type $t = u8;
                $body
            }
            DType::U16 => {
                type $t = u16;
                $body
            }
            DType::U32 => {
                type $t = u32;
                $body
            }
            DType::U64 => {
                type $t = u64;
                $body
            }
            DType::F32 => {
                type $t = f32;
                $body
            }
            DType::F64 => {
                type $t = f64;
                $body
            }
            DType::C64 => {
                type $t = Complex<f32>;
                $body
            }
            DType::C128 => {
                type $t = Complex<f64>;
                $body
            }
        }
    }};
}
pub(super) use with_elem;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_wrap_as_numpy_does() {
        assert_eq!(Elem::add(i64::MAX, 1), i64::MIN);
        assert_eq!(Elem::mul(i32::MAX, 2), -2);
        assert_eq!(Elem::sub(i64::MIN, 1), i64::MAX);
        assert_eq!(Elem::div(1i64, 0), 0);
        assert_eq!(Elem::add(255u8, 1), 0);
        assert_eq!(Elem::sub(0u64, 1), u64::MAX);
        assert_eq!(Elem::mul(-128i8, -1), -128);
    }

    #[test]
    fn bools_add_as_or_and_multiply_as_and() {
        assert!(Elem::add(true, true));
        assert!(!Elem::mul(true, false));
    }

    #[test]
    fn complex_division_is_numpys() {
        let q = Elem::div(Complex::new(1.0f64, 2.0), Complex::new(3.0, -4.0));
        assert!((q - Complex::new(-0.2, 0.4)).norm() < 1e-15);
        // A huge divisor does not overflow (the textbook formula squares it).
        let big = Elem::div(Complex::new(1e300f64, 1e300), Complex::new(1e300, 1e300));
        assert_eq!(big, Complex::new(1.0, 0.0));
        let inf = Elem::div(Complex::new(1.0f32, 1.0), Complex::new(0.0, 0.0));
        assert!(inf.re.is_infinite() && inf.im.is_infinite());
    }
}
