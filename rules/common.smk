# Config validation, the matrix, path helpers and input functions. Logic lives in `trainer`;
# this file only names paths.
import functools
import json
import shlex
import sys
from pathlib import Path

sys.path.insert(0, workflow.basedir)  # the packages of this repository, installed or not

from trainer.sweep.config import (
    base_model_spec,
    expand_matrix,
    load_yaml,
    resolve_run_config,
    restart_requested,
    validate_config,
)
from trainer.sweep.launch import rerun_trigger_items
from trainer.sweep.preflight import check_matrix
from trainer.sweep.gate import check_matrix as check_plan
from trainer.sweep.prefetch import (
    dataset_config_names,
    dataset_key,
    hf_dataset_specs,
    needs_model_prefetch,
    pinned_revision,
    revision_arg,
    use_hf_home,
)
from trainer.contract.runid import RUN_ID_PATTERN, parse_run_id
from trainer.sweep.cost import run_turns

validate_config(config, load_yaml(Path(workflow.basedir) / "rules" / "config.schema.yaml"))
check_matrix(config)  # a rollout backend that cannot start in this environment fails here
check_plan(config)  # a run whose one eval cannot fit its job is refused here (trainer/sweep/gate.py)

RESULTS = config.get("results_dir") or "results"  # a scratch file system: --config results_dir=/scratch/...
use_hf_home(config)  # the Hugging Face cache of prefetch and of every job it starts: --config hf_home=...
RUNS = [str(r) for r in expand_matrix(config)]
SCALES = sorted({parse_run_id(r).scale for r in RUNS})


def run_dir(run):
    return f"{RESULTS}/runs/{run}"


def run_file(run, name):
    return f"{run_dir(run)}/{name}"


def finished_run_dirs(wildcards):
    """The run directories of the matrix whose done.json exists (looked at when the DAG is built)."""
    return " ".join(run_dir(r) for r in RUNS if Path(run_file(r, "done.json")).exists())


def finished_runs_stamp(wildcards):
    """Each finished run with its done.json's modification time: as a parameter, a rerun trigger of
    `figures` when a run finishes, or finishes again."""
    done = [Path(run_file(r, "done.json")) for r in RUNS]
    return " ".join(f"{p.parent.name}@{p.stat().st_mtime_ns}" for p in done if p.exists())


def scale_env(wildcards, output):
    """The `env NAME=value ...` prefix of a job's command (names sorted): its scale's `env` in config, or nothing.

    It takes `output`, so Snakemake counts it a derived parameter: no rerun trigger.
    """
    scale = wildcards.scale if hasattr(wildcards, "scale") else parse_run_id(wildcards.run).scale
    env = config["scales"][scale].get("env") or {}
    return " ".join(["env"] + [f"{name}={shlex.quote(value)}" for name, value in sorted(env.items())]) if env else ""


def train_priority(wildcards):
    """The train job's priority: its most model calls, so the longest runs start first."""
    return run_turns(resolve_run_config(config, parse_run_id(wildcards.run)))


def base_model_json(wildcards):
    return f"{RESULTS}/models/{parse_run_id(wildcards.run).scale}/model.json"


def prefetch_inputs(wildcards):
    """The prefetch JSONs a run's train job needs: its scale's model (a hub id or local path; not
    `tiny`) and every hub dataset of its task. The launcher pins what they say into config.json."""
    rc = resolve_run_config(config, parse_run_id(wildcards.run))
    files = [f"{RESULTS}/prefetch/models/{rc['scale']}.json"] if needs_model_prefetch(rc["model"]["name"]) else []
    files += [f"{RESULTS}/prefetch/datasets/{dataset_key(s['path'])}.json" for s in hf_dataset_specs(rc["task_params"])]
    return sorted(set(files))


def hub_dataset_specs():
    """Every hub dataset spec of the matrix's runs."""
    return [s for r in RUNS for s in hf_dataset_specs(resolve_run_config(config, parse_run_id(r))["task_params"])]


def hub_dataset_id(wildcards):
    """The dataset id of a prefetch_dataset job (its file name spells `/` as `--`)."""
    found = [i for i in {s["path"] for s in hub_dataset_specs()} if dataset_key(i) == wildcards.dataset]
    if not found:
        raise ValueError(f"prefetch_dataset: no hub dataset of the matrix is spelled {wildcards.dataset!r}")
    return shlex.quote(found[0])


def prefetch_model_revision(wildcards):
    """`--revision COMMIT` of a prefetch_model job whose scale pins one (empty: unpinned)."""
    return revision_arg(config["scales"][wildcards.scale].get("revision"))


def hub_dataset_revision(wildcards):
    """`--revision COMMIT` of a prefetch_dataset job whose sources pin one (empty: unpinned)."""
    repo = shlex.split(hub_dataset_id(wildcards))[0]
    return revision_arg(pinned_revision(hub_dataset_specs(), repo, "tasks"))


def hub_dataset_configs(wildcards):
    """`--config-name` arguments of a prefetch_dataset job: every configuration of the dataset a run reads."""
    names = dataset_config_names(hub_dataset_specs(), shlex.split(hub_dataset_id(wildcards))[0])
    return " ".join(f"--config-name {shlex.quote(n)}" for n in names)


def run_config_arg(wildcards, output):
    """The run's resolved config, quoted for the shell.

    It takes `output`: a derived parameter, so no rerun trigger (it holds launcher and
    resources too); the trigger is HASHED_PARAMS.
    """
    return shlex.quote(json.dumps(resolve_run_config(config, parse_run_id(wildcards.run)), sort_keys=True))


@functools.lru_cache(maxsize=None)
def run_trigger_items(run):
    """The run's `key=value` items of its hashed config (cached: one resolve per run, not per key)."""
    return rerun_trigger_items(resolve_run_config(config, parse_run_id(run)))


def hashed_param(key):
    """A param function: `key=value` of the run's hashed config, or "" where the run has no such key."""

    def param(wildcards):
        return run_trigger_items(wildcards.run).get(key, "")

    return param


# The train rule's rerun trigger: one param per leaf of the runs' hashed config (what decides
# results), so a changed key is named in the rerun reason; launcher, resources and poll intervals
# never rerun a finished run. `hashed_absent` keeps "" in every job's set of values, so a key
# added for another run's sake (a new scale, task) changes nothing for this one.
HASHED_PARAMS = {"hashed_absent": ""}
for _run in RUNS:
    for _key in run_trigger_items(_run):
        _name = "hashed_" + "".join(c if c.isalnum() else "_" for c in _key)
        HASHED_PARAMS.setdefault(_name, hashed_param(_key))


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
    run_dirs = " ".join(run_dir(r) for r in RUNS)
    return f"{flag}-- {run_dirs}"


def running_steps():
    """Where the running runs stand (work/progress.json), under include_running: a parameter, so a later
    `snakemake figures --config include_running=true` redraws once a running run has moved on."""
    if not config.get("include_running"):
        return ""
    steps = [
        (r, Path(run_dir(r), "work", "progress.json")) for r in RUNS if not Path(run_file(r, "done.json")).exists()
    ]
    return " ".join(f"{r}@{json.loads(p.read_text())['step']}" for r, p in steps if p.exists())


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
