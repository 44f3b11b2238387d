"""The run id: `{workflow}-{task}-{scale}-{policy}-s{seed}[-{variant}]`, the one place that formats and parses it."""

from __future__ import annotations

import re
from dataclasses import dataclass

TASKS = ("math", "code")
POLICIES = ("shared", "isolated")
# A workflow name has no dash (the config's `workflows` keys; rules/config.schema.yaml repeats this
# pattern, a test checks they agree), so the id needs no list of workflows: the workflow runs to the
# first dash. A scale may contain dashes (qwen3-0.6b), so it is anchored on the names around it.
WORKFLOW_NAME = r"[a-z][a-z0-9_]*"
# A variant (a named config delta of a matrix, `matrices.<m>.variants`) has no dash either: it ends the id.
VARIANT_NAME = r"[a-z][a-z0-9_]*"

_RUN_ID = re.compile(
    rf"^(?P<workflow>{WORKFLOW_NAME})-(?P<task>{'|'.join(TASKS)})-"
    rf"(?P<scale>[a-z0-9][a-z0-9.]*(?:-[a-z0-9.]+)*)-(?P<policy>{'|'.join(POLICIES)})-s(?P<seed>\d+)"
    rf"(?:-(?P<variant>{VARIANT_NAME}))?$"
)
RUN_ID_PATTERN = re.sub(r"\(\?P<\w+>", "(?:", _RUN_ID.pattern[1:-1])  # for Snakemake's wildcard_constraints


@dataclass(frozen=True)
class RunId:
    """One cell of the matrix, its seed and, for a run of a named config delta, its variant."""

    workflow: str
    task: str
    scale: str
    policy: str
    seed: int
    variant: str | None = None  # None: the matrix's plain run (today's id, directory and config hash)

    def __str__(self) -> str:
        suffix = f"-{self.variant}" if self.variant else ""
        return f"{self.workflow}-{self.task}-{self.scale}-{self.policy}-s{self.seed}{suffix}"

    def __lt__(self, other: RunId) -> bool:  # a plain run sorts before its variants ("" < any name)
        return self.sort_key() < other.sort_key()

    def sort_key(self) -> tuple[str, str, str, str, int, str]:
        """The fields in order, a missing variant as ""."""
        return (self.workflow, self.task, self.scale, self.policy, self.seed, self.variant or "")

    @property
    def cell(self) -> str:
        """The run id without its seed: what seeds are aggregated over (a variant is a cell of its own)."""
        suffix = f"-{self.variant}" if self.variant else ""
        return f"{self.workflow}-{self.task}-{self.scale}-{self.policy}{suffix}"

    def axes(self) -> dict[str, str | int]:
        """The run's values by axis name; `variant` only where the run has one, so that a plain run's
        resolved config (which spreads these) holds no `variant` key, and its hash does not depend on the axis."""
        axes: dict[str, str | int] = {
            "workflow": self.workflow,
            "task": self.task,
            "scale": self.scale,
            "policy": self.policy,
            "seed": self.seed,
        }
        if self.variant:
            axes["variant"] = self.variant
        return axes


def parse_run_id(text: str) -> RunId:
    """Parse a run id; raise ValueError naming the id and the expected format.

    Any workflow or variant name parses: whether the config defines it is checked against the config
    (trainer.sweep.config), not here.
    """
    m = _RUN_ID.match(text)
    if m is None:
        raise ValueError(
            f"bad run id {text!r}: expected {{workflow}}-{{task}}-{{scale}}-{{policy}}-s{{seed}}[-{{variant}}] with "
            f"workflow and variant names matching {WORKFLOW_NAME} (no dash), task in {TASKS}, policy in {POLICIES}, "
            f"e.g. voting-math-qwen3-0.6b-shared-s0 or voting-math-qwen3-0.6b-shared-s0-n5"
        )
    d = m.groupdict()
    return RunId(d["workflow"], d["task"], d["scale"], d["policy"], int(d["seed"]), d["variant"])
