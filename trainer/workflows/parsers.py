"""Reading a role's output: a verdict, a choice among solutions, a plan of subtasks.

Malformed outputs take a defined fallback and say so; they never raise.
"""

from __future__ import annotations

import re

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def parse_verdict(text: str) -> bool | None:
    """True for \\boxed{Correct}, False for \\boxed{Incorrect}, None when neither (the last wins)."""
    verdicts = [v.strip().lower() for v in _BOXED.findall(text) if v.strip().lower() in ("correct", "incorrect")]
    return None if not verdicts else verdicts[-1] == "correct"


def parse_choice(text: str, n: int) -> tuple[int, bool]:
    """The 0-based solution the aggregator picked and whether it was well formed.

    \\boxed{k} with 1 <= k <= n; else the first digit in range; else solution 1.
    """
    for value in reversed(_BOXED.findall(text)):
        if value.strip().isdigit() and 1 <= int(value.strip()) <= n:
            return int(value.strip()) - 1, True
    for digit in re.findall(r"\d", text):
        if 1 <= int(digit) <= n:
            return int(digit) - 1, False
    return 0, False


def parse_plan(text: str, max_subtasks: int) -> tuple[list[str], str]:
    """Subtasks from `SUBTASK k:` lines, else a numbered list, else non-empty lines; and which rule applied."""
    subtasks = re.findall(r"^\s*SUBTASK\s*\d+\s*:\s*(.+?)\s*$", text, flags=re.MULTILINE | re.IGNORECASE)
    how = "subtask"
    if not subtasks:
        subtasks, how = re.findall(r"^\s*\d+[.)]\s*(.+?)\s*$", text, flags=re.MULTILINE), "numbered"
    if not subtasks:
        subtasks, how = [line.strip() for line in text.splitlines() if line.strip()], "lines"
    return subtasks[:max_subtasks], how if subtasks else "empty"


def strip_verdict(text: str) -> str:
    """The evaluator's feedback without its boxed verdict."""
    return _BOXED.sub("", text).strip()
