"""The run id: `{workflow}-{task}-{scale}-{policy}-s{seed}`, the one place that formats and parses it."""

from __future__ import annotations

import re
from dataclasses import dataclass

WORKFLOWS = ("single", "eval_opt", "voting", "orch_workers")
TASKS = ("math", "code")
POLICIES = ("shared", "isolated")

# A scale may contain dashes (qwen3-0.6b), so the id is anchored on the known names around it.
_RUN_ID = re.compile(
    rf"^(?P<workflow>{'|'.join(WORKFLOWS)})-(?P<task>{'|'.join(TASKS)})-"
    rf"(?P<scale>[a-z0-9][a-z0-9.]*(?:-[a-z0-9.]+)*)-(?P<policy>{'|'.join(POLICIES)})-s(?P<seed>\d+)$"
)
RUN_ID_PATTERN = re.sub(r"\(\?P<\w+>", "(?:", _RUN_ID.pattern[1:-1])  # for Snakemake's wildcard_constraints


@dataclass(frozen=True, order=True)
class RunId:
    """One cell of the matrix and its seed."""

    workflow: str
    task: str
    scale: str
    policy: str
    seed: int

    def __str__(self) -> str:
        return f"{self.workflow}-{self.task}-{self.scale}-{self.policy}-s{self.seed}"

    @property
    def cell(self) -> str:
        """The run id without its seed: what seeds are aggregated over."""
        return f"{self.workflow}-{self.task}-{self.scale}-{self.policy}"

    def axes(self) -> dict[str, str | int]:
        """The run's values by axis name."""
        return {"workflow": self.workflow, "task": self.task, "scale": self.scale,
                "policy": self.policy, "seed": self.seed}


def parse_run_id(text: str) -> RunId:
    """Parse a run id; raise ValueError naming the id and the expected format."""
    m = _RUN_ID.match(text)
    if m is None:
        raise ValueError(
            f"bad run id {text!r}: expected {{workflow}}-{{task}}-{{scale}}-{{policy}}-s{{seed}} with workflow in "
            f"{WORKFLOWS}, task in {TASKS}, policy in {POLICIES}, e.g. voting-math-qwen3-0.6b-shared-s0"
        )
    d = m.groupdict()
    return RunId(d["workflow"], d["task"], d["scale"], d["policy"], int(d["seed"]))
