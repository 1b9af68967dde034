"""The face of ``boxfall.jax`` on a mesh: the meshes' backends (registered at their first use),
their array API namespaces, whose ``device=`` takes a ``PartitionSpec`` or a ``NamedSharding``,
and the multi-process helpers, ``from_process_local`` and ``to_process_local``. ``_mesh`` holds
the hooks and the CPU fallback per shard."""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding

import boxfall as bf
from boxfall import _device

from . import _hooks
from ._mesh import (
    MeshBackend,
    MeshHooks,
    _spec_of,
    axis_size,
    check_divides,
    check_mesh,
    register_kernels,
)

_MESHES: list[MeshBackend] = []
_NAMESPACES: dict[tuple[int, bool], types.ModuleType] = {}
_CREATION = ("zeros", "ones", "empty", "full", "arange", "linspace", "logspace", "eye")
_LIKE = ("zeros_like", "ones_like", "empty_like", "full_like")


_RESHARDS: dict[NamedSharding, Any] = {}


def _reshard(sharding: NamedSharding) -> Any:
    """A compiled identity whose result has ``sharding``: a reshard that every process of a
    mesh spanning several runs alike (``jax.device_put`` between shardings of such a mesh
    refuses some), kept per sharding (a few recur)."""
    found = _RESHARDS.get(sharding)
    if found is None:
        if len(_RESHARDS) >= 256:
            _RESHARDS.clear()
        found = _RESHARDS.setdefault(sharding, jax.jit(lambda a: a, out_shardings=sharding))
    return found


def mesh_backend(mesh: jax.sharding.Mesh, register: Callable[..., Any]) -> MeshBackend:
    """The backends of ``mesh`` (registered at its first use; an equal mesh is the same one)."""
    check_mesh(mesh)
    for found in _MESHES:
        if found.mesh == mesh:
            return found
    name = "JAXMesh" if not _MESHES else f"JAXMesh{len(_MESHES) + 1}"
    made = MeshBackend(mesh, name, register)
    _MESHES.append(made)
    return made


def of_tensor(t: Any) -> MeshBackend | None:
    """The mesh backend a tensor is on, else None."""
    name = getattr(t, "device", "").partition(":")[0]
    for found in _MESHES:
        if name in (found.name, found.graph_name):
            return found
    return None


def namespace(mesh: jax.sharding.Mesh, graph: bool, register: Callable[..., Any]) -> Any:
    """The array API namespace on ``mesh`` (``bj.namespace(mesh=mesh)``)."""
    import boxfall.array_api as bxp

    mb = mesh_backend(mesh, register)
    key = (id(mb), graph)
    found = _NAMESPACES.get(key)
    if found is not None:
        return found
    if graph:
        mb.graph_compiler()
    name = mb.graph_name if graph else mb.name
    base = bxp.namespace(f"{name}:0")
    backend = bf.get_backend(name)
    ns = types.ModuleType(base.__name__ + "_mesh", f"boxfall.array_api on the mesh {mesh}.")
    ns.__dict__.update(base.__dict__)

    def resharded(t: Any, sharding: NamedSharding | None) -> Any:
        if sharding is None:
            return t
        p = t.payload
        if p.sharding.is_equivalent_to(sharding, p.ndim):
            return t
        check_divides(sharding, p.shape, "the array does not fit the sharding: ")
        return backend.tensor_from_payload(_reshard(sharding)(p), 0)

    def creation(fn: Any) -> Any:
        @functools.wraps(fn)
        def create(*args: Any, device: Any = None, **kwargs: Any) -> Any:
            sharding = mb.sharding(device)
            if sharding is not None:
                device = None
            return resharded(fn(*args, device=device, **kwargs), sharding)

        return create

    for attr in _CREATION:
        ns.__dict__[attr] = creation(base.__dict__[attr])

    def like(fn: Any) -> Any:
        # The standard's *_like make their result where x is: on a mesh, with x's sharding.
        @functools.wraps(fn)
        def create(x: Any, /, *args: Any, device: Any = None, **kwargs: Any) -> Any:
            sharding = mb.sharding(device)
            if sharding is not None:
                device = None
            elif device is None and not graph and of_tensor(x) is mb:
                # (Eager mode only: in graph mode x may be pending, and reading its payload
                # here would sync the graph; there the result is replicated.)
                held = x.payload.sharding
                sharding = held if isinstance(held, NamedSharding) else None
            return resharded(fn(x, *args, device=device, **kwargs), sharding)

        return create

    for attr in _LIKE:
        ns.__dict__[attr] = like(base.__dict__[attr])
    asarray_op = bf.ops.array_api.asarray.default

    @functools.wraps(base.asarray)
    def asarray(obj: Any, /, *, dtype: Any = None, device: Any = None, copy: Any = None) -> Any:
        sharding = mb.sharding(device)
        if isinstance(obj, jax.Array) and not isinstance(obj, jax.core.Tracer):
            held = obj.sharding
            if sharding is None and device is None and getattr(held, "mesh", None) == mesh:
                if dtype is None or np.dtype(dtype) == obj.dtype:
                    return backend.tensor_from_payload(obj, 0)
        if sharding is None:
            return base.asarray(obj, dtype=dtype, device=device, copy=copy)
        if isinstance(obj, bf.Tensor) and of_tensor(obj) is mb:
            t = obj if dtype is None else base.astype(obj, dtype)
            return resharded(t, sharding)
        host = bxp.asarray(obj.numpy() if isinstance(obj, bf.Tensor) else obj, dtype=dtype)
        host = np.asarray(host)
        check_divides(sharding, host.shape, "asarray: ")
        with mb.hooks.placing({tuple(host.shape): sharding}):
            return backend.tensor(host, 0, op=asarray_op)

    ns.__dict__["asarray"] = asarray

    @functools.wraps(bxp._creation_functions.to_device)
    def to_device(x: Any, device: Any, /, *, stream: Any = None) -> Any:
        sharding = mb.sharding(device)
        if sharding is None:
            return bxp._creation_functions.to_device(x, device, stream=stream)
        return asarray(x, device=sharding)

    ns.__dict__["to_device"] = to_device
    ns.__dict__["mesh"] = mesh
    _NAMESPACES[key] = ns
    return ns


def from_process_local(xp: Any, rows: Any, spec: Any) -> bf.Tensor:
    """A global tensor on ``xp``'s mesh made of each process's ``rows`` (the process's part of
    the dimensions ``spec`` shards; ``jax.make_array_from_process_local_data``)."""
    mesh = getattr(xp, "mesh", None)
    if mesh is None:
        raise ValueError("from_process_local takes a namespace of a mesh (bj.namespace(mesh=...))")
    mb = next(m for m in _MESHES if m.mesh == mesh)
    sharding = mb.sharding(spec)
    if sharding is None:
        raise TypeError(
            f"spec is a PartitionSpec or a NamedSharding of the mesh, not {type(spec).__name__}"
        )
    local = np.asarray(rows)
    name = xp.device.partition(":")[0]
    backend = bf.get_backend(name)
    dtype = np.dtype(backend.dtype_for(local.dtype, op=bf.ops.array_api.asarray.default))
    local = np.array(local, dtype=dtype, copy=True, order="C")
    shape = list(local.shape)
    here = jax.process_index()
    for dim, entry in enumerate(_spec_of(sharding, local.ndim)):
        if entry is None:
            continue
        names = entry if isinstance(entry, tuple) else (entry,)
        at = [mesh.axis_names.index(n) for n in names]
        # This process's devices hold these parts of the dimension (on one host: all of them).
        parts = {
            tuple(i[a] for a in at)
            for i in np.ndindex(mesh.devices.shape)
            if mesh.devices[i].process_index == here
        }
        if local.shape[dim] % len(parts):
            raise ValueError(
                f"from_process_local: dimension {dim} of this process's rows {local.shape} has "
                f"{local.shape[dim]} elements, which its {len(parts)} parts along mesh axis "
                f"{entry!r} do not divide: boxfall pads nothing"
            )
        shape[dim] = local.shape[dim] // len(parts) * axis_size(mesh, entry)
    check_divides(sharding, shape, "from_process_local: ")
    array = jax.make_array_from_process_local_data(sharding, local, tuple(shape))
    return backend.tensor_from_payload(array, 0)


def to_process_local(t: bf.Tensor) -> np.ndarray:
    """This process's part of ``t`` (a tensor of a mesh) as NumPy: the block its addressable
    shards cover (a replicated tensor: the whole array)."""
    p = t.payload
    if p.is_fully_addressable or p.sharding.is_fully_replicated:
        return np.asarray(p.addressable_data(0)) if not p.is_fully_addressable else np.asarray(p)
    shards = p.addressable_shards
    lows = [min(s.index[d].start or 0 for s in shards) for d in range(p.ndim)]
    highs = [
        max(n if s.index[d].stop is None else s.index[d].stop for s in shards)
        for d, n in enumerate(p.shape)
    ]
    out = np.empty([h - lo for lo, h in zip(lows, highs, strict=True)], dtype=p.dtype)
    for s in shards:
        where = tuple(
            slice((s.index[d].start or 0) - lows[d], (s.index[d].start or 0) - lows[d] + n)
            for d, n in enumerate(s.data.shape)
        )
        out[where] = np.asarray(s.data)
    return out


_LIBRARIES: list[bf.Library] = []


def register(
    name: str, hooks: MeshHooks, compile: Any, fallback: Callable[..., None]
) -> tuple[bf.Backend, list[str]]:
    """Registers a mesh's backend ``name`` (a graph backend with ``compile``): its hooks, its
    fallback (per shard, else gathering) and the JAX kernels; returns it and the operators
    its kernels serve."""
    from . import X64

    registered = bf.register_backend(
        name,
        to_cpu=hooks.to_cpu,
        to_cpu_many=hooks.to_cpu_many,
        from_cpu=hooks.from_cpu,
        copy_from_cpu=hooks.copy_from_cpu,
        view=hooks.view,
        compile=compile,
        # Not lazy: a gathering fallback's results are placed when it returns, with the
        # sharding it asks for (``MeshHooks.placing``), not later, when the device needs them.
        lazy=False,
        **_hooks.optional_registration(hooks, X64),
    )
    fallbacks = bf.Library("_", "IMPL")
    fallbacks.fallback(fallback, name)
    kernels, names = register_kernels(registered, hooks)
    for library in (fallbacks, kernels):
        library._for_process_life()
        _LIBRARIES.append(library)
    _device.declare_devices(name, 1, f"the mesh {hooks.mesh}")
    return registered, names
