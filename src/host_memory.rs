//! Host memory that a foreign runtime may write where it is: a Native tensor's memory once it
//! is exported to NumPy (`Tensor::export_host`, the Python `np.asarray(t)`), which NumPy and
//! boxfall then both write in place.
//!
//! The memory is an `ndarray::ArrayD<T>` that several handles share through an `Arc` (the
//! tensor, its CPU loan, the NumPy arrays' owner), so no `&mut` to it can exist. Writes go
//! through the array's raw pointer instead, which carries the allocation's own (writable)
//! provenance: an `ArrayD` keeps its elements behind a `NonNull` it got from the `Vec` it was
//! built from, so a `&ArrayD` freezes the array's header (pointer, shape, strides), not its
//! elements, and writing the elements through that pointer while handles to the header exist
//! is allowed as long as no `&T` to an element is alive at the same time. Within one thread
//! that holds: boxfall makes element references only inside a kernel or a copy, which never
//! runs while NumPy writes, and NumPy writes while boxfall holds none. Across threads, a
//! NumPy write racing a boxfall read or write of the same tensor is a data race on the
//! elements' values, the user's as it is in NumPy (two threads writing one array), and
//! boxfall uses no element value as an index or a length, so such a race gives wrong values,
//! never an access outside the memory. The one type with values a byte can break is `bool`
//! (NumPy writes any byte into it through a `uint8` view): [`normalize_bools`] puts such bytes
//! back to `1` before boxfall reads them.

use ndarray::{ArrayD, ArrayViewMutD};

/// Writes `src`'s values into `dst`'s elements where they are (not into a new allocation), for
/// memory that other handles share and NumPy may hold. False (nothing written) where the
/// shapes differ or `dst` is not in C order (exported memory always is).
///
/// `dst` and `src` are two arrays, each owning its allocation, so they do not overlap; the
/// same array (`dst` is `src`) is left as it is.
pub(crate) fn write_into<T: Clone>(dst: &ArrayD<T>, src: &ArrayD<T>) -> bool {
    if dst.shape() != src.shape() || !dst.is_standard_layout() {
        return false;
    }
    if std::ptr::eq(dst, src) {
        return true;
    }
    let ptr = dst.as_ptr().cast_mut();
    // SAFETY: `ptr` is `dst`'s first element, with the provenance of `dst`'s own allocation
    // (the `NonNull` the array keeps, not a pointer made from a reference), valid for writes
    // of `dst.len()` elements laid out in C order (checked above), which is what a view of
    // `dst`'s shape with default strides covers; it is aligned for `T`. No reference to these
    // elements is alive meanwhile in this thread (see the module's documentation; `src` owns
    // another allocation, so reading it makes no reference into `dst`), and the view is
    // dropped before this function returns. A racing write from another thread is the user's
    // data race, as it is in NumPy (the module's documentation).
    let mut view = unsafe { ArrayViewMutD::from_shape_ptr(dst.raw_dim(), ptr) };
    view.assign(src);
    true
}

/// Puts every byte of `a` that is neither 0 nor 1 back to 1 (true, as NumPy reads it): a bool
/// array NumPy wrote through a `uint8` view may hold any byte, and a Rust `bool` must be one
/// of those two. Read and written as bytes through the raw pointer, so no invalid `bool` is
/// ever made. Nothing is done to an array not in C order (exported memory always is).
pub(crate) fn normalize_bools(a: &ArrayD<bool>) {
    if !a.is_standard_layout() {
        return;
    }
    let ptr = a.as_ptr().cast_mut().cast::<u8>();
    for i in 0..a.len() {
        // SAFETY: `ptr` is `a`'s first element, with its allocation's provenance (see
        // `write_into`); `a` holds `a.len()` one-byte elements in C order (checked above), so
        // `ptr.add(i)` is in bounds; a byte may hold any value, so reading one as `u8` is
        // defined whatever NumPy wrote. No reference to the element is alive (the module's
        // documentation).
        unsafe {
            let p = ptr.add(i);
            if p.read() > 1 {
                p.write(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_shared_array_is_written_where_it_is() {
        let shared = Arc::new(ndarray::ArrayD::<f64>::zeros(vec![2, 2]));
        let other = Arc::clone(&shared);
        let src = ndarray::arr2(&[[1.0, 2.0], [3.0, 4.0]]).into_dyn();
        assert!(write_into(&shared, &src));
        assert_eq!(other.as_ptr(), shared.as_ptr());
        assert_eq!(
            other.iter().copied().collect::<Vec<_>>(),
            [1.0, 2.0, 3.0, 4.0]
        );
        // Another order of the source is read in its logical order.
        assert!(write_into(&shared, &src.t().to_owned()));
        assert_eq!(
            other.iter().copied().collect::<Vec<_>>(),
            [1.0, 3.0, 2.0, 4.0]
        );
        // Another shape is refused, and nothing is written.
        assert!(!write_into(
            &shared,
            &ndarray::ArrayD::<f64>::zeros(vec![4])
        ));
        assert_eq!(
            other.iter().copied().collect::<Vec<_>>(),
            [1.0, 3.0, 2.0, 4.0]
        );
        assert!(write_into(&shared, &shared));
    }

    #[test]
    fn a_destination_not_in_c_order_is_refused() {
        let t = ndarray::arr2(&[[1, 2], [3, 4]]).reversed_axes().into_dyn();
        assert!(!write_into(&t, &ndarray::ArrayD::<i32>::zeros(vec![2, 2])));
        assert_eq!(t.iter().copied().collect::<Vec<_>>(), [1, 3, 2, 4]);
    }

    #[test]
    fn bytes_other_than_0_and_1_in_a_bool_array_become_true() {
        let a = ndarray::ArrayD::from_elem(vec![4], false);
        let bytes = a.as_ptr().cast_mut().cast::<u8>();
        // What NumPy's `a.view(np.uint8)[...] = (0, 1, 2, 255)` does.
        for (i, b) in [0u8, 1, 2, 255].into_iter().enumerate() {
            // SAFETY: in bounds of `a`'s four bytes, written as bytes; no `bool` of `a` is read
            // before `normalize_bools` has put them right.
            unsafe { bytes.add(i).write(b) };
        }
        normalize_bools(&a);
        assert_eq!(
            a.iter().copied().collect::<Vec<_>>(),
            [false, true, true, true]
        );
    }
}
