"""The code task: the last fenced Python block, run against the problem's tests in the sandbox.

Problem.answer is a JSON tests spec in one of two forms:
  {"kind": "assert", "code": "<tests raising on failure>",
   "prelude": "<optional code run first, e.g. the HumanEval prompt>",
   "entry_points": ["<names the tests call>"]}   # optional; with it the tests run in their
                                                 # own process, calling the program by proxy
  {"kind": "stdio", "cases": [{"input": "...", "output": "..."}], "fn_name": null}
(functional tests with a function name are converted to the assert form by the sources).
"""

from __future__ import annotations

import json
import re
from typing import Any

from trainer.tasks.base import Problem, Score, Task
from trainer.tasks.sandbox import Limits, Sandbox, Verdict
from trainer.tasks.sandbox_helper import HelperSandbox

_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_OPEN_FENCE = re.compile(r"```[ \t]*(?:python3?|py)[ \t]*\n", re.IGNORECASE)
MAX_CODE_CHARS = 100_000


def extract_code(text: str) -> str | None:
    """The last fenced ```python block (or an unclosed final one), else the whole text; None if blank."""
    if not text or not text.strip():
        return None
    blocks = _FENCE.findall(text)
    if blocks:
        return blocks[-1].strip("\n")
    opens = list(_OPEN_FENCE.finditer(text))
    if opens:
        return text[opens[-1].end() :].strip("\n")
    return text.strip("\n")


def normalize_code(code: str | None) -> str | None:
    """Code text with trailing spaces, blank lines and comment-only lines removed (for agreement)."""
    if code is None:
        return None
    lines = [line.rstrip() for line in code.strip().splitlines()]
    return "\n".join(line for line in lines if line.strip() and not line.strip().startswith("#"))


MAX_CACHED_VERDICTS = 200_000
# the runner's "tests: AssertionError:" or "tests: CandidateError: ZeroDivisionError: ..."
_PYTHON_ERROR = re.compile(r"^(tests: )?(CandidateError: )?(?!MemoryError)\w+(Error|Exception|Exit)\b")


def deterministic(verdict: Verdict) -> bool:
    """Whether a verdict would repeat on a rerun: a pass or a Python exception, not a timeout,
    a signal or a resource limit (those depend on the machine's load)."""
    return verdict.passed or bool(verdict.error and _PYTHON_ERROR.match(verdict.error))


def parse_spec(answer: str) -> dict[str, Any]:
    """The tests spec of a code problem; ValueError naming the problem when malformed."""
    spec = json.loads(answer)
    kind = spec.get("kind") if isinstance(spec, dict) else None
    if kind == "assert" and isinstance(spec.get("code"), str):
        return spec
    if kind == "stdio" and isinstance(spec.get("cases"), list):
        return spec
    raise ValueError(
        f"tests spec: expected kind 'assert' with 'code' or 'stdio' with 'cases', got {str(answer)[:200]!r}"
    )


class CodeTask(Task):
    """Code: reward 1 when the extracted program passes every test of the problem in the sandbox."""

    name = "code"

    def __init__(
        self,
        workers: int | None = None,
        limits: Limits | None = None,
        sandbox: Sandbox | None = None,
        allow_unisolated_sandbox: bool = False,
    ) -> None:
        super().__init__(workers)
        # executions start from a small helper process, not a fork of the trainer (sandbox_helper.py);
        # it raises SandboxUnavailable here, before any scoring, where nothing isolates the programs
        self.sandbox: Sandbox | HelperSandbox = sandbox or HelperSandbox(limits, allow_unisolated_sandbox)
        # (tests spec, program) -> verdict: RL samples the same program for a problem again and
        # again, and every eval re-scores the same problems; a lookup costs nothing beside a sandbox run.
        self._verdicts: dict[tuple[str, str], Verdict] = {}
        self.sandbox_runs = 0

    def extract_answer(self, text: str) -> str | None:
        """The program of a completion (see extract_code)."""
        return extract_code(text)

    def score(self, problem: Problem, completion: str) -> Score:
        """1.0 when every test passes, else 0.0 with the first failure."""
        code = self.extract_answer(completion or "")
        if code is None:
            return Score(0.0, False, "empty completion")
        if len(code) > MAX_CODE_CHARS:
            return Score(0.0, True, f"program longer than {MAX_CODE_CHARS} characters")
        try:
            spec = parse_spec(problem.answer)
        except (ValueError, TypeError) as e:
            return Score(0.0, True, f"problem {problem.id}: bad tests spec: {e}")
        key = (problem.answer, code)
        verdict = self._verdicts.get(key)
        if verdict is None:
            try:
                self.sandbox_runs += 1
                if spec["kind"] == "assert":
                    verdict = self.sandbox.run_assert(
                        code, spec["code"], spec.get("prelude") or "", spec.get("entry_points")
                    )
                else:
                    verdict = self.sandbox.run_stdio(code, spec["cases"])
            except Exception as e:  # noqa: BLE001 - a sandbox failure scores 0, never raises
                return Score(0.0, True, f"sandbox error: {type(e).__name__}: {e}")
            if deterministic(verdict):
                if len(self._verdicts) >= MAX_CACHED_VERDICTS:
                    self._verdicts.clear()
                self._verdicts[key] = verdict
        return Score(1.0, True, None) if verdict.passed else Score(0.0, True, verdict.error)

    def close(self) -> None:
        """End the sandbox helper processes, if any."""
        if isinstance(self.sandbox, HelperSandbox):
            self.sandbox.close()

    def answers_agree(self, a: str | None, b: str | None) -> bool:
        """Whether two programs are the same text after normalisation."""
        na, nb = normalize_code(a), normalize_code(b)
        return bool(na) and na == nb
