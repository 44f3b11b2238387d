"""A run's randomness from its seed: the global generators, a seed per step, each epoch's data order.

Everything a step draws derives from (run seed, step), so a resumed run draws what an
uninterrupted one would (tests/test_resume.py compares their logs exactly).
"""

from __future__ import annotations

import random
from functools import lru_cache

import torch


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU runs are then deterministic)."""
    import numpy as np

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def step_seed(seed: int, step: int, salt: int = 0) -> int:
    """A seed per (run seed, step): a resumed run draws what an uninterrupted one would."""
    return (seed * 1_000_003 + step * 7_919 + salt) % 2**31


@lru_cache(maxsize=4)
def epoch_order(seed: int, epoch: int, n: int) -> tuple[int, ...]:
    """The order of `n` train problems in `epoch`: a seeded permutation (cached: every prompt of
    a step reads it, and a shuffle of thousands of indices per prompt is a visible share of a tiny step)."""
    order = list(range(n))
    random.Random(step_seed(seed, epoch, salt=1)).shuffle(order)
    return tuple(order)
