"""Workflows under a scripted fake policy, end to end up to the GRPO advantages.

The fake answers each stage from a script (one reply per prompt, in the order the workflow asks),
so every turn's text is known: the tests check the prompts each role sees, the fallbacks inside a
run, the diagnostics that count them, the per-turn rewards of both reward modes, and the advantages
that the real `assign_rewards_and_advantages` gives each turn under both groupings and both
std scalings, against numbers worked out by hand.
"""

from __future__ import annotations

import math

import pytest

from trainer.rl.grpo import assign_rewards_and_advantages
from trainer.settings import TrainingSettings
from trainer.tasks import Problem, get_task
from trainer.workflows import Completion, make_workflow, score_episodes

FORMAT = "Put the final answer in \\boxed{}."
P = [
    Problem(
        id=f"p{i}",
        question=f"Calculate {i} + 1.",
        answer=str(i + 1),
        demonstration=f"{i} + 1 = \\boxed{{{i + 1}}}",
        source="test",
    )
    for i in range(2)
]
RIGHT = {p.id: f"\\boxed{{{p.answer}}}" for p in P}
WRONG = "\\boxed{9}"
EPS = 1e-4  # group_advantages' std offset (TRL's)


class Script:
    """A fake policy: per role, the replies in the order the workflow asks; records every prompt."""

    def __init__(self, **replies: list[str]):
        self.replies = {role: list(texts) for role, texts in replies.items()}
        self.seen: list[tuple[str, str]] = []

    def __call__(self, role: str, prompts: list[str]) -> list[Completion]:
        queue = self.replies[role]
        assert len(queue) >= len(prompts), f"the script has {len(queue)} {role} replies left, {len(prompts)} asked"
        out, self.replies[role] = queue[: len(prompts)], queue[len(prompts) :]
        self.seen += [(role, p) for p in prompts]
        return [Completion(text) for text in out]

    def done(self) -> bool:
        return not any(self.replies.values())


@pytest.fixture(scope="module")
def math_task():
    task = get_task("math", workers=1)
    yield task
    task.close()


def run(math_task, name: str, params: dict, problems: list[Problem], **replies: list[str]):
    wf = make_workflow(name, params, math_task)
    script = Script(**replies)
    episodes = wf.run(problems, script)
    assert script.done(), f"unused replies: {script.replies}"
    score_episodes(wf, episodes)
    return wf, episodes, script


def training(
    reward_mode="final_outcome",
    advantage_grouping="role_instance",
    scale_rewards="group",
    normalize_advantages_per_role=False,
) -> TrainingSettings:
    return TrainingSettings(
        reward_mode=reward_mode,
        advantage_grouping=advantage_grouping,
        scale_rewards=scale_rewards,
        normalize_advantages_per_role=normalize_advantages_per_role,
    )


def per_turn(episodes, what: str) -> list[list[float]]:
    return [[getattr(t, what) for t in ep.turns] for ep in episodes]


def approx(rows: list[list[float]]):
    return [pytest.approx(r, abs=1e-12) for r in rows]


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


# -- rewards: final_outcome vs per_role, every workflow ------------------------------------------


def test_rewards_single(math_task):
    for mode in ("final_outcome", "per_role"):
        wf, eps, _ = run(math_task, "single", {}, P, generator=[RIGHT["p0"], WRONG])
        assign_rewards_and_advantages(wf, eps, [0, 1], training(mode))
        assert per_turn(eps, "reward") == [[1.0], [0.0]], mode


def voting_rollouts(math_task):
    """2 prompts x 3 rollouts of voting with 2 voters; the aggregator's picks as commented."""
    r0, r1 = RIGHT["p0"], RIGHT["p1"]
    voters = [
        r0,
        WRONG,  # ep0: picks 1 (right)
        WRONG,
        r0,  # ep1: picks 1 (wrong)
        r0,
        r0,  # ep2: picks 2 (right)
        WRONG,
        WRONG,  # ep3: picks 1 (wrong)
        r1,
        WRONG,  # ep4: unreadable pick, falls back to 1 (right)
        WRONG,
        r1,
    ]  # ep5: picks 2 (right)
    aggregator = ["\\boxed{1}", "\\boxed{1}", "\\boxed{2}", "\\boxed{1}", "hmm", "\\boxed{2}"]
    return run(math_task, "voting", {"n_votes": 2}, [P[0]] * 3 + [P[1]] * 3, generator=voters, aggregator=aggregator)


GROUP_OF = [0, 0, 0, 1, 1, 1]


def test_rewards_voting(math_task):
    wf, eps, _ = voting_rollouts(math_task)
    assert [ep.correct for ep in eps] == [True, False, True, False, True, True]
    assign_rewards_and_advantages(wf, eps, GROUP_OF, training("final_outcome"))
    assert per_turn(eps, "reward") == [[f] * 3 for f in (1, 0, 1, 0, 1, 1)]
    assign_rewards_and_advantages(wf, eps, GROUP_OF, training("per_role"))
    # voters on their own answers; the aggregator on the solution it chose
    assert per_turn(eps, "reward") == [[1, 0, 1], [0, 1, 0], [1, 1, 1], [0, 0, 0], [1, 0, 1], [0, 1, 1]]


def eval_opt_rollouts(math_task):
    """1 prompt x 4 rollouts of eval_opt, max_iterations 2.

    ep0: right, Correct (stop). ep1: wrong, Incorrect; right, Correct. ep2: wrong, Correct (a wrong
    accept, stop). ep3: wrong, unparseable (revise); right, Correct.
    """
    return run(
        math_task,
        "eval_opt",
        {"max_iterations": 2},
        [P[0]] * 4,
        generator=[RIGHT["p0"], WRONG, WRONG, WRONG, RIGHT["p0"], RIGHT["p0"]],
        evaluator=[
            "\\boxed{Correct}",
            "no \\boxed{Incorrect}",
            "\\boxed{Correct}",
            "fine",
            "\\boxed{Correct}",
            "\\boxed{Correct}",
        ],
    )


def test_rewards_eval_opt(math_task):
    wf, eps, _ = eval_opt_rollouts(math_task)
    assert [len(ep.turns) for ep in eps] == [2, 4, 2, 4]
    assert [ep.correct for ep in eps] == [True, True, False, True]
    assign_rewards_and_advantages(wf, eps, [0] * 4, training("final_outcome"))
    assert per_turn(eps, "reward") == [[1, 1], [1, 1, 1, 1], [0, 0], [1, 1, 1, 1]]
    assign_rewards_and_advantages(wf, eps, [0] * 4, training("per_role"))
    # each generator turn on its own answer; each evaluator turn on its verdict against the truth of
    # the solution it judged; an unparseable verdict earns nothing (ep3, round 0)
    assert per_turn(eps, "reward") == [[1, 1], [0, 1, 1, 1], [0, 0], [0, 0, 1, 1]]


def orch_rollouts(math_task):
    """1 prompt x 3 rollouts of orch_workers: workers right or wrong, the synthesizer decides."""
    return run(
        math_task,
        "orch_workers",
        {"max_subtasks": 2},
        [P[0]] * 3,
        orchestrator=["SUBTASK 1: a\nSUBTASK 2: b", "SUBTASK 1: a", "SUBTASK 1: a\nSUBTASK 2: b"],
        worker=[RIGHT["p0"], WRONG, RIGHT["p0"], WRONG, WRONG],
        synthesizer=[RIGHT["p0"], WRONG, WRONG],
    )


def test_rewards_orch_workers(math_task):
    wf, eps, _ = orch_rollouts(math_task)
    assert [[t.role for t in ep.turns] for ep in eps] == [
        ["orchestrator", "worker", "worker", "synthesizer"],
        ["orchestrator", "worker", "synthesizer"],
        ["orchestrator", "worker", "worker", "synthesizer"],
    ]
    for mode in ("final_outcome", "per_role"):
        assign_rewards_and_advantages(wf, eps, [0] * 3, training(mode))
        # per_role: the synthesizer on the final answer; orchestrator and workers have no answer of
        # their own to score (a worker answers a subtask), so they get the final outcome too
        assert per_turn(eps, "reward") == [[1] * 4, [0] * 3, [0] * 4], mode


# -- advantages: role_instance vs episode grouping, std scaling group vs none --------------------


def test_advantages_voting_role_instance(math_task):
    wf, eps, _ = voting_rollouts(math_task)
    s = 1 / (math.sqrt(1 / 3) + EPS)  # every group below is two of one reward and one of the other
    # per_role: groups (prompt, role, agent) across the 3 rollouts
    #   p0 voter 0 [1,0,1], voter 1 [0,1,1], aggregator [1,0,1]
    #   p1 voter 0 [0,1,0], voter 1 [0,0,1], aggregator [0,1,1]
    centred = [
        [1 / 3, -2 / 3, 1 / 3],
        [-2 / 3, 1 / 3, -2 / 3],
        [1 / 3, 1 / 3, 1 / 3],
        [-1 / 3, -1 / 3, -2 / 3],
        [2 / 3, -1 / 3, 1 / 3],
        [-1 / 3, 2 / 3, 1 / 3],
    ]
    assign_rewards_and_advantages(wf, eps, GROUP_OF, training("per_role", scale_rewards="none"))
    assert per_turn(eps, "advantage") == approx(centred)
    assign_rewards_and_advantages(wf, eps, GROUP_OF, training("per_role", scale_rewards="group"))
    assert per_turn(eps, "advantage") == approx([[a * s for a in row] for row in centred])
    # final_outcome: every group of p0 is [1,0,1], of p1 [0,1,1]
    outcome = [[1 / 3] * 3, [-2 / 3] * 3, [1 / 3] * 3, [-2 / 3] * 3, [1 / 3] * 3, [1 / 3] * 3]
    assign_rewards_and_advantages(wf, eps, GROUP_OF, training("final_outcome", scale_rewards="none"))
    assert per_turn(eps, "advantage") == approx(outcome)
    assign_rewards_and_advantages(wf, eps, GROUP_OF, training("final_outcome", scale_rewards="group"))
    assert per_turn(eps, "advantage") == approx([[a * s for a in row] for row in outcome])


def test_advantages_voting_episode(math_task):
    wf, eps, _ = voting_rollouts(math_task)
    # per_role: an episode's reward is its turns' mean: p0 [2/3, 1/3, 1], p1 [0, 2/3, 2/3]
    #   p0: mean 2/3, deviations [0, -1/3, 1/3], std 1/3; p1: mean 4/9, [-4/9, 2/9, 2/9], std sqrt(12)/9
    p0, p1 = [0, -1 / 3, 1 / 3], [-4 / 9, 2 / 9, 2 / 9]
    assign_rewards_and_advantages(wf, eps, GROUP_OF, training("per_role", "episode", "none"))
    assert per_turn(eps, "advantage") == approx([[a] * 3 for a in p0 + p1])
    assign_rewards_and_advantages(wf, eps, GROUP_OF, training("per_role", "episode", "group"))
    scaled = [a / (1 / 3 + EPS) for a in p0] + [a / (math.sqrt(12) / 9 + EPS) for a in p1]
    assert per_turn(eps, "advantage") == approx([[a] * 3 for a in scaled])
    # final_outcome: p0 [1,0,1], p1 [0,1,1], every turn of an episode the same advantage
    outcome = [1 / 3, -2 / 3, 1 / 3, -2 / 3, 1 / 3, 1 / 3]
    assign_rewards_and_advantages(wf, eps, GROUP_OF, training("final_outcome", "episode", "none"))
    assert per_turn(eps, "advantage") == approx([[a] * 3 for a in outcome])
    assign_rewards_and_advantages(wf, eps, GROUP_OF, training("final_outcome", "episode", "group"))
    assert per_turn(eps, "advantage") == approx([[a / (math.sqrt(1 / 3) + EPS)] * 3 for a in outcome])


def test_advantages_eval_opt_rounds_are_role_instances(math_task):
    # round r's generator (evaluator) turns form one group across the rollouts that reached round r;
    # rollouts that stopped early are not in round 1's groups
    wf, eps, _ = eval_opt_rollouts(math_task)
    assign_rewards_and_advantages(wf, eps, [0] * 4, training("per_role", scale_rewards="none"))
    # generator round 0 [1,0,0,0], evaluator round 0 [1,1,0,0]; round 1 (ep1, ep3) all 1: advantage 0
    assert per_turn(eps, "advantage") == approx([[0.75, 0.5], [-0.25, 0.5, 0, 0], [-0.25, -0.5], [-0.25, -0.5, 0, 0]])
    assign_rewards_and_advantages(wf, eps, [0] * 4, training("per_role", scale_rewards="group"))
    g, e = 1 / (0.5 + EPS), 1 / (math.sqrt(1 / 3) + EPS)  # stds 0.5 and sqrt(1/3)
    assert per_turn(eps, "advantage") == approx(
        [[0.75 * g, 0.5 * e], [-0.25 * g, 0.5 * e, 0, 0], [-0.25 * g, -0.5 * e], [-0.25 * g, -0.5 * e, 0, 0]]
    )
    # final_outcome [1,1,0,1]: round 0 groups [1,1,0,1] (std 0.5), round 1 groups [1,1]
    assign_rewards_and_advantages(wf, eps, [0] * 4, training("final_outcome", scale_rewards="group"))
    a, b = 0.25 / (0.5 + EPS), -0.75 / (0.5 + EPS)
    assert per_turn(eps, "advantage") == approx([[a, a], [a, a, 0, 0], [b, b], [a, a, 0, 0]])
    # episode grouping: per_role episode rewards [1, 3/4, 0, 1/2], mean 9/16
    assign_rewards_and_advantages(wf, eps, [0] * 4, training("per_role", "episode", "none"))
    assert per_turn(eps, "advantage") == approx([[7 / 16] * 2, [3 / 16] * 4, [-9 / 16] * 2, [-1 / 16] * 4])
    assign_rewards_and_advantages(wf, eps, [0] * 4, training("final_outcome", "episode", "none"))
    assert per_turn(eps, "advantage") == approx([[0.25] * 2, [0.25] * 4, [-0.75] * 2, [0.25] * 4])


def test_advantages_orch_workers_worker_k_is_a_group(math_task):
    wf, eps, _ = orch_rollouts(math_task)
    # final outcome [1, 0, 0]; worker 1 exists in ep0 and ep2 only: its group is [1, 0]
    assign_rewards_and_advantages(wf, eps, [0] * 3, training("final_outcome", scale_rewards="none"))
    assert per_turn(eps, "advantage") == approx(
        [[2 / 3, 2 / 3, 0.5, 2 / 3], [-1 / 3] * 3, [-1 / 3, -1 / 3, -0.5, -1 / 3]]
    )
    assign_rewards_and_advantages(wf, eps, [0] * 3, training("final_outcome", scale_rewards="group"))
    s3, s2 = 1 / (math.sqrt(1 / 3) + EPS), 1 / (math.sqrt(0.5) + EPS)
    assert per_turn(eps, "advantage") == approx(
        [
            [2 / 3 * s3, 2 / 3 * s3, 0.5 * s2, 2 / 3 * s3],
            [-1 / 3 * s3] * 3,
            [-1 / 3 * s3, -1 / 3 * s3, -0.5 * s2, -1 / 3 * s3],
        ]
    )
    assign_rewards_and_advantages(wf, eps, [0] * 3, training("final_outcome", "episode", "none"))
    assert per_turn(eps, "advantage") == approx([[2 / 3] * 4, [-1 / 3] * 3, [-1 / 3] * 4])


def test_advantages_groups_never_mix_prompts(math_task):
    # the same rewards under another prompt assignment: p0 = ep0..2 vs every episode one prompt
    wf, eps, _ = voting_rollouts(math_task)
    assign_rewards_and_advantages(wf, eps, [0] * 6, training("final_outcome", "episode", "none"))
    mean = 4 / 6
    assert per_turn(eps, "advantage") == approx([[f - mean] * 3 for f in (1, 0, 1, 0, 1, 1)])


def test_per_role_normalization_divides_each_roles_advantages_by_their_std(math_task):
    wf, eps, _ = voting_rollouts(math_task)
    centred = [
        [1 / 3, -2 / 3, 1 / 3],
        [-2 / 3, 1 / 3, -2 / 3],
        [1 / 3, 1 / 3, 1 / 3],
        [-1 / 3, -1 / 3, -2 / 3],
        [2 / 3, -1 / 3, 1 / 3],
        [-1 / 3, 2 / 3, 1 / 3],
    ]  # as above
    assign_rewards_and_advantages(
        wf, eps, GROUP_OF, training("per_role", scale_rewards="none", normalize_advantages_per_role=True)
    )
    # voters: 12 advantages with mean 0 and squares summing to 24/9; the aggregator: 6, summing to 12/9
    voters, aggregator = math.sqrt(24 / 9 / 11) + EPS, math.sqrt(12 / 9 / 5) + EPS
    assert per_turn(eps, "advantage") == approx(
        [[row[0] / voters, row[1] / voters, row[2] / aggregator] for row in centred]
    )
    assign_rewards_and_advantages(
        wf, eps, GROUP_OF, training("per_role", scale_rewards="none", normalize_advantages_per_role=False)
    )
    assert per_turn(eps, "advantage") == approx(centred)
