"""The task interface: problems, scores and the Task base class (the tasks themselves import it)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One problem: its text, its gold answer (math) or JSON tests spec (code), and a gold completion."""

    id: str
    question: str
    answer: str
    demonstration: str
    source: str
    # the gold completion with the task's typical mistake (a dropped carry; print for return), or ""
    # where the problem has none: the tiny model's warm start mixes it in as an imperfect teacher would
    flawed: str = ""


@dataclass(frozen=True)
class Score:
    """The outcome of scoring one completion."""

    score: float
    parsed: bool
    error: str | None


def default_workers() -> int:
    """The default pool size: the job's CPUs (SLURM_CPUS_PER_TASK where SLURM set it, else the CPUs this
    process may run on), so a job that asked for more CPUs scores with as many threads."""
    slurm = os.environ.get("SLURM_CPUS_PER_TASK", "")
    if slurm.isdigit() and int(slurm) > 0:
        return int(slurm)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity call on this platform
        return max(1, os.cpu_count() or 1)


class Task:
    """A task: extracts a final answer from a completion and scores it against a problem."""

    name: str = ""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = default_workers() if workers is None else max(1, int(workers))

    def extract_answer(self, text: str) -> str | None:
        """The final answer of a completion, or None when it has none."""
        raise NotImplementedError

    def score(self, problem: Problem, completion: str) -> Score:
        """Score one completion against one problem; never raises on bad completions."""
        raise NotImplementedError

    def score_batch(self, problems: list[Problem], completions: list[str]) -> list[Score]:
        """Score many completions in parallel (pool of `workers`), same results and order as score()."""
        if len(problems) != len(completions):
            raise ValueError(f"score_batch: {len(problems)} problems but {len(completions)} completions")
        if not problems:
            return []
        if self.workers == 1 or len(problems) == 1:
            return [self.score(p, c) for p, c in zip(problems, completions)]
        with ThreadPoolExecutor(max_workers=min(self.workers, len(problems))) as pool:
            return list(pool.map(self.score, problems, completions))

    def answers_agree(self, a: str | None, b: str | None) -> bool:
        """Whether two extracted answers are the same answer."""
        raise NotImplementedError

    def close(self) -> None:
        """Release helper processes, if any."""
