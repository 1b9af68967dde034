"""The exception and warning classes of boxfall (one tree, rooted at ``BoxfallError``).

The Rust bindings raise these classes; they are defined in Python so that each can derive from
the built-in exception a user would catch (``ValueError`` for a bad schema, ``TypeError`` for
wrong arguments, ``NotImplementedError`` for a missing kernel).
"""

from __future__ import annotations


class BoxfallError(Exception):
    """The base of every error boxfall raises itself."""


class SchemaError(BoxfallError, ValueError):
    """A schema that does not parse; the message shows the column and a caret."""


class RegistrationError(BoxfallError):
    """A definition, kernel, fallback, key or backend that cannot be registered."""


class UnknownOperatorError(BoxfallError, LookupError):
    """A name that is no defined operator; the message lists the closest names."""


class UnknownKeyError(BoxfallError, KeyError):
    """A name that is no dispatch key; the message lists the known keys."""

    def __str__(self) -> str:  # KeyError would show the repr of the message
        return str(self.args[0]) if self.args else ""


class NoKernelError(BoxfallError, NotImplementedError):
    """No kernel serves the call's backend."""


class ArgumentError(BoxfallError, TypeError):
    """Arguments that do not bind to the operator's schema; the message shows the schema."""


class FallbackError(BoxfallError, NotImplementedError):
    """The CPU fallback refused the call (policy, view operator, two devices) or a step failed."""


class DTypeError(BoxfallError, TypeError):
    """An element type a tensor cannot hold (``bf.native.tensor`` of float16, say); the message
    names the dtype and the supported ones."""


class PolicyError(BoxfallError, ValueError):
    """A fallback policy that is none of "allow", "warn" and "error" (any case is accepted)."""


class KernelError(BoxfallError, RuntimeError):
    """A Rust kernel reported an error."""


class DataDependentError(BoxfallError):
    """Raised by a shape rule (``lib.register_shape_rule``) for an output it cannot know without
    the values (``nonzero``'s length): graph mode then does not record the call, a counted
    graph break, and the call runs eagerly on the computed inputs."""


class FallbackWarning(UserWarning):
    """An operator fell back to the CPU (policy "warn"), once per (operator, backend)."""


class NarrowingWarning(UserWarning):
    """A backend registered with ``narrow=True`` gave a 64-bit dtype its device lacks as the
    32-bit one of its kind (JAX's rule without 64-bit types), once per (operator, backend)."""


__all__ = [
    "ArgumentError",
    "BoxfallError",
    "DTypeError",
    "DataDependentError",
    "FallbackError",
    "FallbackWarning",
    "KernelError",
    "NarrowingWarning",
    "NoKernelError",
    "PolicyError",
    "RegistrationError",
    "SchemaError",
    "UnknownKeyError",
    "UnknownOperatorError",
]


def _warn_fallback(message: str) -> None:
    """Issue a FallbackWarning attributed to the first frame outside the boxfall package, so
    the user sees the line of their own code that reached the fallback."""
    _warn(message, "FallbackWarning")


def _warn(message: str, category: str) -> None:
    """Issue a warning of the class ``category`` of this module attributed to the first frame
    outside the boxfall package, so the user sees the line of their own code that made it."""
    import os
    import sys
    import warnings
    from types import FrameType

    here = os.path.dirname(os.path.abspath(__file__))
    level = 2
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(here):
        frame = frame.f_back
        level += 1
    warnings.warn(message, globals()[category], stacklevel=level)
