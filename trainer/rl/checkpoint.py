"""Checkpoint and resume of one run: everything a resume needs, written whole or not at all.

The layout (work/checkpoints/step-N/{state.pt, policies/, config.json, the logs so far, manifest.json}) is
named in trainer/contract/rundir.py; whether a checkpoint may be resumed under a config is the check of
trainer.contract.config.resume_conflict, which the launcher also makes before it submits. How a checkpoint
is made durable and verified, and what a resume does with a damaged one: trainer/rl/checkpoint_files.py.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from trainer.contract import rundir
from trainer.contract.config import changed_keys
from trainer.rl.checkpoint_files import damage, fsync_path, move_aside, seal
from trainer.rl.policies import PolicySet
from trainer.rl.stopping import pause_for_tests

LOGS = {
    "train": rundir.TRAIN_PARQUET,
    "eval": rundir.EVAL_PARQUET,
    "samples": rundir.SAMPLES_PARQUET,
    "warnings": rundir.WARNINGS_PARQUET,
}


def write_run_logs(directory: Path, rows: dict[str, list[dict[str, Any]]]) -> None:
    """Each log (LOGS' names: train, eval, samples, warnings) of `rows` as parquet in `directory`, atomically."""
    schemas = {
        "train": rundir.TRAIN_SCHEMA,
        "eval": rundir.EVAL_SCHEMA,
        "samples": rundir.SAMPLES_SCHEMA,
        "warnings": rundir.WARNINGS_SCHEMA,
    }
    for name, file in LOGS.items():
        rundir.write_parquet_atomic(rundir.to_table(rows[name], schemas[name]), directory / file)


class ResumeError(RuntimeError):
    """A run cannot resume from its checkpoint (the config changed)."""


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written (e.g. the disk is full); the message names its path."""


def sampler_state(step: int, prompts_per_step: int, n_problems: int) -> dict[str, int]:
    """Where the data sampler stands after `step`: the next prompt's position in the epoch order.

    The order of each epoch is a seeded permutation (Trainer.prompts_for_step), so this position
    is all a resume needs; it is stored to check that it agrees with the config.
    """
    position = step * prompts_per_step
    epoch, index = divmod(position, n_problems)
    return {"next_step": step + 1, "position": position, "epoch": epoch, "index": index, "n_problems": n_problems}


def save_checkpoint(
    work: Path,
    step: int,
    cfg: dict[str, Any],
    policies: PolicySet,
    sampler: dict[str, int],
    write_logs: Callable[[Path], None],
    keep_last: int,
) -> None:
    """Each policy (save_pretrained layout), optimizer, scheduler and RNG states, the config and the
    logs so far, under a temporary name sealed (fsync, manifest: checkpoint_files.py) and renamed into
    place; then only the newest `keep_last` are kept. A failed write (a full disk) removes the partial
    one, leaves the earlier checkpoints as they were and raises CheckpointWriteError naming the path."""
    final, tmp = rundir.checkpoint_dir(work, step), rundir.checkpoint_tmp_dir(work, step)
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        policies.save(str(tmp / rundir.POLICIES_DIR))
        pause_for_tests("checkpoint")
        torch.save(
            {
                "step": step,
                "config_hash": cfg["config_hash"],
                "params": {p.name: [x.detach().cpu().clone() for x in p.params] for p in policies},
                "optimizers": {p.name: p.optimizer.state_dict() for p in policies},
                "schedulers": {p.name: p.scheduler.state_dict() for p in policies},
                "sampler": sampler,
                "rng": {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()},
            },
            tmp / rundir.STATE_PT,
        )
        rundir.write_json_atomic(cfg, tmp / rundir.CONFIG_JSON)
        write_logs(tmp)
        seal(tmp)
        fsync_path(tmp.parent)  # the new directory's entry, before the rename
    except (OSError, RuntimeError) as e:  # torch.save reports a failed write (ENOSPC) as a RuntimeError
        shutil.rmtree(tmp, ignore_errors=True)  # the partial write; what it fails on is reported below
        free = shutil.disk_usage(work).free if work.exists() else 0
        raise CheckpointWriteError(
            f"run {cfg['run']}: writing checkpoint {final} (under {tmp}) failed: {e}; "
            f"{free / 2**30:.2f} GiB free there. The earlier checkpoints are intact: free "
            f"space (or move results/ to a larger file system) and rerun"
        ) from e
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    fsync_path(final.parent)  # the rename itself
    for old in rundir.checkpoints(work)[:-keep_last]:
        # renamed first, so a kill during the delete never leaves a partial step-* behind
        doomed = old.parent / f".{old.name}.deleting"
        os.replace(old, doomed)
        shutil.rmtree(doomed)


def load_checkpoint(
    work: Path,
    cfg: dict[str, Any],
    policies: PolicySet,
    sampler: Callable[[int], dict[str, int]],
    log: Callable[[str], None],
    clean_up: bool = True,
) -> tuple[int, dict[str, list[dict[str, Any]]]]:
    """Restore the newest intact checkpoint into `policies` and the RNGs; return its step and its logs
    up to that step (0 and no logs: start afresh). Refuses one written under another config.
    A damaged checkpoint (checkpoint_files.damage, or one that fails to load) is skipped, and moved
    aside as step-N.damaged-REASON with a log line. `clean_up`: remove incomplete checkpoints first and
    move damaged ones aside (in a data-parallel run, rank 0 alone; the others skip the same ones)."""
    for stale in (
        rundir.incomplete_checkpoints(work) if clean_up else []
    ):  # a checkpoint write or delete that was killed
        log(f"removing incomplete checkpoint {stale}")
        shutil.rmtree(stale)
    found = newest_intact(work, cfg, sampler, log, clean_up)
    if found is None:
        return 0, {}
    latest, state, logs = found
    with torch.no_grad():
        for p in policies:
            for x, saved in zip(p.params, state["params"][p.name]):
                x.copy_(saved)
            p.optimizer.load_state_dict(state["optimizers"][p.name])
            p.scheduler.load_state_dict(state["schedulers"][p.name])
    random.setstate(state["rng"]["python"])
    np.random.set_state(state["rng"]["numpy"])
    torch.set_rng_state(state["rng"]["torch"])
    log(f"resumed from {latest.name}")
    return int(state["step"]), logs


def newest_intact(
    work: Path, cfg: dict[str, Any], sampler: Callable[[int], dict[str, int]], log: Callable[[str], None], move: bool
) -> tuple[Path, dict[str, Any], dict[str, list]] | None:
    """The newest checkpoint that verifies and loads, with its state and logs (None: none left). Each newer
    one that does not is logged and, with `move`, moved aside. Raises ResumeError for an intact checkpoint
    written under another config or at another sampler position."""
    for ckpt in reversed(rundir.checkpoints(work)):
        problem = damage(ckpt)
        if problem is None:
            try:
                state, logs = read_checkpoint(ckpt, cfg, sampler)
            except (EOFError, pickle.UnpicklingError, RuntimeError, OSError, ValueError, KeyError) as e:
                if isinstance(e, ResumeError):
                    raise
                problem = ("unreadable", f"{ckpt} does not load: {type(e).__name__}: {e}")
            else:
                return ckpt, state, logs
        reason, what = problem
        aside = move_aside(ckpt, reason) if move else ckpt
        log(f"checkpoint {ckpt.name} is damaged ({what}); moved aside to {aside.name}, trying the one before it")
    return None


def read_checkpoint(
    ckpt: Path, cfg: dict[str, Any], sampler: Callable[[int], dict[str, int]]
) -> tuple[dict[str, Any], dict[str, list]]:
    """A checkpoint's state.pt and its logs up to its step, checked against the run's config."""
    old = json.loads((ckpt / rundir.CONFIG_JSON).read_text())
    if old["config_hash"] != cfg["config_hash"]:
        keys = ", ".join(changed_keys(old, cfg)) or "(base model)"
        raise ResumeError(
            f"run {cfg['run']}: its checkpoint {ckpt} was written under another config; changed: "
            f"{keys}. Its logs up to that step are kept there (train/eval/samples parquet). Restore the "
            f"config, or start the run afresh: delete {ckpt.parent} (or `python -m trainer launch ... "
            f"--restart`)"
        )
    # onto the CPU, whatever device wrote it (else every rank's copy of rank 0's optimizer state lands on
    # cuda:0); copy_ and the optimizers' load_state_dict move each tensor to its parameter's device
    state = torch.load(ckpt / rundir.STATE_PT, weights_only=False, map_location="cpu")
    step = int(state["step"])
    if state.get("sampler") not in (None, sampler(step)):
        raise ResumeError(
            f"run {cfg['run']}: {ckpt / rundir.STATE_PT}: sampler position {state['sampler']} does "
            f"not match training.prompts_per_step and the train data ({sampler(step)}); restart the run"
        )
    logs = {
        name: [r for r in pd.read_parquet(ckpt / file).to_dict("records") if r["step"] <= step]
        for name, file in LOGS.items()
        if (ckpt / file).exists()
    }  # warnings: absent in older checkpoints
    logs.setdefault("warnings", [])
    logs["eval"] = [rundir.with_eval_samples(r) for r in logs.get("eval", [])]  # from before eval_samples
    return state, logs
