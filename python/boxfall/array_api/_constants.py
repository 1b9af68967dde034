"""Constants (the standard's chapter of that name)."""

import math

e = math.e
inf = math.inf
nan = math.nan
newaxis = None
pi = math.pi

__all__ = ["e", "inf", "nan", "newaxis", "pi"]
