"""`python -m trainer score --task math|code FILE.jsonl`: score completions, one JSON line each.

Input lines: {"problem_id" | "task_id": ..., "completion": ...}. Code ids name packaged problems
(HumanEval/N, or synthetic_functions/<split>/s<seed>/<index>); a code line may instead give its
tests spec under "tests". Math lines give the gold "answer" (and optionally a problem_id, echoed).
Output lines: {"problem_id" (null when the line gave none), "score", "parsed", "error"}, scored by Task.score_batch, the same
code path as training rewards.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any, TextIO

from trainer.tasks.base import Problem
from trainer.tasks.registry import get_task

_SYNTHETIC_ID = re.compile(r"synthetic_functions/(train|eval)/s(-?\d+)/(\d+)")


class InputError(ValueError):
    """A malformed input line; the message names the file and line."""


class _Catalog:
    """Packaged code problems by id, loaded on first use."""

    def __init__(self) -> None:
        self._human_eval: dict[str, Problem] | None = None

    def get(self, pid: str) -> Problem | None:
        m = _SYNTHETIC_ID.fullmatch(pid)
        if m:
            from trainer.tasks.synthetic import generate

            split, seed, index = m.group(1), int(m.group(2)), int(m.group(3))
            p = generate(index + 1, seed, split)[index]
            return Problem(source="synthetic_functions", **p)
        if self._human_eval is None:
            from trainer.tasks.sources import human_eval_problems

            self._human_eval = {p.id: p for p in human_eval_problems()}
        return self._human_eval.get(pid)


def read_requests(task: str, stream: TextIO, name: str) -> list[tuple[str | None, Problem, str]]:
    """(problem_id, problem, completion) per non-blank line; InputError naming FILE:LINE."""
    catalog = _Catalog()
    out = []
    for n, line in enumerate(stream, 1):
        if not line.strip():
            continue
        where = f"{name}:{n}"
        try:
            row: Any = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{where}: not valid JSON: {e}") from e
        if not isinstance(row, dict):
            raise InputError(f"{where}: expected a JSON object")
        completion = row.get("completion")
        if not isinstance(completion, str):
            raise InputError(f"{where}: needs a string 'completion'")
        pid = row.get("problem_id", row.get("task_id"))
        if pid is not None and not isinstance(pid, (str, int)):
            raise InputError(f"{where}: 'problem_id' must be a string")
        pid = None if pid is None else str(pid)
        if task == "math":
            if row.get("answer") is None:
                raise InputError(f"{where}: a math line needs the gold 'answer'")
            problem = Problem(pid or f"line{n}", "", str(row["answer"]), "", "cli")
        elif "tests" in row:
            tests = row["tests"] if isinstance(row["tests"], str) else json.dumps(row["tests"])
            problem = Problem(pid or f"line{n}", "", tests, "", "cli")
        else:
            if pid is None:
                raise InputError(f"{where}: a code line needs 'task_id'/'problem_id' or 'tests'")
            found = catalog.get(pid)
            if found is None:
                raise InputError(
                    f"{where}: unknown problem id {pid!r} (known: HumanEval/0..163, "
                    "synthetic_functions/<split>/s<seed>/<index>)"
                )
            problem = found
        out.append((pid, problem, completion))
    return out


def main(argv: list[str]) -> int:
    """Score a JSONL file of completions; 0 on success, 2 on bad input."""
    ap = argparse.ArgumentParser(prog="python -m trainer score", description=__doc__.splitlines()[0])
    ap.add_argument("--task", required=True, choices=["math", "code"])
    ap.add_argument("file", help="JSONL of completions ('-' for stdin)")
    ap.add_argument("--workers", type=int, default=None, help="scoring pool size (default: the job's CPUs)")
    ap.add_argument(
        "--allow-unisolated-sandbox",
        action="store_true",
        help="a RISK: run code programs unisolated where no sandbox isolation works (else refuse)",
    )
    args = ap.parse_args(argv)
    try:
        if args.file == "-":
            requests = read_requests(args.task, sys.stdin, "<stdin>")
        else:
            with open(args.file, encoding="utf-8") as f:
                requests = read_requests(args.task, f, args.file)
    except OSError as e:
        print(f"{args.file}: cannot read: {e.strerror or e}", file=sys.stderr)
        return 2
    except InputError as e:
        print(str(e), file=sys.stderr)
        return 2
    task = get_task(args.task, workers=args.workers, allow_unisolated_sandbox=args.allow_unisolated_sandbox)
    try:
        scores = task.score_batch([p for _, p, _ in requests], [c for _, _, c in requests])
    finally:
        task.close()
    for (pid, _, _), s in zip(requests, scores):
        sys.stdout.write(json.dumps({"problem_id": pid, "score": s.score, "parsed": s.parsed, "error": s.error}) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
