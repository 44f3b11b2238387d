"""Offline code problems: small seeded function-synthesis tasks with hidden unit tests.

The universe is a fixed, enumerated family of templates x constants (5,861 problem texts).
Each text belongs to exactly one partition, train or eval, by a hash of the text
(`partition_of`), so the train and eval splits are disjoint by construction whatever their
seeds; the seed only orders (and, past the partition's size, repeats) the problems drawn.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from typing import Any

EVAL_FRACTION = 0.2  # share of the universe reserved for eval splits

INTS = [0, 1, 2, 7, -3, 12, 100]
PAIRS = [(0, 0), (1, 2), (5, -3), (-4, -9), (10, 10), (7, 100)]
STRS = ["", "a", "hello", "Abc", "xyz zy"]
LISTS = [[], [1], [1, 2, 3], [5, -2, 7, 0], [10, 10, 3, -1, 8]]
WORDS = ["ab", "cat", "dog", "end", "go", "hi", "ok", "red", "sun", "top", "up", "yes", "zip", "box", "fox", "key"]

# (question text after "Write a Python function ", solution body expression, argument names, inputs)
Template = tuple[str, str, str, list]


def _templates() -> list[Template]:
    """Every (text, expression, signature, inputs) of the universe, in a fixed order."""
    out: list[Template] = []
    for c in range(1, 2000):
        out.append((f"f(x) that returns x plus {c}.", f"x + {c}", "x", INTS))
        out.append((f"f(x) that returns x minus {c}.", f"x - {c}", "x", INTS))
    for c in range(2, 100):
        out.append((f"f(x) that returns x times {c}.", f"x * {c}", "x", INTS))
        out.append((f"f(x) that returns x modulo {c}.", f"x % {c}", "x", INTS))
        out.append((f"f(x) that returns x integer-divided by {c}.", f"x // {c}", "x", INTS))
        out.append((f"f(x) that returns True if x is divisible by {c}, else False.", f"x % {c} == 0", "x", INTS))
    for a in range(2, 10):
        for b in range(1, 100):
            out.append((f"f(x) that returns {a} times x plus {b}.", f"{a} * x + {b}", "x", INTS))
    for c in range(-99, 100):
        out.append((f"f(x) that returns the larger of x and {c}.", f"max(x, {c})", "x", INTS))
        out.append((f"f(x) that returns the smaller of x and {c}.", f"min(x, {c})", "x", INTS))
        out.append((f"f(x) that returns True if x is greater than {c}, else False.", f"x > {c}", "x", INTS))
    for c in range(2, 10):
        out.append((f"f(s) that returns the string s repeated {c} times.", f"s * {c}", "s", STRS))
        out.append((f"f(x) that returns x to the power {c}.", f"x ** {c}", "x", INTS))
        out.append((f"f(xs) that returns the first {c} elements of the list xs.", f"xs[:{c}]", "xs", LISTS))
        out.append((f"f(xs) that returns the sum of the list xs plus {c}.", f"sum(xs) + {c}", "xs", LISTS))
    for w in WORDS:
        out.append((f"f(s) that returns the string s followed by '{w}'.", f"s + '{w}'", "s", STRS))
        out.append((f"f(s) that returns the string '{w}' followed by s.", f"'{w}' + s", "s", STRS))
    out += [
        ("f(a, b) that returns the larger of a and b.", "max(a, b)", "a, b", PAIRS),
        ("f(a, b) that returns the smaller of a and b.", "min(a, b)", "a, b", PAIRS),
        ("f(a, b) that returns a plus b.", "a + b", "a, b", PAIRS),
        ("f(a, b) that returns a minus b.", "a - b", "a, b", PAIRS),
        ("f(a, b) that returns a times b.", "a * b", "a, b", PAIRS),
        ("f(s) that returns the string s reversed.", "s[::-1]", "s", STRS),
        ("f(s) that returns the string s in upper case.", "s.upper()", "s", STRS),
        ("f(s) that returns the string s in lower case.", "s.lower()", "s", STRS),
        ("f(s) that returns the length of the string s.", "len(s)", "s", STRS),
        ("f(xs) that returns the sum of the list xs.", "sum(xs)", "xs", LISTS),
        ("f(xs) that returns the length of the list xs.", "len(xs)", "xs", LISTS),
        ("f(xs) that returns the list xs reversed.", "xs[::-1]", "xs", LISTS),
        ("f(xs) that returns the list xs sorted.", "sorted(xs)", "xs", LISTS),
        ("f(x) that returns True if x is even, else False.", "x % 2 == 0", "x", INTS),
        ("f(x) that returns True if x is odd, else False.", "x % 2 == 1", "x", INTS),
        ("f(x) that returns the absolute value of x.", "abs(x)", "x", INTS),
        ("f(x) that returns x squared.", "x * x", "x", INTS),
        ("f(x) that returns the negation of x.", "-x", "x", INTS),
    ]
    return out


def partition_of(text: str, eval_fraction: float = EVAL_FRACTION, salt: str = "synthetic_functions") -> str:
    """ "eval" or "train": a fixed hash partition of problem texts."""
    h = int.from_bytes(hashlib.sha256(f"{salt}:{text}".encode()).digest()[:8], "big")
    return "eval" if h / 2**64 < eval_fraction else "train"


def _solution(expr: str, sig: str) -> str:
    return f"def f({sig}):\n    return {expr}\n"


def _tests(expr: str, sig: str, inputs: list) -> str:
    """Assert lines computed by running the gold solution (trusted) on the inputs."""
    fn: Callable[..., Any] = eval(f"lambda {sig}: {expr}")  # noqa: S307 - our own templates
    lines = []
    for x in inputs:
        args = x if sig.count(",") else (x,)
        call = ", ".join(repr(a) for a in args)
        lines.append(f"assert f({call}) == {fn(*args)!r}")
    return "\n".join(lines) + "\n"


def generate(size: int, seed: int, split: str) -> list[dict[str, str]]:
    """`size` problems of the split's partition, ordered by `seed` (cycling when size exceeds it)."""
    if split not in ("train", "eval"):
        raise ValueError(f"synthetic_functions: split must be 'train' or 'eval', got {split!r}")
    pool = [t for t in _templates() if partition_of("Write a Python function " + t[0]) == split]
    rng = random.Random(f"synthetic_functions:{split}:{seed}")
    order: list[Template] = []
    while len(order) < size:
        batch = list(pool)
        rng.shuffle(batch)
        order.extend(batch)
    problems = []
    for i, (text, expr, sig, inputs) in enumerate(order[:size]):
        solution = _solution(expr, sig)
        problems.append(
            {
                "id": f"synthetic_functions/{split}/s{seed}/{i}",
                "question": "Write a Python function " + text,
                "answer": json.dumps({"kind": "assert", "code": _tests(expr, sig, inputs), "entry_points": ["f"]}),
                "demonstration": f"```python\n{solution}```",
                # the beginner's mistake: the value printed, not returned (the tests see None)
                "flawed": f"```python\n{solution.replace('return ' + expr, f'print({expr})')}```",
            }
        )
    return problems


def universe_size() -> int:
    """How many distinct problem texts there are."""
    return len(_templates())
