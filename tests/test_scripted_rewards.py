"""Workflows under a scripted fake policy (tests/scripted_policy.py), up to the GRPO advantages: the
per-turn rewards of both reward modes, and the advantages that the real `assign_rewards_and_advantages`
gives each turn under both groupings and both std scalings, against numbers worked out by hand."""

from __future__ import annotations

import math

from tests.scripted_policy import EPS, RIGHT, WRONG, P, approx, per_turn, run, training
from trainer.rl.grpo import assign_rewards_and_advantages

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
