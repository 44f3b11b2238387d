"""The programs the sandbox runs around a candidate: `in_process.py` and `split.py`.

They are real modules (read, linted and tested like any other) but the sandbox never imports
them: it reads each one's text with `importlib.resources` and runs it as `python -I -S -c TEXT`
under the job's own interpreter, so they use the standard library only. Listed as package data in
pyproject.toml so an installed (non-editable) copy carries them.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

RUNNERS = ("in_process", "split")


@cache
def runner_source(name: str) -> str:
    """The source text of the runner `name` (one of RUNNERS)."""
    if name not in RUNNERS:
        raise ValueError(f"unknown sandbox runner {name!r}; one of {', '.join(RUNNERS)}")
    return resources.files(__package__).joinpath(f"{name}.py").read_text(encoding="utf-8")
