//! Element arithmetic of Native's kernels, as NumPy does it: integers wrap on overflow (NumPy's
//! fixed-width integers do, and a Rust `+` would panic in a debug build), floats follow IEEE.

use ndarray::ArrayView1;

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
    /// The sum of a lane.
    fn sum(lane: ArrayView1<'_, Self>) -> Self;
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
            fn sum(lane: ArrayView1<'_, Self>) -> Self {
                // ndarray's sum: unrolled over contiguous memory, as NumPy's pairwise sum is.
                lane.sum()
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
            fn sum(lane: ArrayView1<'_, Self>) -> Self {
                lane.fold(0, |s, &v| s.wrapping_add(v))
            }
        }
    };
}
int!(i32);
int!(i64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_wrap_as_numpy_does() {
        assert_eq!(Elem::add(i64::MAX, 1), i64::MIN);
        assert_eq!(Elem::mul(i32::MAX, 2), -2);
        assert_eq!(Elem::sub(i64::MIN, 1), i64::MAX);
        assert_eq!(
            <i64 as Elem>::sum(ndarray::arr1(&[i64::MAX, 1]).view()),
            i64::MIN
        );
        assert_eq!(Elem::div(1i64, 0), 0);
    }
}
