# Config validation, the matrix, path helpers and input functions. Logic lives in `trainer`;
# this file only names paths.
import json
import shlex
import sys
from pathlib import Path

sys.path.insert(0, workflow.basedir)  # the packages of this repository, installed or not

from snakemake.cli import get_argument_parser

from trainer.sweep.config import (
    base_model_spec,
    expand_matrix,
    load_yaml,
    resolve_run_config,
    restart_requested,
    validate_config,
)
from trainer.sweep.preflight import check_matrix
from trainer.sweep.runid import RUN_ID_PATTERN, parse_run_id
from trainer.workflows import run_turns


validate_config(config, load_yaml(Path(workflow.basedir) / "rules" / "config.schema.yaml"))
check_matrix(config)  # a rollout backend that cannot start in this environment fails here (issue 18)

RESULTS = "results"
RUNS = [str(r) for r in expand_matrix(config)]
SCALES = sorted({parse_run_id(r).scale for r in RUNS})


def requested_targets():
    """The targets named on the command line (Snakemake exposes none while parsing)."""
    args, _ = get_argument_parser().parse_known_args(sys.argv[1:])
    return set(args.targets or [])


# `snakemake figures` re-analyses what has finished and must never train: in that mode the
# train rules are not even defined, so the run logs are plain source files of the DAG.
REANALYSIS = "figures" in requested_targets()


def run_dir(run):
    return f"{RESULTS}/runs/{run}"


def run_file(run, name):
    return f"{run_dir(run)}/{name}"


def finished_runs():
    """Runs of the matrix whose done.json exists."""
    return [r for r in RUNS if Path(run_file(r, "done.json")).exists()]


ANALYSED_RUNS = finished_runs() if REANALYSIS else RUNS


# Jobs of a CPU scale (`tiny`) run under glibc allocator settings that keep freed memory instead
# of mapping and unmapping every large tensor (DESIGN.md: it halved CPU step times); not set for
# the real scales, whose jobs hold large host buffers that should be returned.
CPU_ALLOCATOR = "env GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"


def cpu_env(wildcards, output):
    """The allocator prefix of a job's command: CPU_ALLOCATOR for the tiny scale, else nothing.

    It takes `output`, so Snakemake counts it a derived parameter: no rerun trigger.
    """
    scale = wildcards.scale if hasattr(wildcards, "scale") else parse_run_id(wildcards.run).scale
    return CPU_ALLOCATOR if config["scales"][scale]["model"] == "tiny" else ""


def train_priority(wildcards):
    """The train job's priority: its most model calls, so the longest runs start first."""
    return run_turns(resolve_run_config(config, parse_run_id(wildcards.run)))


def base_model_json(wildcards):
    return f"{RESULTS}/models/{parse_run_id(wildcards.run).scale}/model.json"


def run_config_arg(wildcards):
    """The run's resolved config, quoted for the shell."""
    return shlex.quote(json.dumps(resolve_run_config(config, parse_run_id(wildcards.run)), sort_keys=True))


def restart_flag(wildcards, output):
    """`--restart` for the runs that `--config restart=...` names, else nothing.

    It takes `output` so that Snakemake counts it a derived parameter: those are no rerun
    trigger, so switching restart on or off never reruns a finished run by itself.
    """
    return "--restart" if restart_requested(config, wildcards.run) else ""


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


def analysis_arg():
    return shlex.quote(json.dumps(config["analysis"], sort_keys=True))


def get_final_output():
    """Everything the default target builds: every run, the summary and the figures."""
    return [run_file(r, "done.json") for r in RUNS] + FIGURES


from analysis import names as analysis_names

FIGURES = [f"{RESULTS}/figures/{n}.{ext}" for n in analysis_names.FIGURES for ext in analysis_names.FIGURE_FORMATS]
FIGURES += [f"{RESULTS}/tables/{n}.{ext}" for n in analysis_names.TABLES for ext in ("csv", "md", "html")]
FIGURES += [f"{RESULTS}/summary.{ext}" for ext in ("csv", "md", "tex")]


wildcard_constraints:
    run=RUN_ID_PATTERN,
    scale="|".join(map(lambda s: s.replace(".", r"\."), config["scales"])),
