"""NumPy 2's rules where a program leaves the standard's letter, on every backend at hand
(NumPy's own kernels, Native, and boxfall.jax eager and graph mode where JAX is installed):
NumPy scalars as operands and in setitem, ints past 64 bits in functions NumPy computes in
floating point, and shapes that do not broadcast. Each case is NumPy's result or NumPy's error
class. (The differential tester, tests/python/differential/, found these.)"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import boxfall.array_api as xa
import numpy as np
import pytest

# A device without 64-bit types warns of each narrowed float64 result: expected here.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _namespaces() -> list[Any]:
    found = [pytest.param(xa, id="numpy"), pytest.param(xa.namespace("Native"), id="Native")]
    try:
        import boxfall.jax as bj
    except ImportError:
        return found
    return found + [
        pytest.param(bj.namespace(), id="jax"),
        pytest.param(bj.namespace(graph=True), id="jax-graph"),
    ]


NAMESPACES = _namespaces()


def _outcome(f: Callable[[], Any]) -> tuple[str, Any]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ("value", np.asarray(f()).tolist())
    except Exception as e:  # noqa: BLE001  (the class is what is compared)
        return ("error", type(e).__mro__)


def _same(got: tuple[str, Any], want: tuple[str, Any]) -> None:
    if want[0] == "error":
        assert got[0] == "error", f"NumPy raises {want[1][0].__name__}; got {got[1]}"
        assert want[1][0] in got[1], f"NumPy raises {want[1][0].__name__}; got {got[1][0]}"
    else:
        assert got == want


def _narrowed(xp: Any, dtype: str) -> str:
    """The dtype ``xp`` holds for ``dtype`` (a device without 64-bit types narrows)."""
    return str(xp.asarray(np.zeros(1, dtype)).dtype)


@pytest.mark.parametrize("xp", NAMESPACES)
@pytest.mark.parametrize(
    "value", [300, -1, 2**64, 1.5, np.int64(300), np.int8(-3), np.float64(2.5), np.bool_(True)]
)
@pytest.mark.parametrize("dtype", ["int8", "uint8", "float32", "bool"])
def test_setitem_stores_what_numpy_stores(xp: Any, value: Any, dtype: str) -> None:
    def numpy() -> Any:
        x = np.zeros(3, dtype)
        x[0] = value
        return x

    def ours() -> Any:
        x = xp.asarray(np.zeros(3, dtype))
        x[0] = value
        return x

    _same(_outcome(ours), _outcome(numpy))


@pytest.mark.parametrize("xp", NAMESPACES)
@pytest.mark.parametrize("name", ["divide", "atan2", "hypot", "copysign", "logaddexp"])
@pytest.mark.parametrize("value", [2**64, -(2**70)])
def test_float_functions_take_any_int_beside_an_integer_array(
    xp: Any, name: str, value: int
) -> None:
    a = np.array([1, 2], np.int32)
    want = getattr(np, {"atan2": "arctan2"}.get(name, name))(a, value)
    got = getattr(xp, name)(xp.asarray(a), value)
    assert str(got.dtype) == _narrowed(xp, "float64")
    np.testing.assert_allclose(np.asarray(got), want.astype(str(got.dtype)), rtol=1e-6)
    reflected = getattr(xp, name)(value, xp.asarray(a))
    np.testing.assert_allclose(
        np.asarray(reflected),
        getattr(np, {"atan2": "arctan2"}.get(name, name))(value, a).astype(str(got.dtype)),
        rtol=1e-6,
    )


@pytest.mark.parametrize("xp", NAMESPACES)
@pytest.mark.parametrize("op", ["add", "equal", "multiply", "less"])
def test_shapes_that_do_not_broadcast_raise_numpys_value_error(xp: Any, op: str) -> None:
    x, y = xp.asarray(np.ones(3)), xp.asarray(np.ones(2))
    with pytest.raises(ValueError, match="broadcast"):
        np.asarray(getattr(xp, op)(x, y))


@pytest.mark.parametrize("xp", NAMESPACES)
def test_numpy_scalars_are_zero_d_arrays_of_their_dtype(xp: Any) -> None:
    zero_d = xp.asarray(np.array(3, np.int32))
    for got in (np.float32(2.0) * zero_d, zero_d * np.float32(2.0)):
        # NumPy 2: int32 with float32 is float64; the result stays an array of the namespace.
        assert xp is xa or not isinstance(got, np.generic)
        assert str(got.dtype) == _narrowed(xp, "float64") and float(got) == 6.0
    x = xp.asarray(np.array([1, 2], np.int8))
    x += np.int8(1)
    assert np.asarray(x).tolist() == [2, 3] and str(x.dtype) == "int8"
    f = xp.asarray(np.array([1.5, 2.0], np.float32))
    assert str((f * np.float64(3.0)).dtype) == _narrowed(xp, "float64")


@pytest.mark.parametrize("xp", NAMESPACES)
@pytest.mark.parametrize("dtype", ["uint8", "int32", "float32", None])
def test_asarray_of_a_list_of_numpy_scalars_is_numpys(xp: Any, dtype: str | None) -> None:
    # NumPy casts a NumPy scalar (a float64 NaN to uint8: 0, with a warning), where a Python
    # float NaN is a ValueError; the list's elements once went in as Python scalars.
    values = [np.float64(np.nan), np.float32(2.5), np.int8(-3)]

    def numpy() -> Any:
        with np.errstate(invalid="ignore"):
            return np.asarray(values, dtype=dtype)

    def ours() -> Any:
        return xp.asarray(values, dtype=None if dtype is None else getattr(xp, dtype))

    want, got = _outcome(numpy), _outcome(ours)
    if want[0] == "value" and got[0] == "value":
        np.testing.assert_array_equal(np.asarray(got[1], dtype=float), want[1])
    else:
        _same(got, want)
