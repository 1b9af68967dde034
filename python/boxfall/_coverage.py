"""``bf.coverage(backend)``: what serves each operator on a backend, as data and as a table."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Literal, TypeAlias

from . import _boxfall
from ._boxfall import Backend

if TYPE_CHECKING:  # only for checkers: stubtest takes a Literal alias for a function
    _Source: TypeAlias = Literal[
        "kernel", "composite kernel", "backend fallback", "fallthrough", "missing"
    ]
    """What serves an operator on a key: its own kernel, its ``CompositeImplicit`` kernel,
    the key's backend fallback, a fallthrough (the key is skipped), or nothing (a call raises
    ``NoKernelError``)."""

# The table lists what needs work first: what is missing, then what the fallback serves.
_TABLE_ORDER: tuple[_Source, ...] = (
    "missing",
    "backend fallback",
    "fallthrough",
    "composite kernel",
    "kernel",
)
# The totals line reads from the best-served to the least.
_TOTALS_ORDER: tuple[_Source, ...] = (
    "kernel",
    "composite kernel",
    "backend fallback",
    "fallthrough",
    "missing",
)


_REASONS: dict[str, dict[str, dict[str, str]]] = {}
"""Per backend (its name as registered): per operator, why the backend's fallback serves it
(or the cases its kernel hands there), per device kind (``""``: every device)."""


def explain(backend: str, reasons: Mapping[str, str | Mapping[str, str]]) -> None:
    """Records why ``backend``'s fallback serves each operator of ``reasons`` (its full name,
    ``"array_api::nonzero"``): one text for every device, or one per device kind
    (``{"cpu": ..., "tpu": ...}``). :func:`coverage` shows it beside the operator
    (:meth:`Coverage.reason`); a later call replaces an operator's reason."""
    table = _REASONS.setdefault(backend, {})
    for name, why in reasons.items():
        table[name] = {"": why} if isinstance(why, str) else dict(why)


def _said(reason: Mapping[str, str]) -> str:
    if set(reason) == {""}:
        return reason[""]
    return "; ".join(f"{kind or 'every device'}: {why}" for kind, why in sorted(reason.items()))


class Coverage(Mapping[str, "_Source"]):
    """What serves each operator on one backend: ``{op name: source}``, sorted by name.

    A read-only mapping (``cov["demo::add.Tensor"]``, ``dict(cov)``, ``len(cov)``), with
    :meth:`totals`, :meth:`names` (the operators one source serves), :meth:`reason` (why the
    fallback serves one, as its backend said with ``bf.Coverage.explain``) and :meth:`table`;
    ``str(cov)`` is the table. It is a snapshot: registrations made later do not change it.
    """

    def __init__(
        self,
        backend: str,
        namespace: str | None,
        rows: list[tuple[str, str]],
        reasons: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self._backend = backend
        self._namespace = namespace
        self._rows: dict[str, _Source] = dict(rows)  # type: ignore[arg-type]
        self._reasons = {n: dict(r) for n, r in (reasons or {}).items() if n in self._rows}

    @property
    def backend(self) -> str:
        """The backend (or key) the coverage is of."""
        return self._backend

    @property
    def namespace(self) -> str | None:
        """The namespace it covers, or ``None`` for every namespace."""
        return self._namespace

    def __getitem__(self, name: str) -> _Source:
        return self._rows[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def totals(self) -> dict[_Source, int]:
        """How many operators each source serves (every source, zeros included)."""
        counts = dict.fromkeys(_TOTALS_ORDER, 0)
        for source in self._rows.values():
            counts[source] = counts.get(source, 0) + 1
        return counts

    def names(self, source: _Source) -> list[str]:
        """The operators that ``source`` serves, sorted (``cov.names("missing")``)."""
        if source not in _TOTALS_ORDER:
            raise ValueError(f"a source is one of {', '.join(map(repr, _TOTALS_ORDER))}")
        return [n for n, s in self._rows.items() if s == source]

    @staticmethod
    def explain(backend: str, reasons: Mapping[str, str | Mapping[str, str]]) -> None:
        """Records why ``backend``'s fallback serves each operator of ``reasons``: the module's
        :func:`explain` (one text for every device, or one per device kind)."""
        explain(backend, reasons)

    def reason(self, name: str) -> dict[str, str]:
        """Why the backend's fallback serves operator ``name`` (or the cases its kernel hands
        there), per device kind (``""``: every device), as the backend said it; ``{}`` where
        it said nothing."""
        if name not in self._rows:
            raise KeyError(name)
        return dict(self._reasons.get(name, {}))

    def table(self) -> str:
        """A table a person reads at a glance: one line per operator, grouped by what serves
        it (what is missing first, then what the backend fallback serves), and the totals."""
        scope = "every namespace" if self._namespace is None else f"namespace {self._namespace}"
        head = f"coverage of {self._backend} ({scope}): {len(self._rows)} operators"
        if not self._rows:
            return head
        width = max(len("operator"), *(len(n) for n in self._rows))
        lines = [head, "", f"{'operator':<{width}}  served by", f"{'-' * width}  {'-' * 16}"]
        for source in _TABLE_ORDER:
            for name in self.names(source):
                why = self._reasons.get(name)
                line = f"{name:<{width}}  {source}"
                lines.append(line if not why else f"{line:<{width + 18}}  {_said(why)}")
        lines.append("")
        totals = self.totals()
        lines.append(
            "totals: "
            + ", ".join(f"{source} {totals[source]}" for source in _TOTALS_ORDER)
            + f" (of {len(self._rows)})"
        )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        totals = ", ".join(f"{s!r}: {n}" for s, n in self.totals().items() if n)
        ns = "" if self._namespace is None else f", namespace={self._namespace!r}"
        return f"bf.Coverage({self._backend!r}{ns}; {totals or 'no operators'})"


def coverage(backend: str | Backend, namespace: str | None = None) -> Coverage:
    """What serves each defined operator (or those of ``namespace``) on ``backend``.

    ``backend`` is a backend's name in any case (``"Accel"``, ``"accel"``, ``"Native"``), any
    other key's name (``"CPU"``, a functionality key) or a :class:`Backend`. Each operator maps
    to ``"kernel"``, ``"composite kernel"``, ``"backend fallback"``, ``"fallthrough"`` or
    ``"missing"``::

        cov = bf.coverage("Accel", namespace="demo")
        cov["demo::add.Tensor"]      # 'kernel'
        cov.names("missing")         # what a call on Accel cannot run
        print(cov)                   # the table, with totals per source

    An unknown key is an :class:`UnknownKeyError` (a ``KeyError``) listing the known keys; a
    namespace without operators is an :class:`UnknownOperatorError` (a ``LookupError``)
    listing the namespaces that have some.
    """
    name = backend.name if isinstance(backend, Backend) else backend
    if not isinstance(name, str):
        raise TypeError(
            f"a backend is a name such as 'Accel' or a bf.Backend, not {type(backend).__name__}"
        )
    key, rows = _boxfall.coverage(name, namespace)  # key: as registered ("accel" -> Accel)
    return Coverage(key, namespace, rows, _REASONS.get(key))
