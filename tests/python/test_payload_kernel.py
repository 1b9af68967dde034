"""``bf.PayloadKernel``: a backend's kernel that gets its tensors' payloads and returns payloads,
unwrapped and wrapped by boxfall, with every call it does not serve going to ``otherwise``.

The backend is the one-test backend "Scratch" (``HostBuffer`` payloads, the CPU fallback for
every operator) with the test's own operators."""

from __future__ import annotations

from collections import Counter

import boxfall as bf
import numpy as np
import pytest
from boxfall.testing import HostBuffer
from scratch_backend import NAME, ScratchBackend


def _hooks(calls: Counter[str], *, lazy: bool = True) -> dict:
    def to_cpu(p):
        calls["to_cpu"] += 1
        return p.data.copy()

    def from_cpu(a):
        calls["from_cpu"] += 1
        return HostBuffer(a)

    def copy_from_cpu(p, a):
        p.data = np.array(a, copy=True)

    return {"to_cpu": to_cpu, "from_cpu": from_cpu, "copy_from_cpu": copy_from_cpu, "lazy": lazy}


class Payloads(ScratchBackend):
    """ "Scratch" with the test namespace's operators ``f(a, b) -> Tensor`` (a payload kernel
    adding its arguments, float64 and int64 served, ``otherwise`` the CPU kernel's sum plus 100
    so that the two are told apart), ``pair(a, b) -> (Tensor, Tensor)`` and ``f_(a!, b)``."""

    def __init__(self, ns: str, *, lazy: bool = True, raises: type[Exception] | None = None):
        self.calls: Counter[str] = Counter()
        self.got: list[tuple] = []
        self.ns = ns
        self.raises = raises
        super().__init__(**_hooks(self.calls, lazy=lazy))

    def __enter__(self) -> Payloads:
        super().__enter__()
        lib = self.library(self.ns, "DEF")
        lib.define("f(Tensor a, Tensor b) -> Tensor")
        lib.define("pair(Tensor a, Tensor b) -> (Tensor, Tensor)")
        lib.define("f_(Tensor(a!) a, Tensor b) -> Tensor(a!)")
        lib.impl("f", lambda a, b: a + b, "CPU")
        lib.impl("pair", lambda a, b: (a + b, a - b), "CPU")

        def on_payloads(a, b):
            self.calls["payloads"] += 1
            self.got.append((a, b))
            if self.raises is not None:
                raise self.raises("refused")
            return HostBuffer(a.data + b.data)

        def otherwise(a, b):
            self.calls["otherwise"] += 1
            return bf.call_fallback(bf.cpu_fallback, self.op("f"), a, b) + 100.0

        def pair(a, b):
            return HostBuffer(a.data + b.data), HostBuffer(a.data - b.data)

        def pair_otherwise(a, b):
            self.calls["pair_otherwise"] += 1
            return bf.call_fallback(bf.cpu_fallback, self.op("pair"), a, b)

        dtypes = ["float64", np.int64]
        lib.impl("f", bf.PayloadKernel(on_payloads, dtypes=dtypes, otherwise=otherwise), NAME)
        lib.impl("pair", bf.PayloadKernel(pair, dtypes=dtypes, otherwise=pair_otherwise), NAME)
        self.def_lib = lib
        return self

    def op(self, name: str):
        return getattr(getattr(bf.ops, self.ns), name).default

    def tensor(self, values, dtype="float64"):
        return self.handle.tensor(np.asarray(values, dtype=dtype))


def test_a_call_of_served_tensors_gets_their_payloads_and_its_result_is_wrapped(ns):
    with Payloads(ns) as dev:
        x, y = dev.tensor([1.0, 2.0]), dev.tensor([10.0, 20.0])
        px, py = x.payload, y.payload
        out = dev.op("f")(x, y)
        assert dev.calls["payloads"] == 1 and dev.calls["otherwise"] == 0
        assert dev.got[0][0] is px and dev.got[0][1] is py
        assert isinstance(out, bf.Tensor) and out.device == f"{NAME}:0"
        assert isinstance(out.payload, HostBuffer)
        np.testing.assert_array_equal(out.numpy(), [11.0, 22.0])
        assert (out.dtype, out.shape) == ("float64", (2,))
        # An argument given by keyword reaches a kernel by position (the schema binds it).
        np.testing.assert_array_equal(dev.op("f")(x, b=y).numpy(), [11.0, 22.0])
        assert (dev.calls["payloads"], dev.calls["otherwise"]) == (2, 0)


def test_a_tuple_of_payloads_is_a_tuple_of_tensors(ns):
    with Payloads(ns) as dev:
        s, d = dev.op("pair")(dev.tensor([5.0]), dev.tensor([2.0]))
        assert dev.calls["pair_otherwise"] == 0
        np.testing.assert_array_equal(s.numpy(), [7.0])
        np.testing.assert_array_equal(d.numpy(), [3.0])
        assert s.device == d.device == f"{NAME}:0"


@pytest.mark.parametrize(
    "case",
    ["dtype not served", "mixed dtypes", "a NumPy array"],
)
def test_every_other_call_goes_to_otherwise(ns, case):
    with Payloads(ns) as dev:
        x = dev.tensor([1.0, 2.0])
        if case == "dtype not served":
            args, kwargs = (dev.tensor([1, 2], "int32"), dev.tensor([3, 4], "int32")), {}
            want = [104, 106]
        elif case == "mixed dtypes":
            args, kwargs = (x, dev.tensor([3, 4], "int64")), {}
            want = [104.0, 106.0]
        else:
            args, kwargs = (x, np.array([3.0, 4.0])), {}
            want = [104.0, 106.0]
        out = dev.op("f")(*args, **kwargs)
        assert (dev.calls["payloads"], dev.calls["otherwise"]) == (0, 1)
        np.testing.assert_array_equal(np.asarray(out), want)


def test_a_type_or_value_error_of_the_function_goes_to_otherwise(ns):
    with Payloads(ns, raises=ValueError) as dev:
        out = dev.op("f")(dev.tensor([1.0]), dev.tensor([2.0]))
        assert (dev.calls["payloads"], dev.calls["otherwise"]) == (1, 1)
        np.testing.assert_array_equal(out.numpy(), [103.0])


def test_any_other_error_of_the_function_is_raised(ns):
    with Payloads(ns, raises=RuntimeError) as dev:
        with pytest.raises(RuntimeError, match="refused"):
            dev.op("f")(dev.tensor([1.0]), dev.tensor([2.0]))
        assert dev.calls["otherwise"] == 0


def test_the_calls_are_counted_as_the_backends_kernel(ns):
    with Payloads(ns) as dev:
        x, y = dev.tensor([1.0]), dev.tensor([2.0])
        bf.metrics.reset()
        for _ in range(3):
            dev.op("f")(x, y)
        stats = bf.metrics.op_stats(f"{ns}::f")
        assert (stats["kernel_calls"], stats["fallbacks"]) == (3, 0)


def test_a_host_only_tensor_gets_its_payload_before_the_function(ns):
    with Payloads(ns) as dev:
        # The CPU fallback's result stays on the host (residency) until the device needs it.
        x = dev.xp.add(dev.tensor([1.0, 2.0]), 0.0)
        assert x.residency == "host"
        ones = dev.tensor([1.0, 1.0])
        made = dev.calls["from_cpu"]
        out = dev.op("f")(x, ones)
        assert dev.calls["from_cpu"] == made + 1
        assert isinstance(dev.got[0][0], HostBuffer)
        np.testing.assert_array_equal(out.numpy(), [2.0, 3.0])


def test_a_tensor_numpy_holds_is_read_with_its_latest_values(ns):
    with Payloads(ns) as dev:
        x = dev.tensor([1.0, 2.0])
        arr = np.asarray(x)
        arr[0] = 50.0
        out = dev.op("f")(x, dev.tensor([1.0, 1.0]))
        np.testing.assert_array_equal(out.numpy(), [51.0, 3.0])
        arr[1] = 70.0  # still the tensor's memory after the call
        np.testing.assert_array_equal(x.numpy(), [50.0, 70.0])


@pytest.mark.parametrize("where", ["CPU", "boxed", "in place", "undefined"])
def test_registration_is_refused_where_payloads_do_not_fit(ns, where):
    with Payloads(ns) as dev:
        k = bf.PayloadKernel(lambda a, b: a, dtypes=["float64"], otherwise=lambda a, b: a)
        with pytest.raises(bf.RegistrationError, match="PayloadKernel") as info:
            if where == "CPU":
                dev.def_lib.impl("f", k, "CPU", allow_override=True)
            elif where == "boxed":
                dev.def_lib.impl("f", k, NAME, boxed=True, allow_override=True)
            elif where == "in place":
                dev.def_lib.impl("f_", k, NAME)
            else:
                dev.def_lib.impl("g", k, NAME)
        assert "nothing was registered" in str(info.value)
        if where == "in place":
            assert "'a'" in str(info.value) and f"{ns}::f_" in str(info.value)


def test_its_parts_are_checked_when_made():
    with pytest.raises(TypeError, match="otherwise must be callable"):
        bf.PayloadKernel(lambda a: a, dtypes=["float32"], otherwise=3)
    with pytest.raises(TypeError):
        bf.PayloadKernel(lambda a: a, dtypes=["not a dtype"], otherwise=lambda a: a)
    k = bf.PayloadKernel(abs, dtypes=["float32", np.int8], otherwise=abs)
    assert k.fn is abs and k.otherwise is abs
    assert k.dtypes == [np.dtype("float32"), np.dtype("int8")]
    assert "PayloadKernel(abs" in repr(k)


@pytest.mark.parametrize("returned", ["None", "an int", "a str", "a bf.Tensor", "in a tuple"])
def test_a_result_that_is_no_payload_is_a_kernel_error_at_the_call(ns, returned):
    # Issue 53: such a result became a tensor that failed later (AttributeError on .dtype).
    with Payloads(ns) as dev:
        x, y = dev.tensor([1.0]), dev.tensor([2.0])
        bad = {
            "None": None,
            "an int": 3,
            "a str": "s",
            "a bf.Tensor": x,
            "in a tuple": (HostBuffer(np.ones(1)), None),
        }[returned]
        lib = dev.library(ns, "IMPL")
        k = bf.PayloadKernel(lambda a, b: bad, dtypes=["float64"], otherwise=lambda a, b: a)
        lib.impl("f", k, NAME, allow_override=True)
        with pytest.raises(bf.KernelError) as info:
            dev.op("f")(x, y)
        text = str(info.value)
        assert f"'{NAME}' kernel of '{ns}::f'" in text and "PayloadKernel" in text, text
        assert "not a payload" in text
        # A payload of the same call still serves (the check keeps no state that refuses it).
        lib.close()
        good = dev.op("f")(x, y)
        np.testing.assert_array_equal(good.numpy(), [3.0])
