"""``xp.fft``: the standard's ``fft`` extension (operators ``array_api::fft_<name>``, defined in
``_fft``). ``namespace(device).fft`` is a module of the same functions whose ``fftfreq`` and
``rfftfreq`` default to that device."""

from __future__ import annotations

from ._fft import *  # noqa: F403
from ._fft import __all__ as __all__
