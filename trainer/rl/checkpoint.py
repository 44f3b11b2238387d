"""Checkpoint and resume of one run: everything a resume needs, written whole or not at all.

The layout (work/checkpoints/step-N/{state.pt, policies/, config.json, the logs so far}) is named
in trainer/sweep/rundir.py; whether a checkpoint may be resumed under a config is
trainer.sweep.config.resume_conflict, the one check the launcher also makes before it submits.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch

from trainer.rl.policies import PolicySet
from trainer.rl.stopping import pause_for_tests
from trainer.sweep import rundir
from trainer.sweep.config import resume_conflict

LOGS = {"train": rundir.TRAIN_PARQUET, "eval": rundir.EVAL_PARQUET, "samples": rundir.SAMPLES_PARQUET,
        "warnings": rundir.WARNINGS_PARQUET}


def write_run_logs(directory: Path, rows: dict[str, list[dict[str, Any]]]) -> None:
    """Each log (LOGS' names: train, eval, samples, warnings) of `rows` as parquet in `directory`, atomically."""
    schemas = {"train": rundir.TRAIN_SCHEMA, "eval": rundir.EVAL_SCHEMA, "samples": rundir.SAMPLES_SCHEMA,
               "warnings": rundir.WARNINGS_SCHEMA}
    for name, file in LOGS.items():
        rundir.write_parquet_atomic(rundir.to_table(rows[name], schemas[name]), directory / file)


class ResumeError(RuntimeError):
    """A run cannot resume from its checkpoint (the config changed)."""



def sampler_state(step: int, prompts_per_step: int, n_problems: int) -> dict[str, int]:
    """Where the data sampler stands after `step`: the next prompt's position in the epoch order.

    The order of each epoch is a seeded permutation (Trainer.prompts_for_step), so this position
    is all a resume needs; it is stored to check that it agrees with the config.
    """
    position = step * prompts_per_step
    epoch, index = divmod(position, n_problems)
    return {"next_step": step + 1, "position": position, "epoch": epoch, "index": index, "n_problems": n_problems}


def save_checkpoint(work: Path, step: int, cfg: dict[str, Any], policies: PolicySet, sampler: dict[str, int],
                    write_logs: Callable[[Path], None], keep_last: int) -> None:
    """Each policy (save_pretrained layout), optimizer, scheduler and RNG states, the config and the
    logs so far, under a temporary name renamed into place; then only the newest `keep_last` are kept."""
    final, tmp = rundir.checkpoint_dir(work, step), rundir.checkpoint_tmp_dir(work, step)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    policies.save(str(tmp / rundir.POLICIES_DIR))
    pause_for_tests("checkpoint")
    torch.save({"step": step, "config_hash": cfg["config_hash"],
                "params": {p.name: [x.detach().cpu().clone() for x in p.params] for p in policies},
                "optimizers": {p.name: p.optimizer.state_dict() for p in policies},
                "schedulers": {p.name: p.scheduler.state_dict() for p in policies},
                "sampler": sampler,
                "rng": {"python": random.getstate(), "numpy": np.random.get_state(),
                        "torch": torch.get_rng_state()}}, tmp / rundir.STATE_PT)
    rundir.write_json_atomic(cfg, tmp / rundir.CONFIG_JSON)
    write_logs(tmp)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    for old in rundir.checkpoints(work)[: -keep_last]:
        # renamed first, so a kill during the delete never leaves a partial step-* behind
        doomed = old.parent / f".{old.name}.deleting"
        os.replace(old, doomed)
        shutil.rmtree(doomed)


def load_checkpoint(work: Path, cfg: dict[str, Any], policies: PolicySet, sampler: Callable[[int], dict[str, int]],
                    log: Callable[[str], None], clean_up: bool = True) -> tuple[int, dict[str, list[dict[str, Any]]]]:
    """Restore the newest whole checkpoint into `policies` and the RNGs; return its step and its logs
    up to that step (0 and no logs: start afresh). Refuses one written under another config.
    `clean_up`: remove incomplete checkpoints first (in a data-parallel run, rank 0 alone)."""
    for stale in rundir.incomplete_checkpoints(work) if clean_up else []:  # a checkpoint write or delete that was killed
        log(f"removing incomplete checkpoint {stale}")
        shutil.rmtree(stale)
    ckpts = rundir.checkpoints(work)
    if not ckpts:
        return 0, {}
    latest = ckpts[-1]
    conflict = resume_conflict(cfg, work)
    if conflict:
        raise ResumeError(f"run {cfg['run']}: {conflict}. Restore the config, or start the run afresh: delete "
                          f"{work / rundir.CHECKPOINTS_DIR} (or `python -m trainer launch ... --restart`)")
    state = torch.load(latest / rundir.STATE_PT, weights_only=False)
    with torch.no_grad():
        for p in policies:
            for x, saved in zip(p.params, state["params"][p.name]):
                x.copy_(saved)
            p.optimizer.load_state_dict(state["optimizers"][p.name])
            p.scheduler.load_state_dict(state["schedulers"][p.name])
    random.setstate(state["rng"]["python"])
    np.random.set_state(state["rng"]["numpy"])
    torch.set_rng_state(state["rng"]["torch"])
    step = int(state["step"])
    if state.get("sampler") not in (None, sampler(step)):
        raise ResumeError(f"run {cfg['run']}: {latest / rundir.STATE_PT}: sampler position {state['sampler']} does "
                          f"not match training.prompts_per_step and the train data ({sampler(step)}); restart the run")
    logs = {name: [r for r in pd.read_parquet(latest / file).to_dict("records") if r["step"] <= step]
            for name, file in LOGS.items() if (latest / file).exists()}  # warnings: absent in older checkpoints
    logs.setdefault("warnings", [])
    logs["eval"] = [rundir.with_eval_samples(r) for r in logs.get("eval", [])]  # from before eval_samples
    log(f"resumed from {latest.name}")
    return step, logs
