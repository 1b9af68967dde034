"""Dispatch keys: ``DispatchKeySet``, key names and bits, the thread-local key sets.

Part of the stubs of ``boxfall._boxfall`` (``_boxfall.pyi`` re-exports it)."""

from collections.abc import Sequence
from typing import Literal, TypeAlias, final

_KeyName: TypeAlias = (
    Literal["CPU", "Native", "CompositeImplicit", "CompositeImplicitAutograd", "cpu", "native"]
    | str
)
"""A dispatch key's name: a backend (``"CPU"``, ``"Native"``, a registered one such as
``"Accel"``), a functionality key, or ``"CompositeImplicit"`` (``"CompositeImplicitAutograd"``
is its PyTorch name). Any case is taken where it names one key (``"cpu"``, ``"accel"``); an
unknown name is an ``UnknownKeyError`` (a ``KeyError``) listing the known keys."""

@final
class DispatchKeySet:
    """The key set of a call, as a boxed kernel receives it; its highest key is the kernel's
    own."""

    def highest(self) -> str | None:
        """The highest key's name (None for an empty set)."""
    def without_highest(self) -> DispatchKeySet:
        """The set without its highest key."""
    def names(self) -> list[str]:
        """The keys' names, highest first."""
    def __contains__(self, name: str, /) -> bool:
        """Whether the set holds the key of that name (any case, as everywhere)."""
    def __len__(self) -> int:
        """How many keys the set holds."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

def register_functionality_key(name: str) -> str:
    """Registers a functionality key (above every backend key); returns its name."""

def key_bits(names: Sequence[_KeyName]) -> int:
    """The bits of the named keys (an unknown name raises KeyError listing the known keys)."""

def key_names() -> list[str]:
    """Every registered key's name, lowest priority first."""

def local_keys() -> tuple[int, int]:
    """This thread's (included, excluded) key bits."""

def set_local_keys(include: int, exclude: int) -> tuple[int, int]:
    """Sets this thread's included/excluded key bits; returns the previous ones."""
