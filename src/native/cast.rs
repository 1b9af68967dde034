//! Element casts between the dtypes host memory holds, as NumPy casts them: integers and
//! floats as Rust's `as` (NumPy's C casts for every value the kernels cast: they only cast to a
//! type that holds the value, see `promote`), bools as 0 and 1, a real number as a complex one
//! with a zero imaginary part. Complex to real keeps the real part and anything to bool is
//! "non-zero"; the kernels never ask for either (NumPy warns or refuses), but every pair is
//! defined so one generic function serves every dtype.

use num_complex::Complex;

use super::alloc::try_map;
use crate::error::Result;
use crate::tensor::{DType, HostArray};

/// `self` as a `T`.
pub(super) trait Cast<T>: Copy {
    fn cast(self) -> T;
}

macro_rules! real_to {
    ($f:ty; $($t:ty),*) => {
        $(
            impl Cast<$t> for $f {
                #[inline(always)]
                fn cast(self) -> $t {
                    self as $t
                }
            }
        )*
        impl Cast<bool> for $f {
            #[inline(always)]
            fn cast(self) -> bool {
                self != (0 as $f)
            }
        }
        impl Cast<Complex<f32>> for $f {
            #[inline(always)]
            fn cast(self) -> Complex<f32> {
                Complex::new(self as f32, 0.0)
            }
        }
        impl Cast<Complex<f64>> for $f {
            #[inline(always)]
            fn cast(self) -> Complex<f64> {
                Complex::new(self as f64, 0.0)
            }
        }
    };
}

macro_rules! reals {
    ($($f:ty),*) => {
        $( real_to!($f; i8, i16, i32, i64, u8, u16, u32, u64, f32, f64); )*
    };
}
reals!(i8, i16, i32, i64, u8, u16, u32, u64, f32, f64);

macro_rules! bool_to {
    ($($t:ty),*) => {
        $(
            impl Cast<$t> for bool {
                #[inline(always)]
                fn cast(self) -> $t {
                    u8::from(self).cast()
                }
            }
        )*
    };
}
bool_to!(
    i8,
    i16,
    i32,
    i64,
    u8,
    u16,
    u32,
    u64,
    f32,
    f64,
    Complex<f32>,
    Complex<f64>
);

impl Cast<bool> for bool {
    #[inline(always)]
    fn cast(self) -> bool {
        self
    }
}

macro_rules! complex_to {
    ($f:ty; $($t:ty),*) => {
        $(
            impl Cast<$t> for Complex<$f> {
                #[inline(always)]
                fn cast(self) -> $t {
                    self.re as $t
                }
            }
        )*
        impl Cast<bool> for Complex<$f> {
            #[inline(always)]
            fn cast(self) -> bool {
                self.re != 0.0 || self.im != 0.0
            }
        }
        impl Cast<Complex<f32>> for Complex<$f> {
            #[inline(always)]
            fn cast(self) -> Complex<f32> {
                Complex::new(self.re as f32, self.im as f32)
            }
        }
        impl Cast<Complex<f64>> for Complex<$f> {
            #[inline(always)]
            fn cast(self) -> Complex<f64> {
                Complex::new(self.re as f64, self.im as f64)
            }
        }
    };
}
complex_to!(f32; i8, i16, i32, i64, u8, u16, u32, u64, f32, f64);
complex_to!(f64; i8, i16, i32, i64, u8, u16, u32, u64, f32, f64);

/// Every element type: castable from and to every other.
pub(super) trait AnyCast:
    Copy
    + Send
    + Sync
    + 'static
    + Cast<bool>
    + Cast<i8>
    + Cast<i16>
    + Cast<i32>
    + Cast<i64>
    + Cast<u8>
    + Cast<u16>
    + Cast<u32>
    + Cast<u64>
    + Cast<f32>
    + Cast<f64>
    + Cast<Complex<f32>>
    + Cast<Complex<f64>>
{
}

impl<T> AnyCast for T where
    T: Copy
        + Send
        + Sync
        + 'static
        + Cast<bool>
        + Cast<i8>
        + Cast<i16>
        + Cast<i32>
        + Cast<i64>
        + Cast<u8>
        + Cast<u16>
        + Cast<u32>
        + Cast<u64>
        + Cast<f32>
        + Cast<f64>
        + Cast<Complex<f32>>
        + Cast<Complex<f64>>
{
}

/// `h` as a new C-ordered array of `to` (see the module's note on which casts are NumPy's).
pub(super) fn cast_host(h: &HostArray, to: DType, what: &dyn Fn() -> String) -> Result<HostArray> {
    fn go<A: AnyCast>(
        a: &ndarray::ArrayD<A>,
        to: DType,
        what: &dyn Fn() -> String,
    ) -> Result<HostArray> {
        let v = a.view();
        Ok(match to {
            DType::Bool => HostArray::Bool(try_map(&v, what, Cast::<bool>::cast)?),
            DType::I8 => HostArray::I8(try_map(&v, what, Cast::<i8>::cast)?),
            DType::I16 => HostArray::I16(try_map(&v, what, Cast::<i16>::cast)?),
            DType::I32 => HostArray::I32(try_map(&v, what, Cast::<i32>::cast)?),
            DType::I64 => HostArray::I64(try_map(&v, what, Cast::<i64>::cast)?),
            DType::U8 => HostArray::U8(try_map(&v, what, Cast::<u8>::cast)?),
            DType::U16 => HostArray::U16(try_map(&v, what, Cast::<u16>::cast)?),
            DType::U32 => HostArray::U32(try_map(&v, what, Cast::<u32>::cast)?),
            DType::U64 => HostArray::U64(try_map(&v, what, Cast::<u64>::cast)?),
            DType::F32 => HostArray::F32(try_map(&v, what, Cast::<f32>::cast)?),
            DType::F64 => HostArray::F64(try_map(&v, what, Cast::<f64>::cast)?),
            DType::C64 => HostArray::C64(try_map(&v, what, Cast::<Complex<f32>>::cast)?),
            DType::C128 => HostArray::C128(try_map(&v, what, Cast::<Complex<f64>>::cast)?),
        })
    }
    crate::tensor::host_match!(h, a => go(a, to, what))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn casts_are_numpys_for_values_the_target_holds() {
        assert_eq!(Cast::<f64>::cast(true), 1.0);
        assert_eq!(Cast::<i64>::cast(-3i8), -3);
        assert_eq!(Cast::<f32>::cast(u16::MAX), 65535.0);
        assert_eq!(Cast::<Complex<f64>>::cast(2.5f32), Complex::new(2.5, 0.0));
        assert_eq!(
            Cast::<Complex<f64>>::cast(Complex::new(1.5f32, -2.0)),
            Complex::new(1.5, -2.0)
        );
        assert!(Cast::<bool>::cast(Complex::new(0.0f64, 1.0)));
    }

    #[test]
    fn an_array_casts_to_every_dtype() {
        let h = HostArray::from(ndarray::arr1(&[0u8, 1, 200]).into_dyn());
        for d in DType::ALL {
            let c = cast_host(&h, d, &|| "a cast".into()).unwrap();
            assert_eq!((c.dtype(), c.shape()), (d, &[3][..]));
        }
        let c = cast_host(&h, DType::I16, &|| "a cast".into()).unwrap();
        assert_eq!(
            c,
            HostArray::from(ndarray::arr1(&[0i16, 1, 200]).into_dyn())
        );
    }
}
