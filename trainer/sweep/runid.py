"""The run id: `{workflow}-{task}-{scale}-{policy}-s{seed}`, the one place that formats and parses it."""

from __future__ import annotations

import re
from dataclasses import dataclass

TASKS = ("math", "code")
POLICIES = ("shared", "isolated")
# A workflow name has no dash (the config's `workflows` keys; rules/config.schema.yaml repeats this
# pattern, a test checks they agree), so the id needs no list of workflows: the workflow runs to the
# first dash. A scale may contain dashes (qwen3-0.6b), so it is anchored on the names around it.
WORKFLOW_NAME = r"[a-z][a-z0-9_]*"

_RUN_ID = re.compile(
    rf"^(?P<workflow>{WORKFLOW_NAME})-(?P<task>{'|'.join(TASKS)})-"
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
    """Parse a run id; raise ValueError naming the id and the expected format.

    Any workflow name parses: whether the config defines it is checked against the config
    (trainer.sweep.config), not here.
    """
    m = _RUN_ID.match(text)
    if m is None:
        raise ValueError(
            f"bad run id {text!r}: expected {{workflow}}-{{task}}-{{scale}}-{{policy}}-s{{seed}} with a workflow "
            f"name matching {WORKFLOW_NAME} (no dash), task in {TASKS}, policy in {POLICIES}, "
            f"e.g. voting-math-qwen3-0.6b-shared-s0"
        )
    d = m.groupdict()
    return RunId(d["workflow"], d["task"], d["scale"], d["policy"], int(d["seed"]))
