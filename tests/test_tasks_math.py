"""Math scoring: boxed-answer extraction, math-verify equivalence, robustness, threads."""

from __future__ import annotations

import json
import threading

import pytest

from trainer.tasks import Problem, Score, get_task
from trainer.tasks.math_task import MathTask, as_int, extract_boxed


@pytest.fixture(scope="module")
def math_task():
    task = get_task("math", workers=2)
    yield task
    task.close()


def problem(answer: str) -> Problem:
    return Problem("t/0", "q", answer, f"\\boxed{{{answer}}}", "test")


EQUIVALENT = [
    ("0.5", "\\boxed{1/2}"),
    ("0.5", "\\boxed{\\frac{1}{2}}"),
    ("\\frac{1}{2}", "\\boxed{0.5}"),
    ("\\frac12", "\\boxed{\\dfrac{1}{2}}"),
    ("2", "\\boxed{2.0}"),
    ("3", "so \\boxed{x=3}"),
    ("3", "\\boxed{x = 3}"),
    ("7", "\\boxed{007}"),
    ("-4", "\\boxed{-4}"),
    ("1000", "\\boxed{1,000}"),
    ("4", "\\boxed{2+2}"),
    ("\\sqrt{2}", "\\boxed{2^{1/2}}"),
    ("0.5", "\\boxed{50\\%}"),
    ("(1,2)", "\\boxed{(1, 2)}"),
    ("5", "\\boxed{\\text{5}}"),
    ("12", "first \\boxed{3}, then \\boxed{12}"),
]

NEAR_MISSES = [
    ("2", "\\boxed{3}"),
    ("0.5", "\\boxed{0.51}"),
    ("3", "\\boxed{3.000001}"),
    ("-4", "\\boxed{4}"),
    ("\\frac{1}{2}", "\\boxed{\\frac{1}{3}}"),
    ("12", "\\boxed{12} then \\boxed{13}"),
    ("2", "\\boxed{hello}"),
    ("(1,2)", "\\boxed{(1, 3)}"),
]


@pytest.mark.parametrize("gold,completion", EQUIVALENT)
def test_equivalent_forms_score_one(math_task, gold, completion):
    assert math_task.score(problem(gold), completion) == Score(1.0, True, None)


@pytest.mark.parametrize("gold,completion", NEAR_MISSES)
def test_near_misses_score_zero(math_task, gold, completion):
    s = math_task.score(problem(gold), completion)
    assert s.score == 0.0 and s.error


@pytest.mark.parametrize(
    "completion",
    [
        "",
        "   ",
        "the answer is 5",
        "\\boxed{",
        "\\boxed{}",
        "\\boxed{\\frac{",
        "\\boxed{)(*&^%$#@!}",
        "\\boxed{" + "1+" * 5000 + "1}",
        "\\boxed{\\begin{matrix}}",
        "\x00\x01\\boxed{\ud800}",
    ],
)
def test_unparseable_output_scores_zero_without_raising(math_task, completion):
    s = math_task.score(problem("5"), completion)
    assert s.score == 0.0 and s.error


def test_unparseable_boxed_content_is_not_parsed(math_task):
    assert math_task.score(problem("5"), "no box").parsed is False
    assert math_task.score(problem("5"), "\\boxed{}").parsed is False
    assert math_task.score(problem("5"), "\\boxed{\\frac{").parsed is False


def test_extract_boxed():
    assert extract_boxed("a \\boxed{1} b \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert extract_boxed("\\boxed{a{b}c}") == "a{b}c"
    assert extract_boxed("\\boxed {7}") == "7"
    assert extract_boxed("\\boxed{\\boxed{2} + 1}") == "\\boxed{2} + 1"  # the last top-level box
    assert extract_boxed("\\boxed{3} and a cut-off \\boxed{4") == "3"
    assert extract_boxed("nothing") is None
    assert extract_boxed("") is None


def test_integer_fast_path_agrees_with_math_verify():
    slow = MathTask(workers=1)
    try:
        for gold, pred in [("3", "3"), ("3", "4"), ("007", "7"), ("-0", "0"), ("-12", "12"), ("10", "010")]:
            assert as_int(gold) is not None and as_int(pred) is not None
            fast = slow.score_answer(gold, f"\\boxed{{{pred}}}").score
            reply = slow.pool.call({"op": "verify", "gold": gold, "pred": pred})
            assert fast == (1.0 if reply["ok"] else 0.0), (gold, pred)
    finally:
        slow.close()


def test_score_from_other_threads(math_task):
    results: list[Score] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.append(math_task.score(problem("0.5"), "\\boxed{\\frac{1}{2}}"))
            results.append(math_task.score(problem("3"), "\\boxed{3}"))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 8 and all(r.score == 1.0 for r in results)


def test_score_batch_matches_score(math_task):
    golds = [g for g, _ in EQUIVALENT + NEAR_MISSES] * 2
    comps = [c for _, c in EQUIVALENT + NEAR_MISSES] * 2
    probs = [problem(g) for g in golds]
    assert math_task.score_batch(probs, comps) == [math_task.score(p, c) for p, c in zip(probs, comps)]
    with pytest.raises(ValueError):
        math_task.score_batch(probs, comps[:-1])


def test_verification_timeout_kills_worker_and_recovers():
    task = MathTask(workers=1, timeout_s=0.001)
    try:
        s = task.score(problem("\\frac{1}{2}"), "\\boxed{\\sqrt{\\frac{2}{8}}}")
        assert s.score == 0.0 and "timed out" in s.error
        task.pool.timeout_s = 30
        assert task.score(problem("\\frac{1}{2}"), "\\boxed{0.5}").score == 1.0
    finally:
        task.close()


def test_answers_agree(math_task):
    assert math_task.answers_agree("1/2", "\\frac{1}{2}")
    assert math_task.answers_agree("3", "3")
    assert math_task.answers_agree("0.5", "1/2")
    assert not math_task.answers_agree("3", "4")
    assert not math_task.answers_agree(None, "3")
    assert not math_task.answers_agree(None, None)
    assert not math_task.answers_agree("", "")


def test_demonstrations_of_offline_source_score_one(math_task):
    from trainer.tasks import load_problems

    spec = {
        "source": "reasoning_gym",
        "dataset": "basic_arithmetic",
        "size": 50,
        "seed": 2,
        "params": {
            "min_terms": 2,
            "max_terms": 2,
            "min_digits": 1,
            "max_digits": 2,
            "operators": ["+", "-"],
            "allow_parentheses": False,
            "allow_negation": False,
        },
    }
    probs = load_problems("math", spec, "eval")
    scores = math_task.score_batch(probs, [p.demonstration for p in probs])
    assert all(s.score == 1.0 for s in scores)
    assert all(len(p.demonstration) <= 24 for p in probs)


def test_score_cli_for_math(tmp_path, capsys):
    from trainer.tasks.cli import main

    f = tmp_path / "m.jsonl"
    f.write_text(
        '{"answer": "1/2", "completion": "\\\\boxed{0.5}"}\n\n'
        '{"problem_id": "p", "answer": 3, "completion": "no box"}\n'
    )
    assert main(["--task", "math", str(f)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows == [
        {"problem_id": None, "score": 1.0, "parsed": True, "error": None},
        {"problem_id": "p", "score": 0.0, "parsed": False, "error": "no \\boxed{} answer"},
    ]
    f.write_text('{"completion": "\\\\boxed{1}"}\n')
    assert main(["--task", "math", str(f)]) == 2
    assert "m.jsonl:1: a math line needs the gold 'answer'" in capsys.readouterr().err
