"""The inspection API: ``__array_namespace_info__()``."""

from __future__ import annotations

from typing import Any

from . import _dtypes


class Info:
    """What a namespace supports: capabilities, devices, dtypes and the default ones."""

    __module__ = "boxfall.array_api"

    def __init__(self, default_device: str = "cpu") -> None:
        self._device = default_device

    def capabilities(self) -> dict[str, Any]:
        """Boolean-mask indexing (``array_api::getitem``/``setitem``) and the functions whose
        output shape depends on the data (``nonzero``, ``unique_*``, ``repeat`` with an array)
        work on every device; arrays have up to 64 dimensions, as NumPy's."""
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": 64}

    def default_device(self) -> str:
        """The device the namespace's creation functions use when given none."""
        return self._device

    def devices(self) -> list[str]:
        """The CPU and the namespace's own device."""
        return ["cpu"] if self._device == "cpu" else ["cpu", self._device]

    def default_dtypes(self, *, device: Any = None) -> dict[str, Any]:
        """The default dtypes on ``device`` (the namespace's by default): the standard's
        (float64, complex128, int64 for integers and indexing) where the device holds every
        dtype; on a device whose backend holds fewer (``register_backend(dtypes=)``), float32
        where it lacks float64, complex64 where it lacks complex128."""
        return dict(_dtypes.defaults_of(self._device if device is None else device))

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, Any]:
        """The dtypes of ``device`` (the namespace's by default), of ``kind`` if given: every
        dtype of the standard, unless the device's backend was registered with ``dtypes=``
        naming fewer. Only the standard's: an extension dtype a backend declares
        (``ml_dtypes.bfloat16``) works on its devices but is no dtype of the standard, so it
        is not listed (``bf.get_backend(name).dtypes`` lists it)."""
        from ._data_type_functions import isdtype

        held = _dtypes.held_by(self._device if device is None else device)
        found = {d.name: d for d in held if d in _dtypes.ALL}
        if kind is None:
            return found
        return {n: d for n, d in found.items() if isdtype(d, kind)}
