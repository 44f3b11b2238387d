"""Evaluation as the study scores it: k sampled episodes per eval problem (`training.eval_samples`).

Episodes of a split are problem-major: episode i * k + j is sample j of problem i. Each rank runs
its contiguous share of the problems (all k samples of a problem on one rank) and the episodes are
gathered in rank order, so every rank holds the one-process order. With k = 1 this is exactly one
episode per problem, as before the setting existed.

Per split and eval step (eval.parquet, trainer/sweep/rundir.py):
- `accuracy`: the mean correctness over all n x k episodes;
- `accuracy_std`: the standard deviation (ddof 1) of the k per-sample accuracies, sample j's accuracy
  being its mean correctness over the n problems; NaN when k = 1;
- `pass_at_k`: the share of problems with at least one correct sample (accuracy when k = 1);
- `n`: problems, `k`: samples per problem, `n_episodes`: n x k.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Sequence

from trainer.rl.distributed import Ranks
from trainer.tasks import Problem
from trainer.workflows import Episode, score_episodes


def eval_metrics(correct: Sequence[bool], k: int) -> dict[str, Any]:
    """n, k, n_episodes, accuracy, accuracy_std and pass_at_k of problem-major correctness flags."""
    if k < 1 or not correct or len(correct) % k:
        raise ValueError(f"eval_metrics: {len(correct)} episodes are not a whole number of problems x k = {k}")
    n = len(correct) // k
    per_sample = [sum(correct[i * k + j] for i in range(n)) / n for j in range(k)]
    return {
        "n": n, "k": k, "n_episodes": len(correct),
        "accuracy": sum(correct) / len(correct),
        "accuracy_std": statistics.stdev(per_sample) if k > 1 else math.nan,
        "pass_at_k": sum(any(correct[i * k:(i + 1) * k]) for i in range(n)) / n,
    }


def run_split(workflow: Any, generate: Any, ranks: Ranks, problems: Sequence[Problem], k: int) -> list[Episode]:
    """Every problem's k episodes, scored, problem-major, gathered over ranks (each rank its share of problems)."""
    mine = [p for p in ranks.shard(problems) for _ in range(k)]  # DDP: a problem's samples stay on one rank
    episodes = workflow.run(mine, generate)
    score_episodes(workflow, episodes)
    return ranks.all_gather(episodes)
