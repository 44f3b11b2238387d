"""Workflows under a scripted fake policy (tests/scripted_policy.py): the prompts each role sees, the
fallbacks inside a run and the diagnostics that count them."""

from __future__ import annotations

import pytest

from tests.scripted_policy import FORMAT, RIGHT, WRONG, P, run

# -- the prompts each role sees -------------------------------------------------------------------


def test_single_one_generator_turn_on_the_problem(math_task):
    wf, eps, script = run(math_task, "single", {}, P, generator=[RIGHT["p0"], WRONG])
    assert [[(t.role, t.agent) for t in ep.turns] for ep in eps] == [[("generator", 0)]] * 2
    assert eps[0].turns[0].prompt == f"Calculate 0 + 1.\n\n{FORMAT}"
    assert [ep.final_text for ep in eps] == [RIGHT["p0"], WRONG] and [ep.correct for ep in eps] == [True, False]


def test_voting_voters_see_the_problem_and_the_aggregator_numbered_solutions(math_task):
    wf, eps, script = run(
        math_task,
        "voting",
        {"n_votes": 3},
        P[:1],
        generator=["A \\boxed{9}", "B \\boxed{1}", "C \\boxed{3}"],
        aggregator=["\\boxed{2}"],
    )
    ep = eps[0]
    assert [(t.role, t.agent) for t in ep.turns] == [
        ("generator", 0),
        ("generator", 1),
        ("generator", 2),
        ("aggregator", 0),
    ]
    assert [t.prompt for t in ep.turns[:3]] == [f"Calculate 0 + 1.\n\n{FORMAT}"] * 3
    assert ep.turns[3].prompt == (
        "Problem: Calculate 0 + 1.\n\nSolution 1: A \\boxed{9}\n\nSolution 2: B \\boxed{1}"
        "\n\nSolution 3: C \\boxed{3}\n\nWhich solution is correct? Reply with its "
        "number as \\boxed{k}."
    )
    assert ep.final_text == "B \\boxed{1}" and ep.correct and ep.info == {"choice": 1, "choice_parsed": True}


@pytest.mark.parametrize(
    "reply, choice, parsed",
    [("\\boxed{3}", 2, True), ("\\boxed{7} or rather 2", 1, False), ("no idea", 0, False), ("", 0, False)],
)
def test_voting_choice_fallbacks_inside_a_run_and_the_parse_rate(math_task, reply, choice, parsed):
    voters = ["\\boxed{1}", "\\boxed{2}", "\\boxed{3}"]
    wf, eps, _ = run(
        math_task, "voting", {"n_votes": 3}, P[:1] * 2, generator=voters * 2, aggregator=[reply, "\\boxed{1}"]
    )
    assert eps[0].info == {"choice": choice, "choice_parsed": parsed}
    assert eps[0].final_text == voters[choice]  # an unreadable choice falls back to solution 1
    d = wf.diagnostics(eps)
    assert d["choice_parse_rate"] == (1.0 if parsed else 0.5)
    assert d["voter_accuracy"] == pytest.approx(1 / 3) and d["any_voter_correct"] == 1.0


def test_eval_opt_evaluator_sees_the_solution_and_the_reviser_the_feedback(math_task):
    wf, eps, script = run(
        math_task,
        "eval_opt",
        {"max_iterations": 3},
        P[:1],
        generator=["first \\boxed{9}", "second \\boxed{8}", "third \\boxed{1}"],
        evaluator=["Check the carry. \\boxed{Incorrect}", "Still off \\boxed{Incorrect} sorry", "\\boxed{Correct}"],
    )
    ep = eps[0]
    assert [(t.role, t.agent) for t in ep.turns] == [
        ("generator", 0),
        ("evaluator", 0),
        ("generator", 1),
        ("evaluator", 1),
        ("generator", 2),
        ("evaluator", 2),
    ]
    judge = (
        "Is the solution correct? Reply \\boxed{Correct} or \\boxed{Incorrect}, with brief feedback that "
        "does not reveal the answer."
    )
    for r, solution in enumerate(["first \\boxed{9}", "second \\boxed{8}", "third \\boxed{1}"]):
        assert ep.turns[2 * r + 1].prompt == f"Problem: Calculate 0 + 1.\n\nSolution: {solution}\n\n{judge}"
    assert ep.turns[0].prompt == f"Calculate 0 + 1.\n\n{FORMAT}"
    revise = "Solve it again with a different approach. " + FORMAT
    assert ep.turns[2].prompt == (
        f"Calculate 0 + 1.\n\nPrevious solution: first \\boxed{{9}}\n\nFeedback: Check the carry.\n\n{revise}"
    )
    assert ep.turns[4].prompt == (
        f"Calculate 0 + 1.\n\nPrevious solution: second \\boxed{{8}}\n\nFeedback: Still off  sorry\n\n{revise}"
    )  # the verdict cut out
    assert ep.final_text == "third \\boxed{1}" and ep.correct
    assert ep.info == {"verdicts": [False, False, True], "verdicts_parsed": [True, True, True]}


def test_eval_opt_unparseable_verdict_revises_and_is_counted(math_task):
    # p0: a verdict with no \boxed{Correct/Incorrect}; it counts as Incorrect, so the generator revises
    # with the whole text as feedback, and the next round's Correct stops. p1: accepted at once.
    wf, eps, script = run(
        math_task,
        "eval_opt",
        {"max_iterations": 3},
        P,
        generator=[WRONG, RIGHT["p1"], RIGHT["p0"]],
        evaluator=["Looks fine to me \\boxed{maybe}", "\\boxed{Correct}", "\\boxed{Correct}"],
    )
    assert [[t.role for t in ep.turns] for ep in eps] == [["generator", "evaluator"] * 2, ["generator", "evaluator"]]
    assert eps[0].info == {"verdicts": [False, True], "verdicts_parsed": [False, True]}
    assert eps[0].turns[2].prompt.count("Feedback: Looks fine to me\n\n") == 1
    assert [ep.final_text for ep in eps] == [RIGHT["p0"], RIGHT["p1"]]
    d = wf.diagnostics(eps)
    assert d["verdict_parse_rate"] == pytest.approx(2 / 3)
    assert d["evaluator_accept_rate"] == pytest.approx(2 / 3)  # the unparseable one did not accept
    assert d["mean_iterations"] == pytest.approx(1.5)
    assert d["generator_first_accuracy"] == pytest.approx(0.5)
    # judged: (unparsed, wrong solution), (Correct, right), (Correct, right): a malformed verdict is no
    # correct judgement, even on a wrong solution
    assert d["evaluator_accuracy"] == pytest.approx(2 / 3)


def test_eval_opt_all_rounds_incorrect_keeps_the_last_solution(math_task):
    wf, eps, _ = run(
        math_task,
        "eval_opt",
        {"max_iterations": 2},
        P[:1],
        generator=[RIGHT["p0"], WRONG],
        evaluator=["\\boxed{Incorrect}"] * 2,
    )
    assert len(eps[0].turns) == 4 and eps[0].final_text == WRONG and not eps[0].correct


@pytest.mark.parametrize("share", [False, True])
def test_orch_workers_see_their_subtask_and_the_synthesizer_the_results(math_task, share):
    wf, eps, script = run(
        math_task,
        "orch_workers",
        {"max_subtasks": 3, "share_main_task_with_workers": share},
        P[:1],
        orchestrator=["SUBTASK 1: add the ones\nSUBTASK 2: add the tens"],
        worker=["ones \\boxed{1}", "tens \\boxed{0}"],
        synthesizer=[RIGHT["p0"]],
    )
    ep = eps[0]
    assert [(t.role, t.agent) for t in ep.turns] == [
        ("orchestrator", 0),
        ("worker", 0),
        ("worker", 1),
        ("synthesizer", 0),
    ]
    assert ep.turns[0].prompt == (
        "Split the problem into at most 3 independent subtasks, one per line as SUBTASK k: ...\n\nCalculate 0 + 1."
    )
    for k, subtask in enumerate(["add the ones", "add the tens"]):
        own = f"Solve the subtask. {FORMAT}\n\n{subtask}"
        expected = f"Main problem: Calculate 0 + 1.\n\n{own}" if share else own
        assert ep.turns[1 + k].prompt == expected
    if not share:
        assert all("Calculate" not in t.prompt for t in ep.turns if t.role == "worker")
    assert ep.turns[3].prompt == (
        "Problem: Calculate 0 + 1.\n\nSubtask results:\nSubtask 1: add the ones\nResult: "
        "ones \\boxed{1}\nSubtask 2: add the tens\nResult: tens \\boxed{0}\n\nCombine them "
        f"into the final answer. {FORMAT}"
    )
    assert ep.final_text == RIGHT["p0"] and ep.correct


def test_orch_workers_plan_fallbacks_inside_a_run(math_task):
    # lines (cut to max_subtasks), and an empty plan: the one worker gets the whole problem
    wf, eps, script = run(
        math_task,
        "orch_workers",
        {"max_subtasks": 2},
        P,
        orchestrator=["first part\n\nsecond part\nthird part", "   \n"],
        worker=["\\boxed{1}", "no answer", "\\boxed{2}"],
        synthesizer=[WRONG, RIGHT["p1"]],
    )
    assert [ep.info for ep in eps] == [
        {"subtasks": ["first part", "second part"], "plan_rule": "lines"},
        {"subtasks": ["Calculate 1 + 1."], "plan_rule": "empty"},
    ]
    assert eps[1].turns[1].prompt == f"Solve the subtask. {FORMAT}\n\nCalculate 1 + 1."
    d = wf.diagnostics(eps)
    assert d == {"subtasks_mean": 1.5, "plan_parse_rate": 0.0, "worker_success": pytest.approx(2 / 3)}
    assert [ep.correct for ep in eps] == [False, True]
