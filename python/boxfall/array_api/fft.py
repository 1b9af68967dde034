"""``xp.fft``: the standard's ``fft`` extension (operators ``array_api::fft_<name>``, defined
in ``_fft``). This module is the CPU namespace's; ``namespace(device).fft`` has the same
functions, except that its ``fftfreq`` and ``rfftfreq`` create on ``device`` by default."""

from __future__ import annotations

from ._fft import *  # noqa: F403
from ._fft import __all__ as __all__
