"""The array namespace's building blocks: ``NamespaceFunction`` and the kernels and views it makes.

Part of the stubs of ``boxfall._boxfall`` (``_boxfall.pyi`` re-exports it)."""

from collections.abc import Callable
from typing import Any, final

from boxfall._stubs.tensor import Tensor

def _output_metas(op: str, *args: Any, **kwargs: Any) -> list[tuple[str, tuple[int, ...]]] | None:
    """The dtypes and shapes the registered shape rule of operator ``op`` gives for these
    arguments (bound as a call binds them; nothing runs), or None where it has no rule or its
    rule cannot know them."""

def array_kernel(kernel: Callable[..., Any], as_arrays: Callable[[Any], Any]) -> Callable[..., Any]:
    """The CPU kernel ``boxfall.array_api`` registers for ``kernel``: its result as
    ``as_arrays(result)`` gives it (NumPy arrays as they are)."""

@final
class NamespaceFunction:
    """A function of ``boxfall.array_api``: the calls its route takes go to an operator's
    overload directly, any other to the Python function it wraps (``__wrapped__``). The binary
    route (``add``, ``equal``, ...) takes two arrays, or an array and a plain Python scalar; the
    operator route (any other function that is one operator) takes a call with an array first
    and no dtype asked; the view route (``expand_dims``, ``matrix_transpose``) makes a view
    whose layout it knows (:func:`view_function`)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def __get__(self, instance: object, owner: type | None = None, /) -> Any: ...
    @property
    def __wrapped__(self) -> Callable[..., Any]: ...

def binary_function(
    both: Callable[..., Any],
    right: Callable[..., Any],
    left: Callable[..., Any],
    general: Callable[..., Any],
) -> NamespaceFunction:
    """A :class:`NamespaceFunction` of the binary route: the overloads ``both`` (two arrays),
    ``right`` (an array and a scalar) and ``left`` (a scalar and an array), ``general`` serving
    other calls."""

def operator_function(
    op: Callable[..., Any], general: Callable[..., Any], dtype_at: int | None = None
) -> NamespaceFunction:
    """A :class:`NamespaceFunction` of the operator route: ``op``, ``general`` serving other
    calls; ``dtype_at``: the position of its ``dtype`` parameter, if it has one."""

def view_function(general: Callable[..., Any]) -> NamespaceFunction:
    """A :class:`NamespaceFunction` of the view route, for ``general``, the namespace's
    ``expand_dims`` or ``matrix_transpose`` (by its ``__name__``; another name is a
    ``ValueError``): the view of a tensor whose layout it knows (it kept the layout of a view
    ``general`` made of a tensor of that dtype and shape, with that axis) is made without a
    Python frame; any other call goes to ``general``."""

def _make_view(
    base: Tensor,
    chain: tuple[Any, ...],
    layout: Any,
    origin: int,
    writable: bool,
) -> Tensor:
    """A view of ``base`` through the steps ``chain``, whose layout on the base's stand-in
    array (first element at ``origin``) is ``layout`` (``boxfall.array_api._views``)."""

def _view_info(t: Any) -> tuple[Tensor, tuple[Any, ...], Any, int, bool] | None:
    """``(base, chain, layout, origin, writable)`` of a view, else None."""
