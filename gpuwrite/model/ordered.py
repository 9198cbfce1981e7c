"""Sums that give the same doubles on every Python.

Python 3.12's ``sum()`` compensates the rounding of float additions (gh-100425); 3.10 and
3.11 add one value after another. The model's answers were the same expressions but other
last digits on each (1 to 42 rows of a stored table, up to 3e-15 relative, in session 48's
check on 3.12), so a table made on one Python was not the one another remade. Every float
sum of the model adds in order, as the stored tables were made (3.11's ``sum``). Numpy
arrays go through ``np.cumsum``, which adds in order too (``np.sum`` adds pairwise).
"""
from __future__ import annotations

import functools
import operator

import numpy as np


def sum_in_order(values):
    """0 + values[0] + values[1] + ..., one addition after another (ints stay ints)."""
    if isinstance(values, np.ndarray):
        return float(np.cumsum(values, dtype=np.float64)[-1]) if len(values) else 0.0
    return functools.reduce(operator.add, values, 0)
