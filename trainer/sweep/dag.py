"""What the Snakemake rules ask of the matrix in use, each answer computed once (rules/common.smk calls these).

Snakemake calls a rule's input, param and priority functions once per job, and common.smk builds the train
rule's rerun trigger at parse time: resolving a run's config afresh in each call made a dry-run of 10,000
runs take minutes. `MatrixRuns` resolves every run once (trainer.sweep.config.resolve_matrix: once per cell,
the runs of a cell differ in their seed alone) and keeps what the rules read of it; answers that no seed
changes (priority, prefetch inputs, the hashed keys) are kept per cell. Library code: it takes the config
and the results directory, never Snakemake's globals; the readers of run directories take the directories.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trainer.contract import rundir
from trainer.contract.runid import RunId, parse_run_id
from trainer.sweep.config import resolve_matrix, resolve_run_config
from trainer.sweep.cost import run_turns
from trainer.sweep.launch import rerun_trigger_items
from trainer.sweep.prefetch import (
    dataset_config_names,
    dataset_key,
    hf_dataset_specs,
    needs_model_prefetch,
    pinned_revision,
    revision_arg,
)

HASHED_PARAM_PREFIX = "hashed_"


def hashed_param_name(key: str) -> str:
    """The train rule's param name of a dotted hashed key: `training.lora.r` -> `hashed_training_lora_r`."""
    return HASHED_PARAM_PREFIX + "".join(c if c.isalnum() else "_" for c in key)


class MatrixRuns:
    """The runs of the matrix in use, each resolved once, and what the rules read of them.

    The resolved configs share their sections between the runs of a cell: read them, never modify them.
    """

    def __init__(self, config: dict[str, Any], results: str) -> None:
        self.config = config
        self.results = results
        self.resolved = resolve_matrix(config)
        self.run_ids = [str(r) for r in self.resolved]
        self._runs = {str(r): r for r in self.resolved}
        self._trigger_items: dict[str, dict[str, str]] = {}
        self._per_cell: dict[tuple[str, str], Any] = {}
        self._hub_specs: list[dict[str, Any]] | None = None
        self._shared_items: set[str] | None = None  # hashed_params' plain string items

    def run(self, run_id: str) -> RunId:
        """The RunId of a run id of the matrix, or of any valid run id (a target Snakemake was given)."""
        return self._runs.get(run_id) or parse_run_id(run_id)

    def run_config(self, run_id: str) -> dict[str, Any]:
        """The run's resolved config (trainer.sweep.config.resolve_run_config's), shared: read it only."""
        found = self.resolved.get(self.run(run_id))
        return found if found is not None else resolve_run_config(self.config, self.run(run_id))

    def _cell(self, what: str, run_id: str, compute: Any) -> Any:
        """`compute(run config)` once per cell: for answers that no seed changes."""
        key = (what, self.run(run_id).cell)
        if key not in self._per_cell:
            self._per_cell[key] = compute(self.run_config(run_id))
        return self._per_cell[key]

    def run_dir(self, run_id: str) -> str:
        return f"{self.results}/runs/{run_id}"

    def run_dirs(self) -> list[str]:
        """Every run directory of the matrix, in the matrix's order."""
        return [self.run_dir(r) for r in self.run_ids]

    def run_config_json(self, run_id: str) -> str:
        """The run's resolved config as the launcher's --run-config reads it, quoted for the shell."""
        return shlex.quote(json.dumps(self.run_config(run_id), sort_keys=True))

    def priority(self, run_id: str) -> int:
        """The train job's priority: its most model calls (cost.run_turns), so the longest runs start first."""
        return self._cell("priority", run_id, run_turns)

    def trigger_items(self, run_id: str) -> dict[str, str]:
        """`key=value` by dotted key of the run's hashed config: the train rule's rerun trigger (launch.py)."""
        items = self._trigger_items.get(run_id)
        if items is None:  # a cell's runs differ in `run` and `seed` alone: the rest is read once per cell
            own = rerun_trigger_items({"run": run_id, "seed": self.run(run_id).seed})
            cell = self._cell("trigger_items", run_id, rerun_trigger_items)
            items = self._trigger_items[run_id] = {**cell, "run": own["run"], "seed": own["seed"]}
        return items

    def hashed_params(self) -> dict[str, tuple[str, str | None]]:
        """The train rule's rerun trigger: param name -> (dotted key, its item where every run of the matrix has
        the same one, else None) for every hashed key of any run, in the order first met.

        An item the same for every run can be a plain string param, for which Snakemake calls no function on
        each job; not one with a brace, which Snakemake would read as a wildcard."""
        values: dict[str, set[str]] = {}
        runs_with: dict[str, int] = {}
        for run_id in self.run_ids:
            for key, item in self.trigger_items(run_id).items():
                values.setdefault(key, set()).add(item)
                runs_with[key] = runs_with.get(key, 0) + 1
        params: dict[str, tuple[str, str | None]] = {}
        for key, items in values.items():
            item = next(iter(items)) if len(items) == 1 and runs_with[key] == len(self.run_ids) else None
            params.setdefault(hashed_param_name(key), (key, item if item is not None and "{" not in item else None))
        self._shared_items = {item for _, item in params.values() if item is not None}
        return params

    def items_outside(self, run_id: str) -> str:
        """For a run outside the matrix (a target of its own), its hashed items that the shared string params of
        hashed_params do not hold, sorted and space-separated: so that a change of such a setting still reruns
        it. "" for a run of the matrix, whose items the params hold."""
        if run_id in self._runs:
            return ""
        if self._shared_items is None:
            self.hashed_params()
        return " ".join(sorted(set(self.trigger_items(run_id).values()) - self._shared_items))

    def prefetch_inputs(self, run_id: str) -> list[str]:
        """The prefetch JSONs a run's train job needs: its scale's model (a hub id or local path; not `tiny`)
        and every hub dataset of its task. The launcher pins what they say into config.json."""

        def files(rc: dict[str, Any]) -> list[str]:
            out = (
                [f"{self.results}/prefetch/models/{rc['scale']}.json"]
                if needs_model_prefetch(rc["model"]["name"])
                else []
            )
            out += [
                f"{self.results}/prefetch/datasets/{dataset_key(s['path'])}.json"
                for s in hf_dataset_specs(rc["task_params"])
            ]
            return sorted(set(out))

        return self._cell("prefetch", run_id, files)

    def hub_dataset_specs(self) -> list[dict[str, Any]]:
        """Every distinct hub dataset spec of the matrix's runs, in the order first met (one task's specs are
        read once per cell)."""
        if self._hub_specs is None:
            found: dict[str, dict[str, Any]] = {}
            for run_config, _ in _first_of_cells(self.resolved):
                for spec in hf_dataset_specs(run_config["task_params"]):
                    found.setdefault(json.dumps(spec, sort_keys=True, default=str), spec)
            self._hub_specs = list(found.values())
        return self._hub_specs

    def hub_dataset_id(self, key: str) -> str:
        """The hub id of a prefetch_dataset job's file name (dataset_key spells `/` as `--`)."""
        found = sorted({s["path"] for s in self.hub_dataset_specs() if dataset_key(s["path"]) == key})
        if not found:
            raise ValueError(f"prefetch_dataset: no hub dataset of the matrix is spelled {key!r}")
        return found[0]

    def hub_dataset_configs(self, key: str) -> str:
        """`--config-name` arguments of a prefetch_dataset job: every configuration of the dataset a run reads."""
        names = dataset_config_names(self.hub_dataset_specs(), self.hub_dataset_id(key))
        return " ".join(f"--config-name {shlex.quote(n)}" for n in names)

    def hub_dataset_revision(self, key: str) -> str:
        """`--revision COMMIT` of a prefetch_dataset job whose sources pin one (empty: unpinned)."""
        return revision_arg(pinned_revision(self.hub_dataset_specs(), self.hub_dataset_id(key), "tasks"))


def _first_of_cells(resolved: dict[RunId, dict[str, Any]]) -> Iterable[tuple[dict[str, Any], RunId]]:
    """Each cell's first run config and run."""
    seen: set[str] = set()
    for run, run_config in resolved.items():
        if run.cell not in seen:
            seen.add(run.cell)
            yield run_config, run


def finished_run_dirs(run_dirs: Iterable[str]) -> list[str]:
    """The run directories whose done.json exists (looked at when the DAG is built)."""
    return [d for d in run_dirs if Path(d, rundir.DONE_JSON).exists()]


def finished_runs_stamp(run_dirs: Iterable[str]) -> str:
    """Each finished run with its done.json's modification time (`run@ns`, space-separated): as a parameter, a
    rerun trigger of `figures` when a run finishes, or finishes again."""
    stamps = []
    for d in run_dirs:
        done = Path(d, rundir.DONE_JSON)
        if done.exists():
            stamps.append(f"{done.parent.name}@{done.stat().st_mtime_ns}")
    return " ".join(stamps)


def running_steps(run_dirs: Iterable[str]) -> str:
    """Where the unfinished runs stand (`run@step` from work/progress.json, space-separated): as a parameter
    under include_running, `snakemake figures` redraws once a running run has moved on."""
    steps = []
    for d in run_dirs:
        progress = Path(d, rundir.WORK_DIR, rundir.PROGRESS_JSON)
        if not Path(d, rundir.DONE_JSON).exists() and progress.exists():
            steps.append(f"{Path(d).name}@{json.loads(progress.read_text())['step']}")
    return " ".join(steps)
