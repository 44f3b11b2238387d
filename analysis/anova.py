"""Sequential (type I) sums of squares of factorial designs, for one response or many at once.

A design is a list of terms, each a block of treatment-coded columns (a factor's dummies, or the row-wise products
of several factors' dummies for an interaction). `nested_bases` fits the design once: an orthonormal basis of the
column space after each term (intercept first), with the term's degrees of freedom (the rank it adds).
`sequential_ss` then credits each term with the drop in residual sum of squares it brings, for a response of shape
(n,) or a stack of responses (..., n), e.g. one bootstrap resample a row: the projections are matrix products,
not one least-squares fit per term and resample.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd


def one_hot(values: pd.Series) -> np.ndarray:
    """Treatment-coded dummies (first level, sorted, dropped) of one factor: (n, levels - 1)."""
    levels = sorted(values.astype(str).unique())
    v = values.astype(str).to_numpy()
    if len(levels) < 2:
        return np.zeros((len(v), 0))
    return np.stack([(v == lvl).astype(float) for lvl in levels[1:]], axis=1)


def term_blocks(rows: pd.DataFrame, factors: list[str], max_order: int) -> list[tuple[tuple[str, ...], np.ndarray]]:
    """Every term of up to `max_order` factors, main effects first, each order in `factors`' order: (factors of the
    term, its columns). An interaction's columns are the row-wise products of its factors' dummies."""
    dummies = {f: one_hot(rows[f]) for f in factors}
    terms = []
    for order in range(1, max_order + 1):
        for combo in itertools.combinations(factors, order):
            block = np.ones((len(rows), 1))
            for f in combo:
                block = np.einsum("ni,nj->nij", block, dummies[f]).reshape(len(rows), -1)
            terms.append((combo, block))
    return terms


@dataclass(frozen=True)
class NestedBases:
    """Orthonormal bases of the nested designs: bases[0] the intercept's, bases[k] after term k; df[k - 1] the rank
    term k adds (0: aliased by the terms before it, or empty); df_residual = rows - the full design's rank."""

    bases: list[np.ndarray]
    df: list[int]
    df_residual: int


def _basis(x: np.ndarray) -> np.ndarray:
    """An orthonormal basis of x's column space (SVD, numpy's matrix_rank tolerance)."""
    u, s, _ = np.linalg.svd(x, full_matrices=False)
    tol = s.max(initial=0.0) * max(x.shape) * np.finfo(float).eps
    return u[:, s > tol]


def nested_bases(blocks: list[np.ndarray], n_rows: int) -> NestedBases:
    """The bases of the intercept, then intercept + blocks[0], then + blocks[1], ... (see NestedBases)."""
    x = np.ones((n_rows, 1))
    bases = [_basis(x)]
    for block in blocks:
        x = np.hstack([x, block])
        bases.append(_basis(x))
    ranks = [b.shape[1] for b in bases]
    return NestedBases(bases, [b - a for a, b in zip(ranks, ranks[1:])], n_rows - ranks[-1])


def sequential_ss(nested: NestedBases, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ss, rss, total) of y, shape (n,) or (..., n): ss[..., k] the sum of squares term k explains after the terms
    before it, rss the full design's residual, total the sum of squares about the mean (ss sum + rss = total)."""
    y = np.asarray(y, dtype=float)
    explained = np.stack([((y @ b) ** 2).sum(axis=-1) for b in nested.bases], axis=-1)
    ss = np.clip(np.diff(explained, axis=-1), 0.0, None)  # a rounding hair below 0 is 0
    sq = (y**2).sum(axis=-1)
    return ss, np.clip(sq - explained[..., -1], 0.0, None), np.clip(sq - explained[..., 0], 0.0, None)
