"""Backends: ``Backend``, ``register_backend``, their registry and coverage.

Part of the stubs of ``boxfall._boxfall`` (``_boxfall.pyi`` re-exports it)."""

from collections.abc import Callable, Iterable, Sequence
from typing import Any, final

import numpy as np

from boxfall._stubs.graph import Graph
from boxfall._stubs.keys import _KeyName
from boxfall._stubs.ops import OpOverload
from boxfall._stubs.tensor import Tensor

@final
class Backend:
    """A registered backend: makes tensors on its devices."""

    @property
    def name(self) -> str:
        """The backend's (and its dispatch key's) name."""
    def tensor(self, array: Any, index: int = 0, *, op: OpOverload | None = None) -> Tensor:
        """A tensor on device ``index`` holding ``array``'s values (through ``from_cpu``). On a
        backend registered with ``narrow=True``, a 64-bit dtype the device lacks becomes the
        32-bit one of its kind, warned once and counted for ``op`` (the operator that asked),
        warned every time without one; else a ``bf.DTypeError``."""
    def dtype_for(self, dtype: Any, *, op: OpOverload | None = None) -> str:
        """The dtype (its name) a request for ``dtype`` gets on this backend's devices:
        ``dtype`` where held; the 32-bit one of a 64-bit dtype's kind the device lacks where
        the backend narrows (``bf.NarrowingWarning`` once for ``op``, counted in its
        ``op_stats(op)["narrowed"]``); else a ``bf.DTypeError`` naming dtype, operator and
        backend. A backend's own kernel given a ``dtype`` asks this, so that its result's
        dtype is the one the CPU fallback's would have."""
    def tensor_from_payload(self, payload: Any, index: int = 0) -> Tensor:
        """A tensor on device ``index`` around an existing payload."""
    @property
    def dtypes(self) -> list[str]:
        """The dtypes the backend's devices hold, by name (every dtype of the array API
        standard unless ``register_backend(dtypes=)`` named fewer), extension dtypes it
        declared (``"bfloat16"``) last."""
    @property
    def narrow(self) -> bool:
        """Whether a 64-bit dtype the device lacks becomes the 32-bit one of its kind
        (``register_backend(narrow=)``), as JAX without 64-bit types does."""
    @property
    def thread_safe(self) -> bool:
        """Whether the backend's hooks and kernels may run on several threads at once (False:
        boxfall runs them one at a time)."""
    @property
    def lazy(self) -> bool:
        """Whether the backend takes part in residency (``register_backend(lazy=)``): host
        copies kept, the CPU fallback's results left on the host until the device needs them.
        False for Native, whose tensors are host memory."""

def register_backend(
    name: str,
    *,
    to_cpu: Callable[[Any], np.ndarray],
    from_cpu: Callable[..., Any],
    copy_from_cpu: Callable[[Any, np.ndarray], Any],
    to_cpu_many: Callable[[list[Any]], Sequence[np.ndarray]] | None = None,
    shares_memory: bool = False,
    replace: bool = False,
    dtypes: Iterable[str | np.dtype[Any] | type] | None = None,
    thread_safe: bool = True,
    lazy: bool = True,
    view: Callable[[Any, tuple[int, ...], tuple[int, ...], int], Any] | None = None,
    view_write: Callable[[Any, Any, tuple[int, ...], tuple[int, ...], int], Any] | None = None,
    narrow: bool = False,
    compile: Callable[[Graph], Callable[[list[Any]], Sequence[Any]]] | None = None,
    from_cpu_takes_device: bool = False,
) -> Backend:
    """Registers a Python backend and its dispatch key; later backends rank above earlier ones.

    ``to_cpu(payload) -> ndarray``, ``from_cpu(ndarray) -> payload`` and
    ``copy_from_cpu(payload, ndarray)`` (writes the array's values, and shape, into the payload
    and returns None, or returns a new payload holding them, for a device whose memory is
    immutable: it takes the tensor's place, a write of it that its views see) move tensors;
    with ``from_cpu_takes_device=True``, ``from_cpu`` is called ``from_cpu(ndarray, device=i)``,
    ``i`` the index of the tensor's device (``"Accel:1"``: 1), for a backend of several devices
    (the registration says so, not the hook's signature: a hook wrapped by a decorator that
    takes ``**kwargs`` keeps its own signature's calls);
    ``to_cpu_many(payloads) -> arrays`` moves all of a call's tensors at once when given.
    ``shares_memory=True`` says ``to_cpu`` may return memory shared with the payload: the
    fallback then copies the arguments a kernel writes before it runs.

    With ``replace``, a backend registered earlier under ``name`` gets the new hooks and keeps
    its key (a notebook cell run twice): its tensors, kernels and fallbacks stay, and every
    ``Backend`` object of it uses the new hooks. Without it, a name registered twice is a
    ``RegistrationError``.

    ``dtypes`` names the dtypes the device holds (None: every dtype of the array API
    standard): the namespace's ``dtypes()``/``default_dtypes()`` follow it, creation functions
    without a dtype make the device's defaults (float32 on a device without float64), and a
    result of another dtype is a ``bf.DTypeError`` before it moves. The payload ``from_cpu``
    returns must have its array's shape and dtype, else a ``bf.KernelError``. With
    ``thread_safe=False`` the backend's hooks, and the kernels and fallbacks registered for it
    from then on, run one at a time (under one re-entrant lock of the backend).

    ``dtypes`` may also name extension dtypes NumPy knows (``ml_dtypes.bfloat16``): tensors of
    them work through the CPU fallback, whose kernels get NumPy arrays of that dtype (NumPy's
    promotion with ``ml_dtypes``: bfloat16 with float32 is float32). The results whose dtype
    the standard lets the library choose (indices, counts, ``sum``'s accumulator: operators
    tagged ``default_dtypes``) come in the device's default of their kind (int32 without
    int64). ``narrow=True`` is JAX's rule without 64-bit types: a 64-bit dtype the device
    lacks, asked for or made by a CPU kernel, becomes the 32-bit one of its kind (int64 to
    int32, uint64 to uint32, float64 to float32, complex128 to complex64), with a
    ``bf.NarrowingWarning`` once per operator and a count in
    ``bf.metrics.op_stats(op)["narrowed"]``; without it, such a request is a
    ``bf.DTypeError``.

    ``lazy`` (residency): the CPU fallback keeps the host copy of a tensor it read (used while
    no write through boxfall came since) and leaves its results on the host until the device
    needs them (a kernel of the backend runs on them, ``t.payload`` is read,
    ``t.materialize()``); ``lazy=False``: every read calls ``to_cpu`` and every result
    ``from_cpu`` at once, for a backend whose payloads change where boxfall does not see it or
    whose ``from_cpu`` must run eagerly.

    ``view(payload, shape, strides, offset) -> payload | (payload, False) | None`` (optional)
    makes a view of a payload on the device: the payload of ``shape`` whose element at index
    ``i`` is the base payload's element ``offset + sum(i[d] * strides[d])`` of its values in C
    order (strides and offset count elements; a stride may be negative, or 0 for a broadcast
    axis). A payload alone (or ``(payload, True)``) shares the base's device memory: a kernel
    of the backend that writes it writes the base, as a NumPy view does. ``(payload, False)``
    is a copy (a gather into a new buffer): after a kernel of the backend writes it, boxfall
    writes its values into the base (``to_cpu`` of the copy, through the view into the base's
    host values, the base then on the host only; all counted in ``bf.metrics.transfers()``),
    all or nothing (an error names the view's operators, the hook and the backend, and the
    base keeps its values). A kernel of the backend reads a view
    (``x.T``, ``x[1:]``, ``expand_dims(x, 0)``) through it with nothing moved: a base whose
    values were on the host only gets its payload once (``from_cpu``) and every view of it is
    made from that. Return None for a view the device cannot make (boxfall then makes its
    values on the host and moves them with ``from_cpu``). A payload of another shape than
    ``shape`` or another dtype than the base's is a ``bf.KernelError`` naming the hook, the
    view's operators and the backend.

    ``view_write(base, values, shape, strides, offset) -> payload | None`` (optional) writes
    the values of a view that a kernel of the backend wrote as a copy (``view`` returned
    ``(payload, False)`` or None, or there is no ``view``) into its base on the device, the
    view's place given as to ``view``: it returns the base's new payload (a scatter, JAX's
    ``base.at[...].set(values)``), which takes the base's place as a write of it, or None
    where it wrote the base's payload where it is. Without it boxfall writes the view's
    values into its base through the host.

    A kernel of the backend whose return aliases a written argument (``Tensor(a!)``: ``add_``)
    returns that argument (written where it is), None (the same), or a new payload or a new
    ``bf.Tensor`` of the backend for it (a device whose memory is immutable): boxfall puts it
    in the argument's place as a write of it, and the caller gets the argument.

    ``compile(graph) -> function`` (optional) makes the backend a graph backend (graph
    mode): an operator on its tensors is recorded and returns pending tensors (dtype, shape
    and device known, values not yet), computed together at a sync point
    (``t.numpy()``, ``float(t)``, ``t.payload``, a graph break, ``bf.sync()``): the pending
    graph, a :class:`Graph`, is given to ``compile``, whose function of the input payloads (a
    list) gives the output payloads; compiled functions are cached by the graph's structure.
    Where ``compile`` has a ``settings()`` method, the string it returns (the backend's settings
    that change what a compile makes: JAX's x64 and matmul precision) is read once a sync and
    is part of the cache's key, so a change of them compiles anew, with a reason naming them.
    A function whose attribute ``donates`` is true (any size) or an int (the least bytes) may
    consume (donate) input payloads: where there is one to offer, it is called with
    ``donate=``, a list of one bool per payload, true for the old payload of a tensor written
    in place that nothing else holds (no tensor, view, Python reference or cache), of an
    output's dtype and shape, of the least bytes or more (the attribute is read at each such
    run; false offers none); it may reuse those buffers for
    its results (``jax.jit``'s ``donate_argnums``), and sets false, before it returns or
    raises, the entries of those it kept. Where it raises with an entry left true, that input
    is taken as gone: the tensors computed from it cannot be computed (reading one says so),
    and the next sync computes the rest. ``bf.metrics.graphs()["donated"]`` counts them.
    A function whose attribute ``runs_ahead`` is true (read at each sync) may be run ahead:
    where a recording repeats the graph its last two syncs ran, it is called at the
    recording's first node (on the inputs read so far, the last run's for the rest, and the
    last run's scalars), and its results are the sync's only where the recording turns out to
    be that graph on that data, else let go (``ran_ahead`` and ``ahead_missed`` in
    ``bf.metrics.graphs()``). Set it only on a function whose call has no effect but its
    results, returns at once while the device computes (JAX's async dispatch), and reads
    payloads nothing writes in place. A function whose attribute ``checks_results`` is true
    (read at each sync) is then called ``f.check_results(payloads)`` with a run's output
    payloads before the sync commits them (its own run's, or a run ahead's once confirmed):
    what it raises fails the run, as the run raising would (boxfall.jax's programs read there
    the checks of kernels that give numbers where NumPy raises, so that a run ahead still only
    launches).
    """

def backends_version() -> int:
    """A number that changes whenever a backend is registered or replaced."""

def host_data_target(op: OpOverload, device: str) -> tuple[Backend, int] | None:
    """The backend and device index that host data given to the creation operator ``op`` for
    ``device`` goes to through ``Backend.tensor`` (a transfer the user asked for), where the
    device's backend serves ``op`` with ``bf.cpu_fallback``; None elsewhere."""

def get_backend(name: _KeyName) -> Backend:
    """The backend registered under ``name`` (any case: ``"accel"`` finds ``Accel``), Native
    included. A name that is no backend (``"CPU"``, whose tensors are NumPy arrays, a
    functionality key, an unknown name) is an ``UnknownKeyError`` that lists the backends."""

def backends() -> list[Backend]:
    """Every backend, Native first, then those registered from Python in registration order
    (lowest priority first, as ``bf.dispatch_keys()`` lists keys)."""

def coverage(key: _KeyName, namespace: str | None = None) -> tuple[str, list[tuple[str, str]]]:
    """The key's registered name and ``(operator name, what serves it on the key)`` for every
    defined operator, or those of ``namespace``, sorted by name (``bf.coverage`` wraps it)."""

def native_backend() -> Backend:
    """The built-in Native backend."""

def native_kernel_names() -> list[tuple[str, list[str]]]:
    """The operators Native implements in Rust: ``(name, argument types)``."""
