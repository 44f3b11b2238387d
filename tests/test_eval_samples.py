"""Evaluation as the study scores it (evalk): k sampled episodes per eval problem.

- planted episodes (a scripted policy answers each (problem, sample) right or wrong, scored by the real
  math task) give the accuracy, the spread of the k per-sample accuracies and pass@k worked out by hand;
- k = 1: pass_at_k = accuracy, one episode per problem;
- sharded over ranks (interleaved), a problem's k samples stay on one rank and the gathered order is the
  one-process one;
- k > 1 with greedy eval is an error naming the key; `eval_problems: all`, globally and per split;
- one small end-to-end eval of a tiny model with k = 5: the row's columns agree with its own episodes;
- the code task trains on DeepCoder's three subsets with unique ids, and evaluates on LiveCodeBench first.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.workflow import ROOT
from trainer.contract.config import ConfigError
from trainer.rl.distributed import Ranks
from trainer.rl.evaluation import eval_metrics, gather_problem_major, run_split, shard_problems
from trainer.settings import SettingsError, TrainingSettings, eval_problem_limit, task_settings
from trainer.sweep.config import load_yaml, validate_config
from trainer.tasks import Problem, get_task
from trainer.workflows import Completion, make_workflow

K = 5
P = [
    Problem(
        id=f"p{i}",
        question=f"Calculate {i} + 1.",
        answer=str(i + 1),
        demonstration=f"{i} + 1 = \\boxed{{{i + 1}}}",
        source="test",
    )
    for i in range(4)
]
# planted correctness, problem x sample: one, none, all, and two of five samples right
PLANTED = [[1, 0, 0, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1], [0, 1, 0, 1, 0]]


class Planted:
    """A fake policy: the generator answers the i-th prompt right or wrong as PLANTED says (problem-major)."""

    def __init__(self, problems: list[Problem], plan: list[int]):
        self.replies = [f"\\boxed{{{p.answer}}}" if right else "\\boxed{-7}" for p, right in zip(problems, plan)]

    def __call__(self, role: str, prompts: list[str]) -> list[Completion]:
        assert role == "generator" and len(prompts) <= len(self.replies)
        out, self.replies = self.replies[: len(prompts)], self.replies[len(prompts) :]
        return [Completion(text) for text in out]


def planted_split(math_task, problems, plan, k, ranks=None):
    """run_split of the real single workflow under the planted policy (plan: problem-major flags)."""
    ranks = ranks or Ranks.single()
    mine = shard_problems(problems, ranks)  # interleaved: problems r, r + W, ...
    replies = [c for p in mine for c in plan[problems.index(p) * k : (problems.index(p) + 1) * k]]
    policy = Planted([p for p in mine for _ in range(k)], replies)
    return run_split(make_workflow("single", {}, math_task), policy, ranks, problems, k)


def test_planted_episodes_give_the_hand_computed_accuracy_spread_and_pass_at_k(math_task):
    flat = [c for row in PLANTED for c in row]
    episodes = planted_split(math_task, P, flat, K)
    assert [ep.problem.id for ep in episodes] == [p.id for p in P for _ in range(K)]  # problem-major
    assert [int(ep.correct) for ep in episodes] == flat  # the real scorer saw what was planted
    row = eval_metrics([ep.correct for ep in episodes], K)
    # by hand: 8 of 20 episodes right; per-sample accuracies over the 4 problems 2/4, 2/4, 1/4, 2/4, 1/4
    per_sample = [0.5, 0.5, 0.25, 0.5, 0.25]
    mean = sum(per_sample) / K
    assert row["accuracy"] == pytest.approx(8 / 20) == pytest.approx(mean)
    assert row["accuracy_std"] == pytest.approx(math.sqrt(sum((a - mean) ** 2 for a in per_sample) / (K - 1)))
    assert row["accuracy_std"] == pytest.approx(math.sqrt(0.075 / 4))
    assert row["pass_at_k"] == pytest.approx(3 / 4)  # problems 0, 2 and 3 have a right sample
    assert (row["n"], row["k"], row["n_episodes"]) == (4, K, 20)


def test_one_sample_is_one_episode_per_problem_and_pass_at_k_is_the_accuracy(math_task):
    plan = [1, 0, 1, 1]
    episodes = planted_split(math_task, P, plan, 1)
    row = eval_metrics([ep.correct for ep in episodes], 1)
    assert row["accuracy"] == row["pass_at_k"] == sum(ep.correct for ep in episodes) / len(episodes) == 0.75
    assert math.isnan(row["accuracy_std"]) and (row["n"], row["k"], row["n_episodes"]) == (4, 1, 4)


class Gathered(Ranks):
    """A rank whose all_gather returns every rank's share as `shares` holds them (a gather without a group)."""

    shares: list = []

    def all_gather(self, mine):
        return list(self.shares)


def test_sharded_eval_interleaves_problems_keeping_a_problems_samples_on_one_rank(math_task):
    problems = P[:3]  # 3 problems over 2 ranks, interleaved: p0 and p2, then p1
    assert [[p.id for p in shard_problems(problems, Ranks(r, 2, r))] for r in range(2)] == [["p0", "p2"], ["p1"]]
    flat = [c for row in PLANTED[:3] for c in row]
    workflow = make_workflow("single", {}, math_task)
    shares = []
    for r in range(2):
        mine = [p for p in shard_problems(problems, Ranks(r, 2, r)) for _ in range(K)]
        replies = [c for p in mine[::K] for c in flat[problems.index(p) * K : (problems.index(p) + 1) * K]]
        shares.append(workflow.run(mine, Planted(mine, replies)))
    Gathered.shares = shares
    gathered = gather_problem_major(Gathered(0, 2, 0), shares[0], len(problems), K)
    assert [ep.problem.id for ep in gathered] == [p.id for p in problems for _ in range(K)]
    from trainer.workflows import score_episodes

    score_episodes(workflow, gathered)
    assert eval_metrics([ep.correct for ep in gathered], K) == eval_metrics([bool(c) for c in flat], K)


def gloo_eval_worker(rank: int, world: int, port: int, out: str) -> None:
    """One rank of a real gloo group: its share of the planted eval, gathered; rank 0 saves what it holds."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    task = get_task("math", workers=1)
    try:
        flat = [c for row in PLANTED[:3] for c in row]
        episodes = planted_split(task, P[:3], flat, K, Ranks(rank, world, rank))
        if rank == 0:
            Path(out).write_text(json.dumps([[ep.problem.id, ep.correct] for ep in episodes]))
    finally:
        task.close()
        dist.destroy_process_group()


def test_a_two_process_eval_gathers_the_one_process_episodes(tmp_path):
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = tmp_path / "gathered.json"
    mp.spawn(gloo_eval_worker, args=(2, port, str(out)), nprocs=2, join=True)
    flat = [bool(c) for row in PLANTED[:3] for c in row]
    assert json.loads(out.read_text()) == [[p.id, c] for p, c in zip([p for p in P[:3] for _ in range(K)], flat)]


def test_metrics_refuse_a_ragged_batch():
    with pytest.raises(ValueError, match="not a whole number of problems"):
        eval_metrics([True] * 7, K)


# -- settings -----------------------------------------------------------------------------------------


def test_several_greedy_samples_are_an_error_naming_the_key():
    with pytest.raises(SettingsError, match=r"training.eval_samples: 5 .* training.eval_temperature is 0"):
        TrainingSettings(eval_samples=5, eval_temperature=0.0)
    TrainingSettings(eval_samples=1, eval_temperature=0.0)  # one greedy sample: as before
    TrainingSettings(eval_samples=5, eval_temperature=0.7)


def test_greedy_samples_fail_validation_naming_the_runs():
    config = load_yaml(ROOT / "config.yaml")
    schema = load_yaml(ROOT / "rules/config.schema.yaml")
    config["overrides"].append(
        {"match": {"scale": "tiny", "task": "math"}, "training": {"eval_samples": 3, "eval_temperature": 0}}
    )
    with pytest.raises(ConfigError, match=r"training.eval_samples: 3 .*\(runs: .*single-math-tiny-shared-s0"):
        validate_config(config, schema)


def test_eval_problems_all_globally_and_per_split():
    assert eval_problem_limit(None, "all") is None and eval_problem_limit(None, 500) == 500
    assert eval_problem_limit("all", 500) is None and eval_problem_limit(7, "all") == 7  # the split's own wins
    assert [p for p in range(10)][: eval_problem_limit(None, "all")] == list(range(10))
    with pytest.raises(SettingsError, match="training.eval_problems: 'some'"):
        TrainingSettings(eval_problems="some")
    task = task_settings(
        {
            "train": {"source": "synthetic_functions", "size": 3},
            "eval": [{"name": "f", "source": "synthetic_functions", "size": 3, "eval_problems": "all"}],
        },
        "tasks.code",
    )
    assert task.eval[0].eval_problems == "all"
    with pytest.raises(SettingsError, match=r"tasks.code.eval.0.eval_problems: 0"):
        task_settings(
            {"eval": [{"name": "f", "source": "synthetic_functions", "size": 3, "eval_problems": 0}]}, "tasks.code"
        )
    with pytest.raises(SettingsError, match="tasks.code.train.eval_problems"):
        task_settings({"train": {"source": "synthetic_functions", "size": 3, "eval_problems": 2}}, "tasks.code")


def test_eval_problems_all_passes_the_schema_and_a_command_line_int_is_read_as_an_int():
    schema = load_yaml(ROOT / "rules/config.schema.yaml")
    config = load_yaml(ROOT / "config.yaml")
    config["training"]["eval_problems"] = "all"
    config["tasks"]["code"]["eval"][0]["eval_problems"] = "all"
    validate_config(config, schema)
    config["training"]["eval_problems"] = "40"  # as Snakemake's --config hands a nested value over
    validate_config(config, schema)
    assert config["training"]["eval_problems"] == 40
    config["training"]["eval_problems"] = "most"
    with pytest.raises(ConfigError, match="training.eval_problems"):
        validate_config(config, schema)


# -- one small end-to-end eval ------------------------------------------------------------------------

E2E_RUN = "single-math-tiny-shared-s0"


@pytest.mark.slow
@pytest.mark.trajectory
def test_tiny_eval_with_five_samples_writes_consistent_columns(tmp_path, base_model, monkeypatch):
    """A tiny model evaluates 8 problems x 5 samples (the split's `eval_problems: all` over training's 2);
    correctness is planted on each sampled text's hash (the 100-step model gets every sum wrong), and the
    row's columns are recomputed from the episodes it was made of."""
    import hashlib

    import pandas as pd

    import trainer.rl.train as train_module
    from tests.runs import tiny_run_config
    from trainer.contract import rundir
    from trainer.sweep.launch import write_run_config
    from trainer.tasks.base import Score

    rc = tiny_run_config(E2E_RUN, {"eval_samples": K, "eval_problems": 2, "samples_per_eval": 3})
    rc["task_params"]["eval"] = [{**rc["task_params"]["eval"][0], "size": 8, "eval_problems": "all"}]
    write_run_config(rc, base_model, tmp_path)
    trainer = train_module.Trainer(json.loads((tmp_path / "config.json").read_text()), tmp_path)

    def planted(problems, completions):  # right when the text's hash is even: a fixed function of the sample
        return [Score(float(hashlib.sha256(c.encode()).digest()[0] % 2 == 0), True, None) for c in completions]

    monkeypatch.setattr(trainer.task, "score_batch", planted)
    seen = []
    from trainer.rl import evaluation

    real_run_split = evaluation.run_split  # what the trainer's evaluate_splits calls
    monkeypatch.setattr(evaluation, "run_split", lambda *a: seen.append(real_run_split(*a)) or seen[-1])
    trainer.evaluate(0)
    trainer.evaluate(0)  # the same step again: the same draws (the eval seed is the run's and the step's)
    first, again = trainer.eval_rows
    assert {k: v for k, v in first.items() if k != "time_s"} == pytest.approx(
        {k: v for k, v in again.items() if k != "time_s"}, nan_ok=True
    )
    episodes = seen[0]
    ids = [ep.problem.id for ep in episodes]
    assert len(set(ids)) == 8 and ids == [i for i in dict.fromkeys(ids) for _ in range(K)]  # 8 problems x 5
    texts = [[ep.final_text for ep in episodes[i * K : (i + 1) * K]] for i in range(8)]
    assert any(len(set(t)) > 1 for t in texts), "the 5 samples of every problem are the same text"
    correct = [[ep.correct for ep in episodes[i * K : (i + 1) * K]] for i in range(8)]
    assert 0 < sum(map(sum, correct)) < 40, "planting gave no spread"
    per_sample = [sum(c[j] for c in correct) / 8 for j in range(K)]
    assert (first["n"], first["k"], first["n_episodes"]) == (8, K, 40)
    assert first["accuracy"] == pytest.approx(sum(map(sum, correct)) / 40) == pytest.approx(sum(per_sample) / K)
    assert (
        first["pass_at_k"] == pytest.approx(sum(any(c) for c in correct) / 8)
        and first["pass_at_k"] >= first["accuracy"]
    )
    mean = sum(per_sample) / K
    assert first["accuracy_std"] == pytest.approx(math.sqrt(sum((a - mean) ** 2 for a in per_sample) / (K - 1)))
    trainer.write_logs(tmp_path)
    written = pd.read_parquet(tmp_path / rundir.EVAL_PARQUET)
    assert list(written.columns[: len(rundir.EVAL_SCHEMA.names)]) == rundir.EVAL_SCHEMA.names
    assert written.loc[0, "pass_at_k"] == first["pass_at_k"] and written.loc[0, "k"] == K


# -- the study's code sources ---------------------------------------------------------------------------

DATA = ROOT / "tests" / "data"
DEEPCODER = "agentica-org/DeepCoder-Preview-Dataset"
LCB = "lighteval/code_generation_lite"


def paper_code_run() -> dict:
    from trainer.contract.runid import parse_run_id
    from trainer.sweep.config import resolve_run_config

    config = load_yaml(ROOT / "config.yaml") | {"matrix": "paper"}
    return resolve_run_config(config, parse_run_id("voting-code-qwen3-0.6b-shared-s0"))


@pytest.fixture
def fixture_hub(monkeypatch):
    """datasets.load_dataset served from tests/data (each source's real row format); records the calls."""
    import datasets

    files = {(DEEPCODER, n): f"deepcoder_{n}.jsonl" for n in ("primeintellect", "taco", "lcbv5")}
    files[(LCB, "v4_v5")] = "livecodebench.jsonl"
    calls = []

    def load_dataset(path, name=None, split=None, **kw):
        calls.append((path, name))
        rows = [json.loads(line) for line in (DATA / files[(path, name)]).read_text().splitlines() if line.strip()]
        return datasets.Dataset.from_list(rows)

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls


def test_the_code_task_trains_on_three_deepcoder_subsets_with_unique_ids(fixture_hub):
    from trainer.tasks import load_problems

    rc = paper_code_run()
    train = rc["task_params"]["train"]
    assert train["path"] == DEEPCODER and train["config_name"] == ["primeintellect", "taco", "lcbv5"]
    problems = load_problems("code", train, "train")
    assert fixture_hub == [(DEEPCODER, "primeintellect"), (DEEPCODER, "taco"), (DEEPCODER, "lcbv5")]
    assert len(problems) == 6 and len({p.id for p in problems}) == 6  # row indices 0, 1 in each subset
    assert {p.id.rsplit("/", 2)[1] for p in problems} == {"primeintellect", "taco", "lcbv5"}
    assert all(p.id.startswith(f"{DEEPCODER}/") for p in problems)


def test_the_paper_code_eval_is_livecodebench_then_humaneval_with_all_problems_and_five_samples(fixture_hub):
    from trainer.tasks import load_problems

    rc = paper_code_run()
    assert [s["name"] for s in rc["task_params"]["eval"]] == ["livecodebench", "humaneval"]
    assert rc["training"]["eval_problems"] == "all" and rc["training"]["eval_samples"] == 5
    lcb = load_problems("code", rc["task_params"]["eval"][0], "eval")
    rows = [json.loads(line) for line in (DATA / "livecodebench.jsonl").read_text().splitlines() if line.strip()]
    assert [p.id for p in lcb] == [f"{LCB}/{r['question_id']}" for r in rows]
    assert json.loads(lcb[0].answer)["cases"]  # public and private tests parsed


def test_prefetch_prepares_every_configuration_a_run_reads(monkeypatch, fixture_hub):
    from huggingface_hub import constants

    from trainer.sweep.prefetch import dataset_config_names, hf_dataset_specs, prepare_dataset

    specs = list(hf_dataset_specs(paper_code_run()["task_params"]))
    assert [s["path"] for s in specs] == [DEEPCODER, LCB]
    names = dataset_config_names(specs, DEEPCODER)
    assert names == ["primeintellect", "taco", "lcbv5"] and dataset_config_names(specs, LCB) == ["v4_v5"]
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    prepare_dataset(DEEPCODER, "c" * 40, names)
    prepare_dataset(LCB, "d" * 40, ["v4_v5"])
    assert fixture_hub == [(DEEPCODER, n) for n in names] + [(LCB, "v4_v5")]


# -- the cost plan ------------------------------------------------------------------------------------------


def test_the_plan_multiplies_eval_cost_by_k_and_states_the_sizes_it_assumes(tmp_path):
    import copy

    from trainer.sweep.cost import ASSUMED_EVAL_PROBLEMS, assumed_splits, eval_episodes, predict_run
    from trainer.sweep.plan import plan_rows, summary

    rc = paper_code_run()  # livecodebench v4_v5 (all: its 268, cost.KNOWN_SPLIT_SIZES), humaneval (all: 164), k = 5
    assert assumed_splits(rc) == [] and eval_episodes(rc) == 5 * (268 + 164)
    one = copy.deepcopy(rc)
    one["training"]["eval_samples"] = 1
    rate = {"generate_tokens_per_s": 1000.0, "update_tokens_per_s": 1000.0}
    assert predict_run(rc, rate)["eval_s"] == pytest.approx(5 * predict_run(one, rate)["eval_s"])
    one["task_params"]["eval"][0]["eval_problems"] = 200  # a split's own limit
    assert eval_episodes(one) == 200 + 164
    config = load_yaml(ROOT / "config.yaml")
    df = plan_rows(config, tmp_path, matrix="paper", rates=[])
    text = summary(df, 1)
    # the DAPO holdout's size is unknown before the dataset is read: assumed, and said so
    assert f"ASSUMED to hold {ASSUMED_EVAL_PROBLEMS} problems: math: dapo_holdout" in text
    assert "livecodebench" not in text and "aime2025" not in text
    demo = plan_rows(config, tmp_path, matrix="demo", rates=[])
    assert set(demo["eval_assumed"]) == {""}  # the demo's splits say their size


def test_eval_rows_without_the_sample_columns_read_as_one_sample():
    """Eval rows without the k-sample columns (k, n_episodes, pass_at_k, accuracy_std) read as one sample per
    problem."""
    from trainer.contract import rundir

    old = {"step": 0, "split": "s", "accuracy": 0.25, "n": 8, "final_answer_parse_rate": 1.0, "time_s": 1.0}
    new = {**old, "step": 2, **eval_metrics([True, False, False, False], 1)}
    rows = [rundir.with_eval_samples(r) for r in (old, new)]
    assert rows[1] == new and (rows[0]["k"], rows[0]["n_episodes"], rows[0]["pass_at_k"]) == (1, 8, 0.25)
    table = rundir.to_table(rows, rundir.EVAL_SCHEMA).to_pandas()
    assert list(table["k"]) == [1, 1] and table["accuracy_std"].isna().all()
