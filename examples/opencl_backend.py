"""A real device for boxfall: OpenCL through pyopencl.

The backend keeps each tensor's data in an OpenCL buffer (a ``pyopencl.array.Array``), moves it
with three hooks, makes views on the device with a fourth (``view``), runs six operators of
``boxfall.array_api`` with OpenCL kernels of its own (add, subtract, multiply, exp, sum,
matmul) and every other function of the standard through ``bf.cpu_fallback``. It is the
model the backend authors' guide (docs/backend-authors.md) follows for a device with queues,
hooks that must not run on two threads at once, and a device without float64.

Any Linux machine can run it without a GPU: pocl's wheel gives an OpenCL platform on the CPU::

    pip install pyopencl mako pocl-binary-distribution
    python examples/opencl_backend.py            # a short tour, then the fallback report

From other code (the tests do this)::

    import opencl_backend                        # with examples/ on sys.path
    cl_backend = opencl_backend.register("OpenCL")               # float64 if the device has it
    f32 = opencl_backend.register("OpenCL32", float64=False)     # a device declared without it
    xp = boxfall.array_api.namespace(cl_backend.name)
"""

from __future__ import annotations

import threading
from typing import Any

import boxfall as bf
import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pyopencl.clmath as clmath
from pyopencl.elementwise import ElementwiseKernel
from pyopencl.tools import dtype_to_ctype

# The dtypes of the array API standard; a device without float64 holds all but the two 64-bit
# floating ones (complex128 is two float64).
ALL_DTYPES = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float32", "float64", "complex64", "complex128",
)  # fmt: skip
WITHOUT_FLOAT64 = tuple(d for d in ALL_DTYPES if d not in ("float64", "complex128"))


def _first_device() -> cl.Device:
    for platform in cl.get_platforms():
        devices = platform.get_devices()
        if devices:
            return devices[0]
    raise RuntimeError("no OpenCL platform has a device")


class Buffer:
    """The payload: one OpenCL array. A class of its own rather than the bare
    ``pyopencl.array.Array`` so that ``copy_from_cpu`` can give an ``out=`` argument a new
    shape (an OpenCL buffer cannot be resized), and so that boxfall reads ``shape`` and
    ``dtype`` from it."""

    __slots__ = ("array",)

    def __init__(self, array: cla.Array) -> None:
        self.array = array

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)

    @property
    def dtype(self) -> np.dtype:
        return self.array.dtype


class OpenCLDevice:
    """One OpenCL context and its in-order queue, and the hooks and kernels that use them."""

    def __init__(self, device: cl.Device | None = None) -> None:
        self.device = device or _first_device()
        self.context = cl.Context([self.device])
        # One in-order queue: a kernel enqueued after another sees its writes, so only the
        # host's reads (`to_cpu`) have to wait.
        self.queue = cl.CommandQueue(self.context)
        self.has_float64 = bool(self.device.double_fp_config)
        self._matmul: dict[str, cl.Kernel] = {}
        self._gather: dict[tuple[str, int], Any] = {}

    # -- the hooks ---------------------------------------------------------------------------

    def to_cpu(self, payload: Buffer) -> np.ndarray:
        # `get` is a blocking read: it waits for every kernel enqueued before it that writes
        # the buffer, so the array returned holds finished values (boxfall's rule for `to_cpu`).
        # A size-0 array has no buffer to read.
        if payload.array.size == 0:
            return np.empty(payload.shape, payload.dtype)
        return payload.array.get(queue=self.queue)

    def from_cpu(self, array: np.ndarray) -> Buffer:
        # `to_device` copies out of the array before it returns (a blocking write), so the
        # caller may reuse the array at once.
        return Buffer(self._to_device(array))

    def copy_from_cpu(self, payload: Buffer, array: np.ndarray) -> None:
        array = np.asarray(array, order="C")
        same = array.shape == payload.shape and array.dtype == payload.dtype
        if same and array.size:
            payload.array.set(array, queue=self.queue)
        elif not same:
            payload.array = self._to_device(array)

    def _to_device(self, array: np.ndarray) -> cla.Array:
        # `asarray(order="C")`, not `ascontiguousarray`, which makes a 0-d array 1-d (boxfall
        # refuses a payload whose shape is not its CPU result's).
        array = np.asarray(array, order="C")
        out = cla.empty(self.queue, array.shape, array.dtype)
        if array.size:
            out.set(array, queue=self.queue)
        return out

    def view(
        self, payload: Buffer, shape: tuple[int, ...], strides: tuple[int, ...], offset: int
    ) -> Buffer | tuple[Buffer, bool] | None:
        # A kernel here reads a view (`x.T`, `x[1:]`, `expand_dims(x, 0)`) with nothing moved:
        # the whole buffer in C order again is the same buffer reshaped (shared, as a NumPy
        # view is); any other view is gathered into a new buffer on the device, since these
        # kernels index their arguments as C-ordered buffers from their start. A gathered
        # view is a copy, and says so (`False`): boxfall then writes into the base whatever
        # an in-place kernel writes into the copy.
        base = payload.array
        if base.dtype.kind not in "iuf" or base.offset or not base.flags.c_contiguous:
            return None  # bool and complex: left to from_cpu of the view's values
        size = int(np.prod(shape, dtype=np.int64))
        if offset == 0 and size == base.size and _c_order(shape, strides):
            return Buffer(base.reshape(shape))
        out = cla.empty(self.queue, shape, base.dtype)
        if size:
            gather = self._gather_kernel(base.dtype, len(shape))
            sizes = [np.int64(n) for n in shape]
            steps = [np.int64(s) for s in strides]
            gather(out, base, np.int64(offset), *sizes, *steps, queue=self.queue)
        return Buffer(out), False

    def _gather_kernel(self, dtype: np.dtype, ndim: int) -> Any:
        """``out[i] = base[offset + sum(index_d(i) * s_d)]`` for ``ndim`` axes, per dtype."""
        key = (dtype.name, ndim)
        kernel = self._gather.get(key)
        if kernel is None:
            ctype = dtype_to_ctype(dtype)
            axes = range(ndim)
            args = ", ".join(
                [f"{ctype} *out", f"{ctype} *base", "long offset"]
                + [f"long n{d}" for d in axes]
                + [f"long s{d}" for d in axes]
            )
            walk = "".join(
                f"k = rest % n{d}; rest /= n{d}; src += k * s{d};" for d in reversed(axes)
            )
            body = f"long rest = i, src = offset, k; {walk} out[i] = base[src];"
            kernel = ElementwiseKernel(self.context, args, body, name="boxfall_gather")
            self._gather[key] = kernel
        return kernel

    # -- kernels -----------------------------------------------------------------------------

    def matmul(self, a: cla.Array, b: cla.Array) -> cla.Array:
        """(n, k) @ (k, m) of one floating dtype: one work item per element of the result."""
        n, k = a.shape
        m = b.shape[1]
        ctype = {"float32": "float", "float64": "double"}[a.dtype.name]
        kernel = self._matmul.get(ctype)
        if kernel is None:
            pragma = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" if ctype == "double" else ""
            source = (
                pragma
                + f"""
            __kernel void matmul(__global const {ctype} *a, __global const {ctype} *b,
                                 __global {ctype} *c, const int k, const int m) {{
                int i = get_global_id(0), j = get_global_id(1);
                {ctype} acc = 0;
                for (int p = 0; p < k; ++p) acc += a[i * k + p] * b[p * m + j];
                c[i * m + j] = acc;
            }}"""
            )
            kernel = cl.Program(self.context, source).build().matmul
            self._matmul[ctype] = kernel
        out = cla.empty(self.queue, (n, m), a.dtype)
        kernel(self.queue, (n, m), None, a.data, b.data, out.data, np.int32(k), np.int32(m))
        return out


def _c_order(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether a view of ``shape`` with these element strides is its elements in C order
    (an axis of length 1 may have any stride)."""
    step = 1
    for n, s in zip(reversed(shape), reversed(strides), strict=True):
        if n != 1 and s != step:
            return False
        step *= n
    return True


FLOATING = ("float32", "float64")


def register(
    name: str = "OpenCL",
    *,
    float64: bool | None = None,
    device: OpenCLDevice | None = None,
) -> bf.Backend:
    """Registers an OpenCL backend under ``name``, with ``bf.cpu_fallback`` and native kernels
    for ``array_api``'s add, subtract, multiply, exp, sum and matmul. ``float64=False`` declares
    the device without float64 and complex128 (as many GPUs are), ``None`` asks the device.

    The libraries that hold the fallback and the kernels live as long as the process, as the
    backend does; the returned ``bf.Backend`` makes tensors (``backend.tensor(array)``)."""
    dev = device or OpenCLDevice()
    holds64 = dev.has_float64 if float64 is None else (float64 and dev.has_float64)
    backend = bf.register_backend(
        name,
        to_cpu=dev.to_cpu,
        from_cpu=dev.from_cpu,
        copy_from_cpu=dev.copy_from_cpu,
        # A view a kernel reads is made on the device from its base's buffer.
        view=dev.view,
        dtypes=ALL_DTYPES if holds64 else WITHOUT_FLOAT64,
        # pocl aborts the process when two host threads enqueue work on one buffer at once:
        # boxfall runs this backend's hooks and kernels one at a time.
        thread_safe=False,
    )
    _register_kernels(backend, dev)
    return backend


def _register_kernels(backend: bf.Backend, dev: OpenCLDevice) -> None:
    ops = bf.ops.array_api
    wrap = backend.tensor_from_payload

    def native(*tensors: Any) -> list[cla.Array] | None:
        """The OpenCL arrays of ``tensors`` when a kernel here can take them: all on this
        backend, one floating dtype, one shape, non-empty; else None (the CPU fallback then
        serves the call: broadcasting, promotion and the other dtypes)."""
        if not all(
            isinstance(t, bf.Tensor) and t.device.startswith(backend.name + ":") for t in tensors
        ):
            return None
        arrays = [t.payload.array for t in tensors]
        first = arrays[0]
        if first.dtype.name not in FLOATING or first.size == 0:
            return None
        if any(a.dtype != first.dtype or a.shape != first.shape for a in arrays[1:]):
            return None
        return arrays

    def binary(name: str, compute: Any) -> Any:
        op = getattr(ops, name).default

        def kernel(x1: Any, x2: Any) -> Any:
            arrays = native(x1, x2)
            if arrays is None:
                return bf.call_fallback(bf.cpu_fallback, op, x1, x2)
            return wrap(Buffer(compute(*arrays)))

        kernel.__name__ = f"opencl_{name}"
        return kernel

    def exp(x: Any) -> Any:
        arrays = native(x)
        if arrays is None:
            return bf.call_fallback(bf.cpu_fallback, ops.exp.default, x)
        return wrap(Buffer(clmath.exp(arrays[0], queue=dev.queue)))

    def sum_(x: Any, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
        arrays = native(x)
        if arrays is None or axis is not None or dtype is not None or keepdims:
            return bf.call_fallback(
                bf.cpu_fallback, ops.sum.default, x, axis=axis, dtype=dtype, keepdims=keepdims
            )
        # A 0-d array of the input's dtype, as the standard's sum of a floating array is.
        return wrap(Buffer(cla.sum(arrays[0], queue=dev.queue)))

    def matmul(x1: Any, x2: Any) -> Any:
        arrays = native(x1)
        other = native(x2)
        fits = (
            arrays is not None
            and other is not None
            and arrays[0].ndim == 2
            and other[0].ndim == 2
            and arrays[0].dtype == other[0].dtype
            and arrays[0].shape[1] == other[0].shape[0]
            and other[0].shape[1] > 0
        )
        if not fits:
            return bf.call_fallback(bf.cpu_fallback, ops.matmul.default, x1, x2)
        assert arrays is not None and other is not None
        return wrap(Buffer(dev.matmul(arrays[0], other[0])))

    fb = bf.Library("_", "IMPL")
    fb.fallback(bf.cpu_fallback, backend.name)
    lib = bf.Library("array_api", "IMPL")
    lib.impl("add", binary("add", lambda a, b: a + b), backend.name)
    lib.impl("subtract", binary("subtract", lambda a, b: a - b), backend.name)
    lib.impl("multiply", binary("multiply", lambda a, b: a * b), backend.name)
    lib.impl("exp", exp, backend.name)
    lib.impl("sum", sum_, backend.name)
    lib.impl("matmul", matmul, backend.name)
    # Kept for the process's life, as the backend is.
    _LIBRARIES.extend([fb, lib])


_LIBRARIES: list[bf.Library] = []


def _tour() -> None:
    import boxfall.array_api as xp_cpu

    backend = register("OpenCL")
    xp = xp_cpu.namespace(backend.name)
    dev_name = _first_device().name
    print(f"OpenCL device: {dev_name}")
    x = xp.asarray(np.linspace(0.0, 1.0, 6).reshape(2, 3))
    y = xp.ones((3, 2))
    z = xp.exp(x) @ y + 1.0  # exp, matmul: OpenCL kernels; `+ 1.0` (a scalar): the fallback
    print("exp(x) @ ones + 1 =", np.asarray(z).tolist())
    print("mean:", float(xp.mean(z)), " sum:", float(xp.sum(z)))
    # Hooks and kernels run one at a time (thread_safe=False): threads may share tensors.
    sums: list[float] = []
    threads = [threading.Thread(target=lambda: sums.append(float(xp.sum(x * x)))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"sum(x * x) on 4 threads at once: {sums}")
    print(bf.metrics.report(backend=backend.name))


if __name__ == "__main__":
    _tour()
