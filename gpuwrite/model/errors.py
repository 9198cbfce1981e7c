"""The one error the model raises for bad parameters."""
from __future__ import annotations

import math
import numbers


class ParamError(ValueError):
    """A model parameter is out of range: the message names the value and what is allowed.

    The CLI turns it into a ``UsageError``; library callers can catch ``ValueError``.
    """

    def __init__(self, name: str, value: object, allowed: str):
        self.name = name
        self.value = value
        self.allowed = allowed
        super().__init__(f"{name}={value!r} is not allowed; allowed: {allowed}")


def _kind(value) -> str:
    """What a choice is, as a TOML file writes it: a boolean, an integer, or else its type
    (``in`` alone takes ``1`` for ``True`` and ``4.0`` or ``True`` for ``4``)."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":     # numpy's too
        return "bool"
    if isinstance(value, numbers.Integral):
        return "int"
    return type(value).__name__


def _spelled(choice) -> str:
    """A choice as a TOML file spells it (true, not True)."""
    return str(choice).lower() if _kind(choice) == "bool" else str(choice)


def check_choice(name: str, value: object, allowed) -> None:
    """Raise ParamError unless ``value`` is one of ``allowed``, of the same kind: a
    boolean for a boolean, an integer for an integer (``ecrc = 1`` and ``generation =
    true`` were taken before)."""
    if not any(_kind(value) == _kind(choice) and value == choice for choice in allowed):
        raise ParamError(name, value, ", ".join(_spelled(a) for a in allowed))


# The smallest positive time, rate or size a parameter may take: every quotient the model
# forms from one (bytes / rate, 1 / interval) stays finite.
SMALLEST_POSITIVE = 1e-100


def check_positive(name: str, value: float, *, zero_ok: bool = False) -> None:
    """Raise ParamError unless ``value`` is a finite number > 0 (or >= 0 with ``zero_ok``),
    and not below SMALLEST_POSITIVE where it is not 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ParamError(name, value, "a finite number")
    if value < 0 or (value == 0 and not zero_ok):
        raise ParamError(name, value, "a number >= 0" if zero_ok else "a number > 0")
    if 0 < value < SMALLEST_POSITIVE:
        # A rate of 1e-320 passed as > 0, and bytes / rate overflowed to inf and then NaN.
        smallest = f"a number >= {SMALLEST_POSITIVE:g}"
        raise ParamError(name, value, f"{'0 or ' if zero_ok else ''}{smallest} (smaller leaves "
                                      "the model's times and rates no finite value)")
