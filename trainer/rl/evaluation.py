"""Evaluation as the study scores it: k sampled episodes per eval problem (`training.eval_samples`).

Episodes of a split are problem-major: episode i * k + j is sample j of problem i. A split runs in
chunks of `training.eval_chunk_problems` problems, each with a seed of its own (chunk 0 the split's
seed, so a split of one chunk draws what it did before chunks existed). In a chunk, rank r runs
problems r, r + W, r + 2W, ... (all k samples of a problem on one rank): interleaved, so that a run of
long problems is spread over the ranks and they reach the gather together; every rank then holds the
chunk's episodes in the one-process order. With k = 1 this is exactly one episode per problem.

Each finished chunk's episodes are saved (EvalProgress: work/eval_progress/step-N/, rank 0) before the
next starts, so a job requeued in the middle of an eval resumes it at its first unfinished chunk and
its rows equal an uninterrupted eval's. Saved chunks are used only by the eval of the step the run
resumed at (the checkpoint holds the very policies they were generated with) under the same config.

Per split and eval step (eval.parquet, trainer/contract/rundir.py):
- `accuracy`: the mean correctness over all n x k episodes;
- `accuracy_std`: the standard deviation (ddof 1) of the k per-sample accuracies, sample j's accuracy
  being its mean correctness over the n problems; NaN when k = 1;
- `pass_at_k`: the share of problems with at least one correct sample (accuracy when k = 1);
- `n`: problems, `k`: samples per problem, `n_episodes`: n x k.
"""

from __future__ import annotations

import math
import os
import pickle
import random
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from trainer.contract import rundir
from trainer.rl.checkpoint_files import fsync_path
from trainer.rl.distributed import Ranks, rank_seed
from trainer.rl.seeding import step_seed
from trainer.settings import TrainingSettings
from trainer.tasks import Problem
from trainer.workflows import Episode, score_episodes


def eval_metrics(correct: Sequence[bool], k: int) -> dict[str, Any]:
    """n, k, n_episodes, accuracy, accuracy_std and pass_at_k of problem-major correctness flags."""
    if k < 1 or not correct or len(correct) % k:
        raise ValueError(f"eval_metrics: {len(correct)} episodes are not a whole number of problems x k = {k}")
    n = len(correct) // k
    per_sample = [sum(correct[i * k + j] for i in range(n)) / n for j in range(k)]
    return {
        "n": n,
        "k": k,
        "n_episodes": len(correct),
        "accuracy": sum(correct) / len(correct),
        "accuracy_std": statistics.stdev(per_sample) if k > 1 else math.nan,
        "pass_at_k": sum(any(correct[i * k : (i + 1) * k]) for i in range(n)) / n,
    }


def chunk_seed(seed: int, step: int, chunk: int) -> int:
    """The eval seed of a split's chunk at `step` (every split's chunk 0: the step's eval seed)."""
    base = step_seed(seed, step, salt=2)
    return base if chunk == 0 else step_seed(base, chunk, salt=4)


def shard_problems(problems: Sequence[Problem], ranks: Ranks) -> list[Problem]:
    """This rank's interleaved share of a chunk's problems: r, r + W, r + 2W, ..."""
    return list(problems[ranks.rank :: ranks.world_size])


def gather_problem_major(ranks: Ranks, mine: list[Episode], n: int, k: int) -> list[Episode]:
    """Every rank's episodes of its shard_problems share, in problem-major order, on every rank."""
    parts = ranks.all_gather([mine])  # one list per rank, in rank order
    out: list[Episode] = []
    for i in range(n):
        j = i // ranks.world_size
        out += parts[i % ranks.world_size][j * k : (j + 1) * k]
    return out


def run_split(
    workflow: Any,
    generate: Any,
    ranks: Ranks,
    problems: Sequence[Problem],
    k: int,
    chunk_problems: int | None = None,
    seed: Callable[[int], int] | None = None,
    progress: EvalProgress | None = None,
    split: int = 0,
) -> list[Episode]:
    """Every problem's k episodes, scored, problem-major, gathered over ranks, chunk by chunk.

    `chunk_problems`: problems per chunk (None: one chunk); `seed(c)`: the seed of chunk c (None: the
    caller's RNG state); `progress`: where finished chunks are saved and a resumed eval finds them
    (split: the split's index)."""
    size = chunk_problems or max(len(problems), 1)
    episodes: list[Episode] = []
    for c, lo in enumerate(range(0, len(problems), size)):
        chunk = list(problems[lo : lo + size])
        saved = progress.load(split, c, chunk, k) if progress else None
        if ranks.all_true(saved is not None):  # DDP: skipped only where every rank can read it
            episodes += saved
            continue
        if seed is not None:
            torch.manual_seed(rank_seed(seed(c), ranks.rank))
        mine = [p for p in shard_problems(chunk, ranks) for _ in range(k)]  # a problem's samples on one rank
        done = workflow.run(mine, generate)
        score_episodes(workflow, done)
        done = gather_problem_major(ranks, done, len(chunk), k)
        if progress:
            progress.save(split, c, chunk, k, done)
        episodes += done
    return episodes


def split_rows(
    step: int,
    split: str,
    episodes: list[Episode],
    k: int,
    workflow: Any,
    task: Any,
    seed: int,
    samples_per_eval: int,
    time_s: float,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A split's eval.parquet row and its samples.parquet rows: `samples_per_eval` episodes drawn with
    the run's `seed` at `step`, one row per turn."""
    row = {
        "step": step,
        "split": split,
        **eval_metrics([ep.correct for ep in episodes], k),
        "final_answer_parse_rate": sum(bool(ep.score and ep.score.parsed) for ep in episodes) / len(episodes),
        **workflow.diagnostics(episodes),
        "time_s": time_s,
    }
    keep = random.Random(step_seed(seed, step, salt=3)).sample(
        range(len(episodes)), min(samples_per_eval, len(episodes))
    )
    samples = []
    for e in sorted(keep):
        ep = episodes[e]
        for j, turn in enumerate(ep.turns):
            samples.append(
                {
                    "step": step,
                    "split": split,
                    "episode": e,
                    "problem_id": ep.problem.id,
                    "turn": j,
                    "role": turn.role,
                    "agent": turn.agent,
                    "prompt": turn.prompt,
                    "completion": turn.completion.text,
                    "reward": float(ep.score.score if ep.score else 0.0),
                    "final_answer": task.extract_answer(ep.final_text) or "",
                    "correct": ep.correct,
                }
            )
    return row, samples


def evaluate_splits(
    step: int,
    splits: dict[str, list[Problem]],
    workflow: Any,
    task: Any,
    generate: Any,
    ranks: Ranks,
    t: TrainingSettings,
    seed: int,
    progress: EvalProgress,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every split's eval.parquet row and samples.parquet rows at `step`: each split run in chunks of
    training.eval_chunk_problems problems (run_split), k = training.eval_samples episodes a problem."""
    eval_rows: list[dict[str, Any]] = []
    sample_rows: list[dict[str, Any]] = []
    for i, (split, problems) in enumerate(splits.items()):
        t0 = time.time()
        episodes = run_split(
            workflow,
            generate,
            ranks,
            problems,
            t.eval_samples,
            t.eval_chunk_problems,
            lambda c: chunk_seed(seed, step, c),
            progress,
            i,
        )
        row, samples = split_rows(
            step, split, episodes, t.eval_samples, workflow, task, seed, t.samples_per_eval, time.time() - t0
        )
        eval_rows.append(row)
        sample_rows += samples
    return eval_rows, sample_rows


class EvalProgress:
    """The finished chunks of one step's eval under work/eval_progress/step-N/ (rank 0 writes them).

    Each file holds the chunk's gathered episodes with what they were made under (config hash, step,
    split, chunk, problem ids, k); a file that does not match, or does not read, is not used (logged)."""

    def __init__(self, work: Path, step: int, config_hash: str, writer: bool, log: Callable[[str], None]):
        self.root = work / rundir.EVAL_PROGRESS_DIR
        self.dir = self.root / f"step-{step:06d}"
        self.key = {"config_hash": config_hash, "step": step}
        self.writer, self.log, self.resumed = writer, log, 0

    def _path(self, split: int, chunk: int) -> Path:
        return self.dir / f"{split:02d}-{chunk:05d}.pkl"

    def load(self, split: int, chunk: int, problems: list[Problem], k: int) -> list[Episode] | None:
        path = self._path(split, chunk)
        if not path.exists():
            return None
        expect = {**self.key, "split": split, "chunk": chunk, "problems": [p.id for p in problems], "k": k}
        try:
            with open(path, "rb") as f:
                saved = pickle.load(f)
            if {key: saved.get(key) for key in expect} != expect:
                raise ValueError("made for another eval (config, step, problems or k)")
        except (OSError, EOFError, pickle.UnpicklingError, ValueError, AttributeError) as e:
            self.log(f"eval progress {path} not used: {type(e).__name__}: {e}")
            return None
        self.resumed += 1
        return saved["episodes"]

    def save(self, split: int, chunk: int, problems: list[Problem], k: int, episodes: list[Episode]) -> None:
        if not self.writer:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self._path(split, chunk)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        with open(tmp, "wb") as f:
            pickle.dump(
                {
                    **self.key,
                    "split": split,
                    "chunk": chunk,
                    "problems": [p.id for p in problems],
                    "k": k,
                    "episodes": episodes,
                },
                f,
                protocol=pickle.HIGHEST_PROTOCOL,
            )
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_path(self.dir)

    def discard(self, keep: bool = False) -> None:
        """Remove every step's saved chunks (`keep`: all but this step's); rank 0 alone."""
        if not self.writer or not self.root.exists():
            return
        for old in self.root.iterdir():
            if not (keep and old == self.dir):
                shutil.rmtree(old) if old.is_dir() else old.unlink()
