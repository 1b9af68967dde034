"""``np.asarray(t)`` of a Native tensor is the tensor's own memory, writable: NumPy's writes are
the tensor's (every later boxfall read sees them: kernels, the fallback's loans, views,
``t.numpy()``), and boxfall's later writes are seen through the array (setitem, in-place
operators, out= through the fallback). A view's array is a NumPy view of its base's memory.
Memory another tensor shares is copied before it is exported, a read-only view gives a
read-only array, and data of another shape (an out= resized) replaces the memory, which the
old array then keeps alone."""

from __future__ import annotations

import threading

import boxfall as bf
import boxfall.array_api as xp
import numpy as np
import pytest

nx = xp.namespace("Native")


def test_numpys_writes_are_the_tensors():
    t = nx.asarray([1.0, 2.0, 3.0])
    a = np.asarray(t)
    assert isinstance(a, np.ndarray) and a.flags.writeable and a.flags.c_contiguous
    a[0] = 10.0
    assert float(t[0]) == 10.0  # a basic-index read
    assert t.numpy().tolist() == [10.0, 2.0, 3.0]
    assert (t + 1).numpy().tolist() == [11.0, 3.0, 4.0]  # Native's Rust kernel
    assert np.asarray(nx.sin(t)).tolist() == np.sin([10.0, 2.0, 3.0]).tolist()  # the fallback
    a[1] = -1.0  # written again after a loan was lent: the loan sees it too
    assert np.asarray(nx.sin(t)).tolist() == np.sin([10.0, -1.0, 3.0]).tolist()
    assert np.asarray(t) is not a and np.shares_memory(np.asarray(t), a)


def test_boxfalls_writes_are_seen_through_the_array():
    t = nx.zeros(3)
    a = np.asarray(t)
    t[0] = 5.0  # setitem, through the fallback's write-back
    assert a.tolist() == [5.0, 0.0, 0.0]
    t += 1.0  # an in-place operator
    assert a.tolist() == [6.0, 1.0, 1.0]
    np.add(t, 1.0, out=t)  # NumPy's ufunc with out=, run through the fallback
    assert a.tolist() == [7.0, 2.0, 2.0]
    t[1:] = nx.asarray([8.0, 9.0])  # a write through a view
    assert a.tolist() == [7.0, 8.0, 9.0]


def test_an_array_written_by_numpy_code_in_place_is_the_tensors():
    # What SciPy's ndimage does with an output= array: np.asarray(output), then C code writes it.
    from scipy import ndimage

    x = nx.asarray([1.0, 2.0, 3.0, 4.0])
    ndimage.correlate1d(np.asarray(x), [1.0, 1.0, 1.0], output=np.asarray(x))
    assert x.numpy().tolist() == [4.0, 6.0, 9.0, 11.0]


def test_a_views_array_is_a_numpy_view_of_its_bases_memory():
    t = nx.asarray(np.arange(12.0).reshape(3, 4))
    v = t[1, ::2]
    av = np.asarray(v)
    assert av.shape == (2,) and av.tolist() == [4.0, 6.0]
    assert np.shares_memory(av, np.asarray(t))
    av[1] = -6.0  # lands in the base
    assert float(t[1, 2]) == -6.0
    assert v.numpy().tolist() == [4.0, -6.0]
    t[1, 0] = 40.0  # the base's write is seen through the view's array
    assert av.tolist() == [40.0, -6.0]
    r = nx.reshape(t, (12,))
    assert np.asarray(r)[4] == 40.0
    tt = t.T
    assert np.asarray(tt).strides == np.asarray(t).T.strides and np.asarray(tt)[0, 1] == 40.0


def test_a_view_read_after_a_numpy_write_of_its_base_is_not_stale():
    t = nx.asarray([1.0, 2.0, 3.0])
    v = t[1:]
    assert v.numpy().tolist() == [2.0, 3.0]  # its values made once
    a = np.asarray(t)
    a[1:] = [20.0, 30.0]  # no boxfall write: the view cannot know but by reading again
    assert v.numpy().tolist() == [20.0, 30.0]
    assert float(v[0]) == 20.0 and (v * 2).numpy().tolist() == [40.0, 60.0]
    a[2] = 31.0
    assert float(nx.sum(v)) == 51.0


def test_memory_another_tensor_shares_is_copied_before_it_is_exported():
    lib = bf.Library("npmem_keep", "DEF")
    try:
        lib.define("keep(Tensor x) -> Tensor")
        kept: list[np.ndarray] = []

        def keep(x: np.ndarray) -> np.ndarray:
            kept.append(x)  # the loan's read-only array, kept past the call
            return x.copy()

        lib.impl("keep", keep, "CPU")
        t = nx.asarray([1.0, 2.0])
        bf.ops.npmem_keep.keep(t)
        a = np.asarray(t)
        a[0] = 9.0
        assert kept[0].tolist() == [1.0, 2.0]  # the array the kernel kept is not written
        assert t.numpy().tolist() == [9.0, 2.0]
    finally:
        lib.close()


def test_read_only_views_and_copies_asked_for():
    t = nx.asarray([1.0, 2.0])
    b = nx.broadcast_to(t, (2, 2))
    ab = np.asarray(b)
    assert not ab.flags.writeable and np.shares_memory(ab, np.asarray(t))
    with pytest.raises(ValueError):
        ab[0, 0] = 5.0
    c = t.__array__(copy=True)
    c[0] = 5.0
    assert float(t[0]) == 1.0 and not np.shares_memory(c, np.asarray(t))
    f = np.asarray(t, dtype=np.float32)
    assert f.dtype == np.float32 and not np.shares_memory(f, np.asarray(t))
    same = t.__array__(dtype=np.float64, copy=False)
    same[1] = 7.0
    assert float(t[1]) == 7.0
    assert not t.numpy().flags.writeable  # t.numpy() stays a read-only array of the memory
    assert t.numpy()[1] == 7.0


def test_an_out_resized_replaces_the_memory_and_the_old_array_keeps_it():
    lib = bf.Library("npmem_resize", "DEF")
    try:
        lib.define("m.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)")
        lib.impl("m.out", lambda x, *, out: x * 2, "CPU")
        out = nx.zeros(1)
        a = np.asarray(out)
        bf.ops.npmem_resize.m.out(nx.ones(3), out=out)
        assert out.shape == (3,) and out.numpy().tolist() == [2.0, 2.0, 2.0]
        assert a.tolist() == [0.0]  # no longer the tensor's memory
        a[0] = 5.0
        assert out.numpy().tolist() == [2.0, 2.0, 2.0]
        b = np.asarray(out)  # the new memory, exported again
        b[0] = 4.0
        assert float(out[0]) == 4.0
    finally:
        lib.close()


def test_a_failed_write_leaves_an_exported_tensor_as_it_was():
    # A setitem whose value does not fit fails before anything is written, all or none.
    t = nx.asarray([1.0, 2.0, 3.0])
    a = np.asarray(t)
    with pytest.raises(ValueError):
        t[0:2] = nx.asarray([1.0, 2.0, 3.0])
    assert a.tolist() == [1.0, 2.0, 3.0] and t.numpy().tolist() == [1.0, 2.0, 3.0]


def test_bool_bytes_numpy_writes_read_as_true():
    t = nx.asarray([True, False, False])
    a = np.asarray(t)
    a.view(np.uint8)[1] = 2  # a byte Rust's bool cannot hold, as NumPy reads it: True
    assert nx.logical_not(t).numpy().tolist() == [False, False, True]
    assert a.view(np.uint8).tolist() == [1, 1, 0]  # put right before boxfall read it


def test_in_place_writes_of_an_exported_tensor_from_threads_lose_no_update():
    x = nx.zeros(1000)
    a = np.asarray(x)
    start = threading.Barrier(4)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            start.wait()
            for _ in range(100):
                x.__iadd__(1.0)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    np.testing.assert_array_equal(a, np.full(1000, 400.0))  # written where the array sees it
    np.testing.assert_array_equal(x.numpy(), np.full(1000, 400.0))


@pytest.mark.parametrize("dtype", ["int8", "uint16", "int64", "float32", "complex128"])
def test_every_dtype_and_rank_shares_its_memory(dtype):
    t = nx.asarray(np.arange(6).astype(dtype).reshape(2, 3))
    a = np.asarray(t)
    assert a.dtype == np.dtype(dtype) and a.shape == (2, 3)
    a += 1  # NumPy's in-place ufunc, on the tensor's memory
    assert t.numpy().tolist() == (np.arange(6).astype(dtype).reshape(2, 3) + 1).tolist()
    z = nx.asarray(np.asarray(5, dtype=dtype))
    az = np.asarray(z)
    assert az.shape == ()
    az[()] = 7
    assert t.dtype == z.dtype and int(np.real(z.numpy())) == 7


def test_a_reversed_or_empty_views_array_stays_inside_its_base():
    t = nx.asarray(np.arange(6.0))
    r = np.asarray(t[::-2])
    assert r.tolist() == [5.0, 3.0, 1.0] and r.strides == (-16,)
    r[0] = 50.0
    assert float(t[5]) == 50.0
    assert np.asarray(t[3:3]).shape == (0,)
