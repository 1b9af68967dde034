"""Shape rules (``graph::rules``) against the eager CPU kernels: for each
call, the dtypes and shapes the rule gives without running anything equal those of the result
of running the operator; where the kernel refuses the arguments, or makes a dtype outside the
standard (NumPy's float16 of ``sin(int8)``), there is no rule (a graph break, never a wrong
meta). ``bf._boxfall._output_metas`` binds the arguments to the schema as a call does."""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import boxfall.array_api as xp  # noqa: F401  (defines the operators)
import numpy as np
import pytest
from boxfall import _boxfall
from boxfall.array_api._elementwise_functions import BINARY, IN_PLACE, UNARY
from boxfall.array_api._registry import operator
from hypothesis import given, settings
from hypothesis import strategies as st

DTYPES = [
    "bool",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float32",
    "float64",
    "complex64",
    "complex128",
]
OUTSIDE_THE_STANDARD = {"float16"}
SCALARS = [True, 0, 1, -1, 2, 127, 128, 255, 256, -129, 2**31, 2**63 - 1, -(2**63), 1.5, -0.0]

Metas = list[tuple[str, tuple[int, ...]]]


def eager(name: str, *args: Any, **kwargs: Any) -> Metas | None:
    """The dtypes and shapes of the operator's eager result; None where it raises."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            out = operator(name)(*args, **kwargs)
        except Exception:
            return None
    outs = out if isinstance(out, (list, tuple)) else [out]
    return [(np.asarray(o).dtype.name, tuple(np.shape(o))) for o in outs]


def rule(name: str, *args: Any, **kwargs: Any) -> Metas | None:
    """What the shape rule says for the same call."""
    got = _boxfall._output_metas(f"array_api::{name}", *args, **kwargs)
    return None if got is None else [(d, tuple(s)) for d, s in got]


def check(name: str, *args: Any, **kwargs: Any) -> Metas | None:
    """The rule's metas are the eager result's; no rule where the call raises or makes a dtype
    outside the standard. Returns the rule's answer."""
    got = rule(name, *args, **kwargs)  # first: an in-place kernel writes its argument
    want = eager(name, *args, **kwargs)
    if want is None or any(d in OUTSIDE_THE_STANDARD for d, _ in want):
        assert got is None, (name, args, kwargs, got, want)
    elif got is not None or not legacy_zero_d(args, kwargs):
        assert got == want, (name, args, kwargs, got, want)
    return got


def legacy_zero_d(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """A 0-d array given an axis: NumPy takes it as 1-d in some functions (``sum(x, axis=0)``,
    ``argmax``), not in others (``sort``, ``flip``); a rule may break the graph there."""
    x = args[0] if args else None
    return isinstance(x, np.ndarray) and x.ndim == 0 and kwargs.get("axis") is not None


def ones(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    return np.ones(shape, dtype=dtype)


# --- element-wise -----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_operators_on_every_dtype(name: str) -> None:
    for dtype, shape in itertools.product(DTYPES, [(), (3,), (2, 0)]):
        check(name, ones(shape, dtype))


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_operators_on_every_pair_of_dtypes(name: str) -> None:
    for a, b in itertools.product(DTYPES, DTYPES):
        check(name, ones((2, 1), a), ones((3,), b))
    for a in DTYPES:
        check(name, ones((2,), a), ones((3,), a))  # no broadcast: no rule
        check(name, ones((0, 1), a), ones((4,), "float32"))


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_operators_with_python_scalars(name: str) -> None:
    for dtype, s in itertools.product(DTYPES, SCALARS):
        x = ones((2, 3), dtype)
        check(f"{name}.Tensor_Scalar", x, s)
        check(f"{name}.Scalar_Tensor", s, x)


@pytest.mark.parametrize("name", IN_PLACE)
def test_in_place_operators_give_the_written_argument(name: str) -> None:
    for a, b in itertools.product(DTYPES, DTYPES):
        check(f"{name}_", ones((2, 3), a), ones((3,), b))
        check(f"{name}_", ones((3,), a), ones((2, 3), b))  # the result would not fit x1
    for dtype, s in itertools.product(DTYPES, SCALARS):
        check(f"{name}_.Scalar", ones((2, 3), dtype), s)


def test_clip_and_where() -> None:
    for a, b in itertools.product(DTYPES, DTYPES):
        x, bound = ones((2, 3), a), ones((3,), b)
        check("clip", x, bound, None)
        check("clip", x, None, ones((4, 1, 1), b))
        check("where", ones((2, 1), "bool"), x, bound)
        check("where", ones((5,), "bool"), x, bound)
    for dtype, s in itertools.product(DTYPES, SCALARS):
        x = ones((2, 3), dtype)
        check("clip.Scalar", x, s, None)
        check("clip.Scalar", x, None, s)
        check("where.Tensor_Scalar", ones((3,), "bool"), x, s)
        check("where.Scalar_Tensor", ones((3,), "bool"), s, x)


# --- reductions -------------------------------------------------------------------------

shapes = st.lists(st.integers(0, 3), min_size=0, max_size=3).map(tuple)
dtypes = st.sampled_from(DTYPES)


@st.composite
def axes(draw: st.DrawFn, ndim: int) -> Any:
    """None, an int, or a tuple of ints in (and sometimes out of) range, repeats possible."""
    choice = draw(st.integers(0, 2))
    if choice == 0:
        return None
    axis = st.integers(-ndim - 1, ndim)
    if choice == 1:
        return draw(axis)
    return tuple(draw(st.lists(axis, max_size=3)))


@settings(max_examples=150, deadline=None)
@given(shape=shapes, dtype=dtypes, data=st.data(), keepdims=st.booleans())
def test_reductions(
    shape: tuple[int, ...], dtype: str, data: st.DataObject, keepdims: bool
) -> None:
    x = ones(shape, dtype)
    axis = data.draw(axes(len(shape)))
    for name in ["sum", "prod", "mean", "max", "min", "all", "any", "count_nonzero"]:
        check(name, x, axis=axis, keepdims=keepdims)
    for name in ["std", "var"]:
        check(name, x, axis=axis, correction=data.draw(st.sampled_from([0, 1, 0.5])))
    asked = data.draw(st.sampled_from([None, *DTYPES]))
    for name in ["sum", "prod"]:
        check(name, x, axis=axis, dtype=asked, keepdims=keepdims)
    one = axis if axis is None or isinstance(axis, int) else None
    for name in ["argmax", "argmin"]:
        check(name, x, axis=one, keepdims=keepdims)
    for name in ["cumulative_sum", "cumulative_prod"]:
        check(name, x, axis=one, dtype=asked, include_initial=keepdims)
    if isinstance(axis, int):
        n = data.draw(st.integers(0, 4))
        check("diff", x, axis=axis, n=n)
        extra = data.draw(st.sampled_from([(), shape]))
        check("diff", x, axis=axis, n=n, prepend=ones(extra, data.draw(dtypes)))
        check("diff", x, axis=axis, n=n, append=ones(extra, dtype))


# --- manipulation -----------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(shape=shapes, dtype=dtypes, data=st.data())
def test_manipulation(shape: tuple[int, ...], dtype: str, data: st.DataObject) -> None:
    x = ones(shape, dtype)
    n = len(shape)
    axis = st.integers(-n - 2, n + 1)
    some_axes = st.lists(axis, max_size=3)
    check("expand_dims", x, data.draw(axis))
    check("squeeze", x, data.draw(some_axes))
    check("flip", x, axis=data.draw(st.one_of(st.none(), some_axes)))
    check(
        "roll",
        x,
        data.draw(st.lists(st.integers(-3, 3), min_size=1, max_size=2)),
        axis=data.draw(st.one_of(st.none(), some_axes)),
    )
    check("permute_dims", x, data.draw(st.permutations(range(n))))
    check("permute_dims", x, data.draw(some_axes))
    k = data.draw(st.integers(0, n))
    check(
        "moveaxis",
        x,
        data.draw(st.lists(axis, min_size=k, max_size=k)),
        data.draw(st.lists(axis, min_size=k, max_size=k)),
    )
    target = data.draw(st.lists(st.integers(-1, 4), max_size=4))
    check("reshape", x, target)
    check("reshape", x, list(shape[::-1]))
    check("reshape", x, [-1])
    check("broadcast_to", x, data.draw(st.lists(st.integers(0, 3), max_size=4)))
    check("broadcast_to", x, [2, *shape])
    check("tile", x, data.draw(st.lists(st.integers(0, 3), max_size=4)))
    check("repeat", x, data.draw(st.integers(0, 3)), axis=data.draw(st.one_of(st.none(), axis)))
    check("unstack", x, axis=data.draw(axis))
    check("matrix_transpose", x)
    check("tril", x, k=data.draw(st.integers(-2, 2)))
    check("triu", x, k=data.draw(st.integers(-2, 2)))
    check("fft_fftshift", x, axes=data.draw(st.one_of(st.none(), some_axes)))
    other = ones(
        data.draw(st.sampled_from([shape, shape[1:], (*shape[:-1], 2), (1,)])), data.draw(dtypes)
    )
    check("concat", [x, other], axis=data.draw(st.one_of(st.none(), axis)))
    check("stack", [x, other], axis=data.draw(axis))
    check("broadcast_arrays", [x, other])
    check("meshgrid", [x, other], indexing=data.draw(st.sampled_from(["xy", "ij"])))


# --- linear algebra ---------------------------------------------------------------------


def eyes(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """A stack of identities (the last two dimensions; ones where they are not square), so
    that every factorization succeeds."""
    x = np.zeros(shape, dtype=dtype)
    if len(shape) >= 2:
        k = min(shape[-2:])
        i = np.arange(k)
        x[..., i, i] = 1
    return x


@settings(max_examples=150, deadline=None)
@given(data=st.data(), dtype=dtypes)
def test_linear_algebra(data: st.DataObject, dtype: str) -> None:
    dims = st.lists(st.integers(0, 3), max_size=4).map(tuple)
    a_shape, b_shape = data.draw(dims), data.draw(dims)
    a, b = ones(a_shape, dtype), ones(b_shape, data.draw(dtypes))
    check("matmul", a, b)
    check("tensordot", a, b, axes=data.draw(st.integers(0, 3)))
    if a_shape and b_shape:
        pairs = st.integers(-4, 3)
        k = data.draw(st.integers(0, 2))
        axes_pair = [data.draw(st.lists(pairs, min_size=k, max_size=k)) for _ in range(2)]
        check("tensordot.axes", a, b, axes=axes_pair)
    check("vecdot", a, b, axis=data.draw(st.integers(-3, 2)))
    check("linalg_outer", a, b)
    check("linalg_cross", ones((*a_shape, 3), dtype), ones((3,), b.dtype.name), axis=-1)
    n = data.draw(st.integers(0, 3))
    batch = data.draw(st.lists(st.integers(0, 2), max_size=2).map(tuple))
    m = data.draw(st.sampled_from([n, n + 1]))
    sq = eyes((*batch, n, n), dtype)
    rect = eyes((*batch, n, m), dtype)
    for x in (sq, rect):
        for name in [
            "linalg_cholesky",
            "linalg_inv",
            "linalg_det",
            "linalg_slogdet",
            "linalg_eigh",
            "linalg_eigvalsh",
            "linalg_svdvals",
            "linalg_pinv",
        ]:
            check(name, x)
        check("linalg_svd", x, full_matrices=data.draw(st.booleans()))
        check("linalg_qr", x, mode=data.draw(st.sampled_from(["reduced", "complete"])))
        check("linalg_matrix_rank", x)
        rtol = data.draw(st.sampled_from([None, 0.5]))
        check("linalg_matrix_rank", x, rtol=rtol)
        check("linalg_pinv", x, rtol=rtol)
        rtols = np.full(data.draw(st.sampled_from([batch, (), (1,), (3,)])), 0.5)
        check("linalg_matrix_rank.Tensor", x, rtol=rtols)
        check("linalg_pinv.Tensor", x, rtol=rtols)
        check("linalg_matrix_power", x, data.draw(st.integers(-2, 3)))
        check("linalg_diagonal", x, offset=data.draw(st.integers(-4, 4)))
        check(
            "linalg_trace",
            x,
            offset=data.draw(st.integers(-2, 2)),
            dtype=data.draw(st.sampled_from([None, "float32", "int64"])),
        )
        keepdims = data.draw(st.booleans())
        check(
            "linalg_matrix_norm",
            x,
            keepdims=keepdims,
            ord=data.draw(st.sampled_from(["fro", "nuc", "bad"])),
        )
        check(
            "linalg_matrix_norm.Scalar",
            x,
            keepdims=keepdims,
            ord=data.draw(st.sampled_from([1, -1, 2, -2, float("inf"), -float("inf"), 3])),
        )
        check(
            "linalg_vector_norm",
            x,
            axis=data.draw(axes(x.ndim)),
            keepdims=keepdims,
            ord=data.draw(st.sampled_from([1, 2, 0, 3.5, float("inf"), -float("inf")])),
        )
        check("linalg_solve", sq, x)
        check("linalg_solve", sq, ones((n,), b.dtype.name))


# --- creation, sorting, indexing --------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(data=st.data(), shape=shapes, dtype=dtypes)
def test_creation(data: st.DataObject, shape: tuple[int, ...], dtype: str) -> None:
    asked = data.draw(st.sampled_from([None, dtype]))
    size = st.lists(st.integers(-1, 3), max_size=3)
    for name in ["zeros", "ones", "empty"]:
        check(name, data.draw(size), dtype=asked)
    fill = data.draw(st.sampled_from(SCALARS))
    check("full", list(shape), fill, dtype=asked)
    check("full", list(shape), ones(data.draw(shapes), dtype))
    x = ones(shape, dtype)
    for name in ["zeros_like", "ones_like", "empty_like"]:
        check(name, x, dtype=data.draw(st.sampled_from([None, *DTYPES])))
    check("full_like", x, fill, dtype=asked)
    check(
        "asarray",
        x,
        dtype=data.draw(st.sampled_from([None, *DTYPES])),
        copy=data.draw(st.sampled_from([None, True, False])),
    )
    check("asarray", fill, dtype=asked)
    check("astype", x, data.draw(st.sampled_from(DTYPES)))
    check(
        "eye",
        data.draw(st.integers(-1, 4)),
        data.draw(st.one_of(st.none(), st.integers(0, 4))),
        k=data.draw(st.integers(-5, 5)),
        dtype=asked,
    )
    num = st.one_of(
        st.integers(-20, 20), st.floats(-20, 20, allow_nan=False).map(lambda f: round(f, 2))
    )
    step = data.draw(num)
    check(
        "arange",
        data.draw(num),
        data.draw(st.one_of(st.none(), num)),
        step,
        dtype=data.draw(st.sampled_from([None, "int64", "float32", "float64", "int8"])),
    )
    check(
        "linspace",
        data.draw(num),
        data.draw(num),
        data.draw(st.integers(-1, 5)),
        dtype=asked,
        endpoint=data.draw(st.booleans()),
    )


@settings(max_examples=100, deadline=None)
@given(data=st.data(), shape=shapes, dtype=dtypes)
def test_sorting_searching_and_take(
    data: st.DataObject, shape: tuple[int, ...], dtype: str
) -> None:
    x = ones(shape, dtype)
    n = len(shape)
    axis = data.draw(st.integers(-n - 1, n))
    check("sort", x, axis=axis, descending=data.draw(st.booleans()))
    check("argsort", x, axis=axis, descending=data.draw(st.booleans()))
    sorted_1d = ones(data.draw(st.sampled_from([(4,), (0,), (2, 2)])), dtype)
    check("searchsorted", sorted_1d, x, side=data.draw(st.sampled_from(["left", "right", "mid"])))
    idx_dtype = data.draw(st.sampled_from(["int64", "int8", "uint8", "bool", "float32"]))
    idx = np.zeros(data.draw(shapes), dtype=idx_dtype)
    check("take", x, idx, axis=data.draw(st.one_of(st.none(), st.just(axis))))
    along = np.zeros(
        data.draw(st.sampled_from([shape, tuple(1 for _ in shape), shape[1:]])), dtype=idx_dtype
    )
    check("take_along_axis", x, along, axis=axis)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), shape=shapes, dtype=dtypes)
def test_fft(data: st.DataObject, shape: tuple[int, ...], dtype: str) -> None:
    x = ones(shape, dtype)
    n = len(shape)
    norm = data.draw(st.sampled_from(["backward", "ortho", "forward", "bad"]))
    points = st.one_of(st.none(), st.integers(0, 5))
    for name in ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"]:
        check(
            f"fft_{name}", x, n=data.draw(points), axis=data.draw(st.integers(-n - 1, n)), norm=norm
        )
    k = data.draw(st.integers(0, n))
    axes = data.draw(st.one_of(st.none(), st.lists(st.integers(-n - 1, n), min_size=k, max_size=k)))
    s = data.draw(st.one_of(st.none(), st.lists(st.integers(0, 5), min_size=k, max_size=k)))
    for name in ["fftn", "ifftn", "rfftn", "irfftn"]:
        check(f"fft_{name}", x, s=s, axes=axes, norm=norm)
    asked = data.draw(st.sampled_from([None, "float32", "int64"]))
    for name in ["fftfreq", "rfftfreq"]:
        check(
            f"fft_{name}",
            data.draw(st.integers(-1, 6)),
            d=data.draw(st.sampled_from([1.0, 0.5, 0.0])),
            dtype=asked,
        )


def test_rules_read_device_tensors() -> None:
    """A ``bf.Tensor`` of the Native backend (host memory) gives its dtype and shape as a NumPy
    array does."""
    import boxfall as bf

    a = bf.native.tensor(np.ones((2, 1), "float32"))
    b = bf.native.tensor(np.ones((3,), "int16"))
    m = bf.native.tensor(np.ones((1, 4), "float64"))
    assert check("add", a, b) == [("float32", (2, 3))]
    assert check("multiply.Tensor_Scalar", b, 2) == [("int16", (3,))]
    assert check("matmul", a, m) == [("float64", (2, 4))]
    assert check("sum", b, axis=[0], keepdims=True) == [("int64", (1,))]
    assert check("less", a, np.ones((3,), "float32")) == [("bool", (2, 3))]


BASIC_PARTS = st.one_of(
    st.integers(-4, 4),
    st.none(),
    st.just(Ellipsis),
    st.builds(
        slice,
        st.none() | st.integers(-5, 5),
        st.none() | st.integers(-5, 5),
        st.none() | st.integers(-3, 3),
    ),
)


@settings(max_examples=150, deadline=None)
@given(
    shape=st.lists(st.integers(0, 4), max_size=3).map(tuple),
    key=BASIC_PARTS | st.lists(BASIC_PARTS, max_size=4).map(tuple),
    dtype=st.sampled_from(["int8", "float32", "complex128"]),
    value=st.sampled_from([True, 1, 300, 1.5, "array"]),
)
def test_basic_indexing(shape: tuple[int, ...], key: Any, dtype: str, value: Any) -> None:
    x = ones(shape, dtype)
    part = check("getitem", x, key, [])
    # The write's rule may decline a value NumPy would take (a float into an int array: NumPy
    # refuses some by value); where it answers, it is the eager result's meta.
    if value == "array":
        v = ones(part[0][1][-1:] if part else (1,), "int16")
        name, args = "setitem_functional", (x, key, [], v)
    else:
        name, args = "setitem_functional.Scalar", (x, key, [], value)
    got, want = rule(name, *args), eager(name, *args)
    if got is not None:
        assert got == want == [(dtype, shape)], (key, value, got, want)
    if part is None:
        assert got is None


def layout(base: np.ndarray, view: np.ndarray) -> tuple[list[int], list[int], int]:
    """A NumPy view's shape, strides and offset among its C-ordered base's elements."""
    item = base.itemsize
    offset = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return list(view.shape), [s // item for s in view.strides], offset // item


@settings(max_examples=150, deadline=None)
@given(
    shape=st.lists(st.integers(0, 4), max_size=3).map(tuple),
    key=BASIC_PARTS | st.lists(BASIC_PARTS, max_size=4).map(tuple),
    dtype=st.sampled_from(["bool", "int8", "float32", "complex128"]),
)
def test_strided_views_read_and_write_the_basic_index_they_describe(
    shape: tuple[int, ...], key: Any, dtype: str
) -> None:
    x = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape).astype(dtype)
    try:
        view = x[key]
    except (IndexError, ValueError):  # out of range, a step of 0
        return
    if not isinstance(view, np.ndarray) or (view.size and not np.shares_memory(view, x)):
        return
    where = layout(x, view)
    assert check("_strided_view", x, *where) == [(dtype, view.shape)]
    np.testing.assert_array_equal(operator("_strided_view")(x, *where), view)
    values = np.ones(view.shape, dtype=dtype)
    assert check("_strided_view_write", x, values, *where) == [(dtype, shape)]
    written = x.copy()
    written[key] = values
    np.testing.assert_array_equal(operator("_strided_view_write")(x, values, *where), written)
    # Values of another shape or dtype than the view's are no write of it.
    other = "int16" if dtype != "int16" else "int8"
    assert rule("_strided_view_write", x, np.ones(view.shape, other), *where) is None
    assert rule("_strided_view_write", x, np.ones((*view.shape, 2), dtype), *where) is None


def test_a_strided_view_beyond_its_base_has_no_rule() -> None:
    x = np.arange(6.0).reshape(2, 3)
    assert rule("_strided_view", x, [2, 3], [3, 1], 1) is None  # one element past the end
    assert rule("_strided_view", x, [3], [-1], 1) is None  # one before the start
    assert rule("_strided_view", x, [2], [1, 1], 0) is None  # strides of another rank
    assert rule("_strided_view", x, [0, 9], [30, 1], 99) == [("float64", (0, 9))]  # empty
    assert rule("_strided_view", x, [3, 2], [1, 3], 0) == [("float64", (3, 2))]  # x.T


def test_an_index_with_arrays_or_a_mask_has_no_rule() -> None:
    x = np.arange(4.0)
    assert rule("getitem", x, "array", [np.array([0, 1])]) is None
    assert rule("getitem", x, True, []) is None


def test_data_dependent_operators_have_no_rule() -> None:
    x = np.arange(4.0)
    assert rule("nonzero", x) is None
    assert rule("unique_values", x) is None
    assert rule("repeat.Tensor", x, np.ones(4, dtype="int64")) is None


def test_an_unknown_operator_is_a_lookup_error_and_bad_arguments_a_type_error() -> None:
    with pytest.raises(Exception, match="no_such_op"):
        rule("no_such_op", np.ones(1))
    with pytest.raises(TypeError):
        rule("add", np.ones(1))
