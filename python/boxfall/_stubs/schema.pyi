"""Operator schemas: ``FunctionSchema``, its arguments and alias annotations, the parser.

Part of the stubs of ``boxfall._boxfall`` (``_boxfall.pyi`` re-exports it)."""

from collections.abc import Sequence
from typing import final

@final
class AliasInfo:
    """An alias annotation: ``(a!)`` is ``AliasInfo(before=["a"], after=["a"], is_write=True)``."""

    def __new__(
        cls, before: Sequence[str], after: Sequence[str] | None = None, is_write: bool = False
    ) -> AliasInfo: ...
    @property
    def before(self) -> list[str]:
        """The alias sets before the arrow (``a`` of ``(a -> b)``), in written order."""
    @property
    def after(self) -> list[str]:
        """The alias sets after the arrow, in written order (``before`` when there is none)."""
    @property
    def is_write(self) -> bool:
        """Whether the annotation has ``!``: the operator writes the value."""

@final
class Argument:
    """One argument or return of a schema."""

    @property
    def name(self) -> str:
        """The name (``""`` for an unnamed return)."""
    @property
    def type(self) -> str:
        """The type as written, without the alias annotation (``"Tensor"`` for
        ``Tensor(a!)``)."""
    @property
    def default(self) -> str | None:
        """The default as written (``"1"``, ``"None"``, ``"[0,1]"``), or None."""
    @property
    def kwarg_only(self) -> bool:
        """Whether it comes after ``*``."""
    @property
    def alias(self) -> AliasInfo | None:
        """The alias annotation, or None."""
    @property
    def is_write(self) -> bool:
        """Whether the operator writes it (``(a!)``, also on a list's elements)."""

@final
class FunctionSchema:
    """A parsed operator schema; ``str()`` prints it as PyTorch does."""

    @property
    def name(self) -> str:
        """``ns::op`` (without the overload)."""
    @property
    def overload_name(self) -> str:
        """The overload name, ``""`` for the default overload."""
    @property
    def operator_name(self) -> str:
        """``ns::op`` or ``ns::op.overload``, as counters and errors name it."""
    @property
    def is_mutable(self) -> bool:
        """Whether some argument is written (``(a!)``)."""
    @property
    def is_vararg(self) -> bool:
        """Whether the arguments end in ``...``."""
    @property
    def is_varret(self) -> bool:
        """Whether the returns end in ``...``."""
    @property
    def arguments(self) -> list[Argument]:
        """The arguments."""
    @property
    def returns(self) -> list[Argument]:
        """The returns."""
    @property
    def tensor_arguments(self) -> list[int]:
        """Indices of the arguments that hold tensors (Tensor, Tensor?, Tensor[], Tensor?[])."""
    @property
    def written_arguments(self) -> list[int]:
        """Indices of the arguments the operator writes (``(a!)``, also on a list's
        elements)."""
    @property
    def return_aliases(self) -> list[int | None]:
        """For each return, the index of the argument it aliases, or None."""
    @property
    def has_view_returns(self) -> bool:
        """Whether some return is a view of an argument (``Tensor(a)``, not written)."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

def parse_schema(text: str) -> FunctionSchema:
    """Parses a schema (``"ns::op.overload(args) -> returns"``); a malformed one raises
    ``bf.SchemaError`` showing the column and a caret."""

def parse_schemas_count(texts: Sequence[str]) -> int:
    """Parses many schemas and returns how many parsed (for measuring parse speed without the
    cost of building Python objects)."""
