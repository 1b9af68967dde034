"""boxfall on JAX: array API code (SciPy, scikit-learn, your own) on a TPU, a GPU or JAX's CPU.

``boxfall.jax`` registers a backend, ``"JAX"``, whose payload is a ``jax.Array`` on a JAX device,
with ``jax.numpy`` kernels for the operators a workload spends its time in (creation,
element-wise arithmetic, comparisons and math, in-place arithmetic, reductions, matmul and its
kin, manipulation, the linear algebra JAX holds on the device) and ``bf.cpu_fallback`` for every
other operator of ``boxfall.array_api``::

    import boxfall.jax as bj
    xp = bj.namespace()                 # the array API namespace on "JAX:0"
    x = xp.asarray(np.random.rand(1000, 16).astype(np.float32))
    g = x.T @ x                         # matmul: a JAX kernel, on the device
    w = xp.linalg.eigh(g)               # through the CPU fallback where no JAX kernel serves it
    bf.coverage()                       # which operators ran natively, which fell back

It is also the worked example of a backend for a real accelerator (docs/backend-authors.md):

- **Immutable device memory.** A ``jax.Array`` cannot be written. ``copy_from_cpu`` and the
  in-place kernels (``x += y``) return a new array, which boxfall puts in the tensor's place; a
  view that a kernel of the backend wrote is written into its base by ``view_write`` (a scatter,
  ``base.at[...].set(values)``), on the device.
- **Dtypes.** The device holds what JAX holds there: without ``jax_enable_x64`` (a TPU's usual
  state) no 64-bit dtype, float32/int32 the defaults, and ``narrow=True``: a 64-bit dtype
  requested or made by a CPU kernel becomes the 32-bit one of its kind, as JAX itself does.
  ``jax_enable_x64`` is read once, when this module is imported: set it before.
- **Asynchronous dispatch.** A kernel's result is not waited on; ``to_cpu`` (``np.asarray``)
  waits for the values it reads.
- **Interop without a host copy.** ``xp.asarray(a_jax_array)`` wraps it; ``t.payload`` is the
  ``jax.Array``; ``jnp.asarray(t)`` returns it (``__jax_array__``); ``to_device`` between JAX
  devices (``bj.namespace(1)``'s, graph mode's) is a ``jax.device_put``. JAX 0.8 and later no
  longer let ``jax.numpy`` functions take such an object directly (``jnp.sum(t)`` raises):
  write ``jnp.sum(jnp.asarray(t))``.
- **Several devices.** ``bj.namespace(i)`` is JAX's device ``i`` (``"JAX:i"``): its arrays,
  its kernels' and the CPU fallback's results stay there (``from_cpu`` is told the device), a
  call with arrays of two devices is refused, and graph mode computes each device's graph
  apart.
- **A mesh.** ``bj.namespace(mesh=mesh)`` (a ``jax.sharding.Mesh`` of Auto axes) is one boxfall
  device over all of the mesh's devices and hosts: payloads sharded as ``device=`` asks (a
  ``PartitionSpec``), the kernels running on them as XLA partitions them, the CPU fallback per
  shard where an operator allows (``register_sharding_rule``; ``mesh_stats()`` says what moved),
  ``from_process_local``/``to_process_local`` across processes (docs/mesh.md).
- **Precision.** Matmul-family kernels use JAX's configured precision
  (``jax.default_matmul_precision``). A TPU's default passes float32 products through bfloat16:
  set ``'highest'`` before comparing with NumPy.
- ``jax.jit`` over functions of boxfall tensors is not the way to compile boxfall code: boxfall's
  operators take tensors, not JAX tracers.

Importing ``boxfall.jax`` without JAX raises an ``ImportError`` that says how to install it.
"""

from __future__ import annotations

try:
    import jax
    import jax.numpy as jnp
except ImportError:  # the original error stays chained as the context
    raise ImportError(  # noqa: B904
        'boxfall.jax needs JAX: `pip install ".[jax]"` in boxfall\'s checkout (or `pip install '
        "jax`) installs JAX for the CPU; for a TPU or a GPU install JAX's build for that device "
        "as JAX documents (supported: jax >=0.4.35,<0.11)"
    )

import os
import types
import warnings
from typing import Any

import boxfall as bf
import boxfall.array_api as bxp
from boxfall import _device

from . import _graph, _hooks, _kernels, _mesh, _mesh_api

SUPPORTED_JAX = ">=0.4.35,<0.11"
"""The JAX versions this module is tested with (0.10.2 included); the ``[jax]`` extra pins the
same range."""

BACKEND_NAME = "JAX"
"""The name of the eager backend (its devices read ``"JAX:0"``, ``"JAX:1"``, ...)."""

GRAPH_BACKEND_NAME = "JAXGraph"
"""The name of graph mode's backend (``namespace(graph=True)``), registered when first asked
for: a backend of its own, so that eager and pending tensors never mix unseen."""

X64: bool = bool(jax.config.read("jax_enable_x64"))
"""Whether JAX's 64-bit types were on when this module was imported."""


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


if not ((0, 4, 35) <= _version_tuple(jax.__version__) < (0, 11)):
    warnings.warn(
        f"boxfall.jax is tested with jax {SUPPORTED_JAX}; this is jax {jax.__version__}",
        stacklevel=2,
    )

device_hooks = _hooks.JaxHooks(jax.devices())
"""The transfer and view hooks of the backend (one object: the devices it places data on)."""


_libraries: list[bf.Library] = []
"""The backends' fallback and kernel libraries, held for the process's life, as the backends
are (a library collected would undo its registrations); they go at exit without a
``ResourceWarning``."""


def _register(name: str, compile: Any = None) -> tuple[bf.Backend, list[str]]:
    """Registers a backend of JAX's devices under ``name`` (a graph backend with ``compile``),
    with the CPU fallback and the JAX kernels; returns it and the operators its kernels serve."""
    registered = bf.register_backend(
        name,
        to_cpu=device_hooks.to_cpu,
        to_cpu_many=device_hooks.to_cpu_many,
        from_cpu=device_hooks.from_cpu,
        copy_from_cpu=device_hooks.copy_from_cpu,
        view=device_hooks.view,
        compile=compile,
        **_hooks.optional_registration(device_hooks, X64),
    )
    fallback = bf.Library("_", "IMPL")
    fallback.fallback(bf.cpu_fallback, name)
    kernels, names = _kernels.register(
        registered,
        device_hooks.device,
        in_place=_hooks.takes("view_write"),
        devices=device_hooks.devices,
    )
    for library in (fallback, kernels):
        library._for_process_life()
        _libraries.append(library)
    return registered, names


backend, NATIVE_KERNELS = _register(BACKEND_NAME)
"""``backend``: the ``bf.Backend`` of eager mode; ``NATIVE_KERNELS``: the operators its JAX
kernels serve."""


def _device_index(device: Any) -> int:
    if device is None:
        return 0
    if isinstance(device, int) and not isinstance(device, bool):
        index = device
    elif isinstance(device, jax.Device):
        try:
            index = device_hooks.devices.index(device)
        except ValueError:
            raise ValueError(
                f"{device} is not one of JAX's devices here ({device_hooks.devices})"
            ) from None
    else:
        raise TypeError(f"device is a jax.Device or its index, not {type(device).__name__}")
    if not 0 <= index < len(device_hooks.devices):
        raise ValueError(device_hooks.no_device(index))
    return index


_graph_mode: dict[str, Any] = {}


def graph_compiler() -> _graph.JaxCompiler:
    """Graph mode's backend, registered now if it is not yet, and its compiler (which counts
    its compiles and, per operator, the host callbacks its programs ran)."""
    if not _graph_mode:
        compiler = _graph.JaxCompiler(GRAPH_BACKEND_NAME, X64, device_hooks.devices)
        graph_backend, names = _register(GRAPH_BACKEND_NAME, compile=compiler)
        compiler.serve(names)
        _graph_mode.update(backend=graph_backend, compiler=compiler)
    return _graph_mode["compiler"]


def enable_compilation_cache(path: str | os.PathLike[str]) -> str:
    """Turns on JAX's persistent compilation cache in the directory ``path`` (made if missing)
    for every program compiled from now on, graph mode's and the eager kernels' alike, and
    returns the directory's path: a later process that calls it with the same directory loads
    the compiled programs from there instead of compiling them (XLA's compile is seconds on a
    TPU). Unlike JAX's own default, no program is too quick to compile or too small to be kept
    (``jax_persistent_cache_min_compile_time_secs`` 0, ``..._min_entry_size_bytes`` -1): graph
    mode's programs often compile in under JAX's default second, and were never kept.

    A process still traces and lowers each program it meets (JAX's key for a cached program
    is made from the lowered module), which ``benches/jax_compile_cache.py`` measures against
    the load. JAX keeps no program that calls the host (a node without a JAX kernel, run as a
    host callback): such a program is compiled in every process. Call it before the first
    compile where possible; called later, JAX's decision that no cache is in use is undone
    (``jax.experimental.compilation_cache.compilation_cache.reset_cache``). The cache is
    trusted code: keep it in a directory only you may write to. Anything else about it (its
    size bound, ``jax_compilation_cache_max_size``) is JAX's setting to make."""
    from jax.experimental.compilation_cache import compilation_cache

    folder = os.path.abspath(os.fspath(path))
    os.makedirs(folder, exist_ok=True)
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    jax.config.update("jax_compilation_cache_dir", folder)
    # JAX decides once a process, at its first compile, whether a cache is in use (and opens
    # the directory then): undone, so that the next compile decides again, with this one.
    compilation_cache.reset_cache()
    return folder


def _graph_mode_without(name: str, operators: frozenset[str]) -> tuple[Any, types.ModuleType]:
    """A second graph backend, ``name``, whose programs run ``operators`` (``"maximum"``) on
    the host (host callbacks) although JAX kernels exist: its compiler and its namespace. For
    measuring what a missing kernel costs a program (``benches/jax_device.py``, the tests)."""
    compiler = _graph.JaxCompiler(name, X64, device_hooks.devices)
    _, names = _register(name, compile=compiler)
    compiler.serve([n for n in names if n.split(".")[0] not in operators])
    return compiler, bxp.namespace(f"{name}:0")


def namespace(device: Any = None, *, graph: bool = False, mesh: Any = None) -> types.ModuleType:
    """The array API namespace on a JAX device: ``device`` a ``jax.Device`` or its index in
    ``jax.devices()`` (default: 0). Its creation functions make ``bf.Tensor``s of the
    ``"JAX"`` backend there.

    With ``mesh=`` (a ``jax.sharding.Mesh`` of Auto axes), the namespace of that mesh, one
    boxfall device (``"JAXMesh:0"``): its tensors' payloads are ``jax.Array``s sharded over the
    mesh, replicated unless ``device=`` (of its creation functions, ``asarray`` and
    ``to_device``) gives a ``PartitionSpec`` or a ``NamedSharding`` of the mesh; ``t.sharding``
    is a tensor's. The CPU fallback runs per shard where an operator allows
    (docs/mesh.md).

    With ``graph=True``, graph mode: the tensors are of the
    ``"JAXGraph"`` backend, whose operators are recorded and computed together, at the first
    read of a value (``t.numpy()``, ``float(t)``, ``bf.sync()``), by one ``jax.jit``-compiled
    program; an operator with no JAX kernel runs its CPU kernel inside the program (a host
    callback). ``bf.metrics.graphs()`` counts compiles, cache hits, syncs and breaks."""
    if mesh is not None:
        if device is not None:
            raise TypeError("namespace takes a device or a mesh, not both")
        return _mesh_api.namespace(mesh, graph, _mesh_api.register)
    index = _device_index(device)
    if graph:
        graph_compiler()
        return bxp.namespace(f"{GRAPH_BACKEND_NAME}:{index}")
    return bxp.namespace(f"{BACKEND_NAME}:{index}")


def _jax_array(self: bf.Tensor) -> Any:
    """``jnp.asarray(t)``: a tensor of this backend gives its ``jax.Array`` (no copy); another
    tensor its host values."""
    if self.device.startswith((BACKEND_NAME + ":", GRAPH_BACKEND_NAME + ":", "JAXMesh")):
        return self.payload
    return jnp.asarray(self.numpy())


bf.Tensor.__jax_array__ = _jax_array  # type: ignore[attr-defined]


def _sharding(self: bf.Tensor) -> Any:
    """``t.sharding``: the ``jax.sharding.Sharding`` of a JAX tensor's payload (a mesh's
    ``NamedSharding``, or one device's); None for a tensor of another backend."""
    if self.device.startswith((BACKEND_NAME + ":", GRAPH_BACKEND_NAME + ":", "JAXMesh")):
        return self.payload.sharding
    return None


bf.Tensor.sharding = property(_sharding)  # type: ignore[attr-defined]

from_process_local = _mesh_api.from_process_local
to_process_local = _mesh_api.to_process_local
register_sharding_rule = _mesh.register_sharding_rule
mesh_stats = _mesh.stats
reset_mesh_stats = _mesh.reset_stats


def _move(x: bf.Tensor, device: str) -> Any:
    """``x``, a tensor of a JAX backend, on ``device`` (canonical) by a ``jax.device_put``,
    without the host, where ``device`` is a device of a JAX backend (eager mode's or graph
    mode's, any index); None for any other device, which takes the host's way. A pending
    tensor is computed first (reading its payload is a sync)."""
    name, _, index = device.partition(":")
    if name not in (BACKEND_NAME, GRAPH_BACKEND_NAME) or not index.isdigit():
        return None
    at = int(index)
    if at >= len(device_hooks.devices):
        raise ValueError(device_hooks.no_device(at))
    if name == GRAPH_BACKEND_NAME:
        graph_compiler()  # registered at its first use
    payload = jax.device_put(x.payload, device_hooks.devices[at])
    return bf.get_backend(name).tensor_from_payload(payload, at)


bxp._creation_functions.DEVICE_MOVES.update({BACKEND_NAME: _move, GRAPH_BACKEND_NAME: _move})

# An index that no device has is an error wherever a device is named ("JAX:3" on a host of one
# device): in eager and in graph mode, before anything is made there.
for _name in (BACKEND_NAME, GRAPH_BACKEND_NAME):
    _device.declare_devices(_name, len(device_hooks.devices), str(device_hooks.devices))

__all__ = [
    "BACKEND_NAME",
    "GRAPH_BACKEND_NAME",
    "NATIVE_KERNELS",
    "SUPPORTED_JAX",
    "X64",
    "backend",
    "enable_compilation_cache",
    "from_process_local",
    "graph_compiler",
    "mesh_stats",
    "namespace",
    "register_sharding_rule",
    "reset_mesh_stats",
    "to_process_local",
]
