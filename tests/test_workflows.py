"""Workflows with a scripted fake policy: turn structure, prompts, fallbacks, final answers."""

from __future__ import annotations

import pytest

from trainer.sweep.cost import run_turns
from trainer.tasks import Problem, get_task
from trainer.workflows import Completion, make_workflow, parse_choice, parse_plan, parse_verdict, score_episodes

PROBLEMS = [
    Problem(
        id=f"p{i}",
        question=f"Calculate {i} + 1.",
        answer=str(i + 1),
        demonstration=f"{i} + 1 = \\boxed{{{i + 1}}}",
        source="test",
    )
    for i in range(3)
]


class Scripted:
    """A fake policy: answers each role with a function of the prompt; counts generate calls."""

    def __init__(self, **replies):
        self.replies, self.calls, self.seen = replies, [], []

    def __call__(self, role, prompts):
        self.calls.append((role, len(prompts)))
        self.seen += [(role, p) for p in prompts]
        return [Completion(self.replies[role](p)) for p in prompts]


def answer(p: str) -> str:
    n = int(p.split("Calculate ")[1].split(" +")[0])
    return f"\\boxed{{{n + 1}}}"


def test_voting_picks_the_chosen_solution_and_batches_one_call_per_stage():
    task = get_task("math", workers=1)
    wf = make_workflow("voting", {"n_votes": 3}, task)
    votes = iter(["\\boxed{0}", "\\boxed{7}", "\\boxed{0}"] * 3)
    fake = Scripted(generator=lambda p: next(votes), aggregator=lambda p: "I pick \\boxed{2}")
    eps = wf.run(PROBLEMS, fake)
    assert fake.calls == [("generator", 9), ("aggregator", 3)]
    assert [t.role for t in eps[0].turns] == ["generator"] * 3 + ["aggregator"]
    assert len(eps[0].turns) == wf.max_turns(wf.params)
    assert all(ep.final_text == "\\boxed{7}" for ep in eps)
    agg_prompt = eps[0].turns[-1].prompt
    assert "Solution 1: \\boxed{0}" in agg_prompt and "Solution 3: \\boxed{0}" in agg_prompt
    score_episodes(wf, eps)
    assert [ep.correct for ep in eps] == [False, False, False]


def test_eval_opt_stops_on_correct_and_revises_on_incorrect():
    task = get_task("math", workers=1)
    wf = make_workflow("eval_opt", {"max_iterations": 3}, task)
    fake = Scripted(
        generator=answer,
        reviser=answer,
        evaluator=lambda p: "\\boxed{Correct}" if "Calculate 0" in p else "wrong \\boxed{Incorrect}",
    )
    eps = wf.run(PROBLEMS, fake)
    assert [len(ep.turns) for ep in eps] == [2, 6, 6]  # problem 0 accepted in round 1
    assert max(len(ep.turns) for ep in eps) == wf.max_turns(wf.params)
    assert fake.calls == [
        ("generator", 3),
        ("evaluator", 3),
        ("generator", 2),
        ("evaluator", 2),
        ("generator", 2),
        ("evaluator", 2),
    ]
    reviser_prompts = [p for r, p in fake.seen if r == "generator" and "Previous solution" in p]
    assert len(reviser_prompts) == 4 and all("Feedback: wrong" in p for p in reviser_prompts)
    score_episodes(wf, eps)
    assert all(ep.correct for ep in eps)
    d = wf.diagnostics(eps)
    assert d["mean_iterations"] == pytest.approx(7 / 3) and d["evaluator_accept_rate"] == pytest.approx(1 / 7)


def test_orch_workers_plan_fallbacks_and_worker_batching():
    task = get_task("math", workers=1)
    wf = make_workflow("orch_workers", {"max_subtasks": 2}, task)
    plans = iter(["SUBTASK 1: a\nSUBTASK 2: b\nSUBTASK 3: c", "1. x\n2) y", ""])
    fake = Scripted(orchestrator=lambda p: next(plans), worker=lambda p: "\\boxed{1}", synthesizer=answer)
    eps = wf.run(PROBLEMS, fake)
    assert [ep.info["plan_rule"] for ep in eps] == ["subtask", "numbered", "empty"]
    assert [len(ep.info["subtasks"]) for ep in eps] == [2, 2, 1]
    assert max(len(ep.turns) for ep in eps) == wf.max_turns(wf.params)
    assert fake.calls == [("orchestrator", 3), ("worker", 5), ("synthesizer", 3)]
    score_episodes(wf, eps)
    assert all(ep.correct for ep in eps)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("\\boxed{2}", (1, True)),
        ("pick 3", (2, False)),
        ("9 then 2", (1, False)),
        ("none", (0, False)),
        ("\\boxed{5}", (0, False)),
    ],
)
def test_parse_choice_fallbacks(text, expected):
    assert parse_choice(text, 3) == expected


def test_parse_verdict_and_plan():
    assert parse_verdict("ok \\boxed{Correct}") is True
    assert parse_verdict("\\boxed{Correct} no, \\boxed{Incorrect}") is False
    assert parse_verdict("looks fine") is None
    assert parse_plan("first\nsecond\nthird\nfourth", 3) == (["first", "second", "third"], "lines")


@pytest.mark.parametrize(
    "workflow, params, turns",
    [
        ("single", {}, 1),
        ("voting", {"n_votes": 3}, 4),
        ("eval_opt", {"max_iterations": 2}, 4),
        ("orch_workers", {"max_subtasks": 3}, 5),
    ],
)
def test_run_turns_bounds_a_runs_model_calls(workflow, params, turns):
    cfg = {
        "workflow": workflow,
        "workflow_params": params,
        "training": {
            "max_steps": 10,
            "prompts_per_step": 2,
            "num_generations": 4,
            "eval_every": 5,
            "eval_problems": 50,
        },
        "task_params": {"eval": [{"name": "a", "size": 100}, {"name": "b", "size": 20}, {"name": "real"}]},
    }
    # 80 training episodes; evals at steps 0, 5 and 10, each on 50 + 20 + 50 problems
    assert run_turns(cfg) == turns * (80 + 3 * 120)
