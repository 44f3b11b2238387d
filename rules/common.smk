# Config validation, the matrix, path helpers and input functions. Logic lives in `trainer`
# (the matrix's answers in trainer/sweep/dag.py, each computed once); this file only names paths.
import inspect
import json
import shlex
import sys
from pathlib import Path

from snakemake.common import overwrite_function_params

sys.path.insert(0, workflow.basedir)  # the packages of this repository, installed or not

from trainer.sweep.config import (
    base_model_spec,
    load_yaml,
    restart_requested,
    validate_config,
)
from trainer.sweep import dag
from trainer.sweep.preflight import check_matrix
from trainer.sweep.gate import check_matrix as check_plan
from trainer.sweep.prefetch import revision_arg, use_hf_home
from trainer.contract.runid import RUN_ID_PATTERN, parse_run_id

validate_config(config, load_yaml(Path(workflow.basedir) / "rules" / "config.schema.yaml"))
RESULTS = config.get("results_dir") or "results"  # a scratch file system: --config results_dir=/scratch/...
MATRIX = dag.MatrixRuns(config, RESULTS)  # every run resolved once
check_matrix(config, MATRIX.resolved)  # a rollout backend that cannot start in this environment fails here
check_plan(config, resolved=MATRIX.resolved)  # a run whose one eval cannot fit its job is refused here (gate.py)

use_hf_home(config)  # the Hugging Face cache of prefetch and of every job it starts: --config hf_home=...
RUNS = MATRIX.run_ids
SCALES = sorted({parse_run_id(r).scale for r in RUNS})


def per_job(func):
    """`func` with its signature read once: Snakemake reads a param or input function's signature on every
    job it calls it for, which at 10,000 runs and a param per hashed key is most of a dry-run."""
    overwrite_function_params(func, inspect.signature(func).parameters)
    return func


def run_dir(run):
    return MATRIX.run_dir(run)


def run_file(run, name):
    return f"{run_dir(run)}/{name}"


def finished_run_dirs(wildcards):
    """The run directories of the matrix whose done.json exists (looked at when the DAG is built)."""
    return " ".join(dag.finished_run_dirs(MATRIX.run_dirs()))


def finished_runs_stamp(wildcards):
    """Each finished run with its done.json's modification time: as a parameter, a rerun trigger of
    `figures` when a run finishes, or finishes again."""
    return dag.finished_runs_stamp(MATRIX.run_dirs())


@per_job
def scale_env(wildcards, output):
    """The `env NAME=value ...` prefix of a job's command (names sorted): its scale's `env` in config, or nothing.

    It takes `output`, so Snakemake counts it a derived parameter: no rerun trigger.
    """
    scale = wildcards.scale if hasattr(wildcards, "scale") else MATRIX.run(wildcards.run).scale
    env = config["scales"][scale].get("env") or {}
    return " ".join(["env"] + [f"{name}={shlex.quote(value)}" for name, value in sorted(env.items())]) if env else ""


@per_job
def train_priority(wildcards):
    """The train job's priority: its most model calls, so the longest runs start first."""
    return MATRIX.priority(wildcards.run)


@per_job
def base_model_json(wildcards):
    return f"{RESULTS}/models/{MATRIX.run(wildcards.run).scale}/model.json"


@per_job
def prefetch_inputs(wildcards):
    """The prefetch JSONs a run's train job needs (its scale's model, its task's hub datasets)."""
    return MATRIX.prefetch_inputs(wildcards.run)


def hub_dataset_id(wildcards):
    """The dataset id of a prefetch_dataset job (its file name spells `/` as `--`), quoted for the shell."""
    return shlex.quote(MATRIX.hub_dataset_id(wildcards.dataset))


def prefetch_model_revision(wildcards):
    """`--revision COMMIT` of a prefetch_model job whose scale pins one (empty: unpinned)."""
    return revision_arg(config["scales"][wildcards.scale].get("revision"))


def hub_dataset_revision(wildcards):
    """`--revision COMMIT` of a prefetch_dataset job whose sources pin one (empty: unpinned)."""
    return MATRIX.hub_dataset_revision(wildcards.dataset)


def hub_dataset_configs(wildcards):
    """`--config-name` arguments of a prefetch_dataset job: every configuration of the dataset a run reads."""
    return MATRIX.hub_dataset_configs(wildcards.dataset)


@per_job
def run_config_arg(wildcards, output):
    """The run's resolved config, quoted for the shell.

    It takes `output`: a derived parameter, so no rerun trigger (it holds launcher and
    resources too); the trigger is HASHED_PARAMS.
    """
    return MATRIX.run_config_json(wildcards.run)


@per_job
def run_dir_param(wildcards):
    return run_dir(wildcards.run)


@per_job
def hashed_outside(wildcards):
    """A run outside the matrix: its hashed items that the matrix's plain string params do not hold."""
    return MATRIX.items_outside(wildcards.run)


def hashed_param(key):
    """A param function: `key=value` of the run's hashed config, or "" where the run has no such key."""

    @per_job
    def param(wildcards):
        return MATRIX.trigger_items(wildcards.run).get(key, "")

    return param


# The train rule's rerun trigger: one param per leaf of the runs' hashed config (what decides
# results), so a changed key is named in the rerun reason; launcher, resources and poll intervals
# never rerun a finished run. `hashed_absent` keeps "" in every job's set of values, so a key
# added for another run's sake (a new scale, task) changes nothing for this one.
# A key whose item is the same for every run is a plain string: no function call per job;
# `hashed_outside` holds what those strings do not of a run outside the matrix (a target of its own).
HASHED_PARAMS = {"hashed_absent": "", "hashed_outside": hashed_outside}
for _name, (_key, _same) in MATRIX.hashed_params().items():
    HASHED_PARAMS[_name] = _same if _same is not None else hashed_param(_key)


@per_job
def restart_flag(wildcards, output):
    """`--restart` for the runs that `--config restart=...` names, else nothing.

    It takes `output` so that Snakemake counts it a derived parameter: those are no rerun
    trigger, so switching restart on or off never reruns a finished run by itself.
    """
    return "--restart" if restart_requested(config, wildcards.run) else ""


def runs_at_once():
    """How many train jobs Snakemake runs at once: its cores (each train job takes one thread)."""
    return max(1, workflow.cores or 1)


def status_config_arg(wildcards):
    """The merged config (config.yaml, --configfile, --config), quoted for the shell."""
    return shlex.quote(json.dumps(config, sort_keys=True))


def base_model_arg(wildcards):
    matrix = config["matrices"][config["matrix"]]
    return shlex.quote(json.dumps(base_model_spec(config, wildcards.scale, matrix["tasks"]), sort_keys=True))


def analysis_inputs(runs):
    """The logs the analysis reads of each run (samples.parquet is optional, so not an input)."""
    names = ["config.json", "train.parquet", "eval.parquet", "done.json"]
    return [run_file(r, n) for r in runs for n in names]


def progress_args():
    """`python -m analysis progress`'s arguments: every run directory of the matrix, with --include-running
    under `--config include_running=true` (curves of running runs, from their work/ logs)."""
    flag = "--include-running " if config.get("include_running") else ""
    run_dirs = " ".join(MATRIX.run_dirs())
    return f"{flag}-- {run_dirs}"


def running_steps():
    """Where the running runs stand (work/progress.json), under include_running: a parameter, so a later
    `snakemake figures --config include_running=true` redraws once a running run has moved on."""
    return dag.running_steps(MATRIX.run_dirs()) if config.get("include_running") else ""


def analysis_arg():
    return shlex.quote(json.dumps(config["analysis"], sort_keys=True))


def report_files(path, caption, categories):
    """`report()` outputs for each name -> category: the path and caption patterns filled with the name."""
    return [report(path.format(n), caption=caption.format(n), category=c) for n, c in categories.items()]


def get_final_output():
    """Everything the default target builds: every run, the summary, the figures and the plan beside the runs."""
    return [run_file(r, "done.json") for r in RUNS] + FIGURES + [f"{RESULTS}/tables/plan_vs_actual.csv"]


from analysis import names as analysis_names

FIGURES = [f"{RESULTS}/figures/{n}.{ext}" for n in analysis_names.FIGURES for ext in analysis_names.FIGURE_FORMATS]
FIGURES += [f"{RESULTS}/tables/{n}.{ext}" for n in analysis_names.TABLES for ext in ("csv", "md", "html")]
FIGURES += [f"{RESULTS}/summary.{ext}" for ext in ("csv", "md", "tex")]


wildcard_constraints:
    run=RUN_ID_PATTERN,
    scale="|".join(map(lambda s: s.replace(".", r"\."), config["scales"])),
