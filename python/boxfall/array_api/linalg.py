"""``xp.linalg``: the standard's ``linalg`` extension (operators ``array_api::linalg_<name>``,
defined in ``_linalg``). The same module in every namespace: no function here creates an array
from nothing, so none needs a default device."""

from __future__ import annotations

from ._linalg import *  # noqa: F403
from ._linalg import __all__ as __all__
