"""Command line of the trainer: what the Snakemake rules call.

python -m trainer base-model --spec JSON --out results/models/tiny/model.json
python -m trainer launch --run-config JSON --base-model MODEL_JSON --run-dir results/runs/RUN
python -m trainer prefetch --model Qwen/Qwen3-0.6B --out results/prefetch/models/qwen3-0.6b.json
python -m trainer pin [--config config.yaml]   # the hub commits written into config.yaml
python -m trainer train --run-dir results/runs/RUN
python -m trainer runs [--config config.yaml] [--matrix paper]
python -m trainer status [--config-file config.yaml] [--config matrix=paper] [--json]
python -m trainer score --task math|code FILE.jsonl
python -m trainer export --run-dir results/runs/RUN --which peak|last --out DIR
python -m trainer install-profile      # makes `snakemake --profile slurm` work from the repo root
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path


def _json_arg(text: str):
    """A JSON value given inline or as @path."""
    if text.startswith("@"):
        text = Path(text[1:]).read_text()
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON ({e})") from e


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit status (0 when done)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "score":
        from trainer.tasks.cli import main as score_main

        return score_main(argv[1:])
    args = build_parser().parse_args(argv)
    return COMMANDS[args.command](args)


def build_parser() -> argparse.ArgumentParser:
    """The command line: one subcommand per entry of COMMANDS (and `score`)."""
    parser = argparse.ArgumentParser(
        prog="python -m trainer", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("base-model", help="resolve or build a scale's base model")
    p.add_argument("--spec", type=_json_arg, required=True, help="the scale's spec (JSON or @file)")
    p.add_argument("--out", required=True, help="model.json to write")
    add_launch_parser(sub)
    add_prefetch_parser(sub)
    add_pin_parser(sub)
    p = sub.add_parser("train", help="train a run in this process (its config.json must exist)")
    p.add_argument("--run-dir", required=True)
    p = sub.add_parser(
        "export", help="write a finished run's peak or last policies (PEFT adapters or full models) with a model card"
    )
    p.add_argument("--run-dir", required=True)
    p.add_argument("--which", required=True, help="peak (done.json's peak model) or last (the last step's)")
    p.add_argument("--out", required=True, help="a new folder: one subfolder per policy and README.md")
    p = sub.add_parser("runs", help="list the run ids of a matrix")
    p.add_argument("--config", default="config.yaml")
    p.add_argument("--schema", default=None, help="default: rules/config.schema.yaml beside the config")
    p.add_argument("--matrix", default=None)
    _add_status_parser(sub)
    _add_plan_parser(sub)
    sub.add_parser("score", help="re-score saved completions (see trainer/tasks/cli.py)")
    p = sub.add_parser(
        "clean",
        help="remove superseded state of unfinished runs (half-written, damaged or "
        "surplus checkpoints, dead temporaries); never a finished run",
    )
    p.add_argument("--results", default="results", help="the results directory (default: results)")
    p.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    p = sub.add_parser("install-profile", help="link profiles/NAME where `snakemake --profile NAME` looks")
    p.add_argument("--name", default="slurm")
    p.add_argument("--repo", default=".", help="the repository root (default: here)")
    return parser


def add_launch_parser(sub: argparse._SubParsersAction) -> None:
    """The `launch` subcommand's arguments."""
    p = sub.add_parser("launch", help="submit one run with submitit and wait for it")
    p.add_argument("--run-config", type=_json_arg, required=True, help="the resolved run config (JSON or @file)")
    p.add_argument("--base-model", required=True, help="the scale's model.json")
    p.add_argument("--run-dir", required=True)
    p.add_argument(
        "--restart",
        action="store_true",
        help="start afresh where the run's checkpoints or live job are of another config (state of the "
        "current config is resumed, never discarded)",
    )
    p.add_argument(
        "--prefetched",
        nargs="*",
        default=[],
        help="the prefetch rules' JSON files of the run's model and datasets (pinned into its config)",
    )


def add_prefetch_parser(sub: argparse._SubParsersAction) -> None:
    """The `prefetch` subcommand's arguments."""
    p = sub.add_parser(
        "prefetch",
        help="fetch a model or dataset into the Hugging Face cache (login node), write its commit or content hash",
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--model", help="a hub id or a local path")
    what.add_argument("--dataset", help="a hub dataset id or a local path")
    p.add_argument(
        "--revision",
        default=None,
        help="the commit config.yaml pins: fails when the hub resolves another (default: main, unpinned)",
    )
    p.add_argument(
        "--config-name",
        action="append",
        default=None,
        help="a dataset configuration the runs read (repeat for each; default: the dataset's default)",
    )
    p.add_argument("--out", required=True, help="the JSON to write")


def prefetch_command(args: argparse.Namespace) -> int:
    """`python -m trainer prefetch`: fetch (or hash) one model or dataset, write what was pinned."""
    from trainer.contract.rundir import write_json_atomic
    from trainer.sweep.prefetch import PrefetchError, prefetch

    kind, name = ("model", args.model) if args.model else ("dataset", args.dataset)
    try:
        info = prefetch(name, kind, args.revision, config_names=args.config_name)
    except PrefetchError as e:
        print(f"error: prefetch of {e}", file=sys.stderr)
        return 1
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(info, args.out)
    print(
        f"{kind} {name}: "
        + (f"revision {info['revision']}" if "revision" in info else f"content hash {info['content_hash']}")
    )
    return 0


def add_pin_parser(sub: argparse._SubParsersAction) -> None:
    """The `pin` subcommand's arguments."""
    p = sub.add_parser(
        "pin", help="write the hub commit of every unpinned model and dataset into the config (trainer/sweep/pins.py)"
    )
    p.add_argument("--config", default="config.yaml", help="the config file to edit in place")
    p.add_argument("--prefetched", default="results/prefetch", help="the prefetch rules' JSONs (else the hub's commit)")


def pin_command(args: argparse.Namespace) -> int:
    """`python -m trainer pin`: pin the commits into the config file."""
    from trainer.sweep.pins import pin_config
    from trainer.sweep.prefetch import PrefetchError

    try:
        written = pin_config(args.config, args.prefetched)
    except (PrefetchError, ValueError) as e:
        print(f"error: pin: {e}", file=sys.stderr)
        return 1
    for where, commit in written.items():
        print(f"{where}: revision {commit}")
    print(f"{len(written)} revisions written into {args.config}" if written else "every hub source is pinned already")
    return 0


def _add_config_options(p: argparse.ArgumentParser) -> None:
    """The config options of `status` and `plan`: config files and overrides as Snakemake takes them."""
    p.add_argument(
        "--config-file",
        action="append",
        default=None,
        help="config files merged in order like Snakemake's --configfile (default: config.yaml)",
    )
    p.add_argument(
        "--config",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="overrides like Snakemake's --config, e.g. matrix=paper 'seeds=[0,1]'",
    )
    p.add_argument(
        "--config-json",
        type=_json_arg,
        default=None,
        help="an already merged config (JSON or @file; what `snakemake status` passes)",
    )
    p.add_argument("--schema", default=None, help="default: rules/config.schema.yaml beside the first config file")
    p.add_argument("--matrix", default=None, help="the matrix to list (default: the config's `matrix`)")
    p.add_argument("--results", default="results", help="the results directory (default: results)")
    p.add_argument("--json", action="store_true", help="print JSON rows instead of a table")


def _add_status_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "status", help="where every run of the matrix stands (not started, queued, running, failed, interrupted, done)"
    )
    _add_config_options(p)


def _add_plan_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="the cost plan of the matrix: step times, GPU-hours, which runs fit their time limit (results/plan.csv)",
    )
    _add_config_options(p)
    p.add_argument(
        "--gpu",
        default="H100",
        help="the GPU that GPU runs are planned on (matched in the measured files' device names; default H100)",
    )
    p.add_argument(
        "--parallel",
        type=int,
        default=None,
        help="runs at once for the wall time (default: all on SLURM, else cores / a run's cpus)",
    )
    p.add_argument("--out", default=None, help="the CSV to write (default: RESULTS/plan.csv)")
    p.add_argument("--html", default=None, help="also write the plan as HTML here (the report's table)")
    p.add_argument("--measured", default=None, help="measured rates' folder (default: trainer/sweep/measured_rates)")
    p.add_argument(
        "--measure",
        action="store_true",
        help="first time two steps per workflow and task here, into the measured rates",
    )


def base_model_command(args: argparse.Namespace) -> int:
    """`python -m trainer base-model`: resolve or build a scale's base model."""
    from trainer.models.base_model import build_base_model

    build_base_model(args.spec, args.out)
    return 0


def launch_command(args: argparse.Namespace) -> int:
    """`python -m trainer launch`: submit one run and wait for it; 1 when it cannot be launched."""
    from trainer.sweep.launch import LaunchError, launch

    try:
        launch(args.run_config, args.base_model, args.run_dir, restart=args.restart, prefetched=args.prefetched)
    except LaunchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def train_command(args: argparse.Namespace) -> int:
    """`python -m trainer train`: train a run in this process."""
    from trainer.rl.run import run_training

    run_training(args.run_dir)
    return 0


def export_command(args: argparse.Namespace) -> int:
    """`python -m trainer export`: a finished run's peak or last policies; 1 with the reason when it cannot."""
    from trainer.sweep.export import ExportError, export

    try:
        written = export(args.run_dir, args.which, args.out)
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print("\n".join(str(p) for p in written))
    return 0


def install_profile_command(args: argparse.Namespace) -> int:
    """`python -m trainer install-profile`: link a Snakemake profile where Snakemake looks."""
    from trainer.sweep.profiles import install_profile

    print(install_profile(Path(args.repo), args.name))
    return 0


def runs_command(args: argparse.Namespace) -> int:
    """`python -m trainer runs`: the run ids of a matrix, one a line."""
    from trainer.sweep.config import expand_matrix, load_config

    schema_path = args.schema or Path(args.config).resolve().parent / "rules" / "config.schema.yaml"
    config = load_config(args.config, schema_path)
    for run in expand_matrix(config, args.matrix):
        print(run)
    return 0


def merge_config(base: dict, update: dict) -> dict:
    """`update` merged into `base` recursively (dicts key by key, anything else replaced), as Snakemake does."""
    out = dict(base)
    for key, value in update.items():
        out[key] = (
            merge_config(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


def load_cli_config(args: argparse.Namespace) -> dict:
    """The config of `status` and `plan`: loaded, merged and validated as Snakemake would (ConfigError)."""
    import yaml

    from trainer.contract.config import ConfigError
    from trainer.sweep.config import load_yaml, validate_config

    files = args.config_file or ["config.yaml"]
    schema_path = args.schema or Path(files[0]).resolve().parent / "rules" / "config.schema.yaml"
    config: dict = {}
    if args.config_json is not None:
        config = args.config_json
    else:
        for path in files:
            config = merge_config(config, load_yaml(path))
    for item in args.config:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--config {item!r}: expected KEY=VALUE")
        config = merge_config(config, {key: yaml.safe_load(value)})
    validate_config(config, load_yaml(schema_path))
    if args.matrix is not None and args.matrix not in config["matrices"]:
        raise ConfigError(f"--matrix: {args.matrix!r} is not one of matrices: {sorted(config['matrices'])}")
    return config


def status_command(args: argparse.Namespace) -> int:
    """`python -m trainer status`: load and validate the config as Snakemake would, list the runs."""
    from trainer.contract.config import ConfigError
    from trainer.sweep.status import as_json, format_table, matrix_status, stale_lock_message

    try:
        config = load_cli_config(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = matrix_status(config, args.results, args.matrix)
    print(as_json(rows) if args.json else format_table(rows))
    lock = stale_lock_message(Path.cwd())
    if lock:
        print(lock, file=sys.stderr if args.json else sys.stdout)
    return 0


def plan_command(args: argparse.Namespace) -> int:
    """`python -m trainer plan`: the matrix's cost plan, from measured step rates (or stated estimates)."""
    from trainer.contract.config import ConfigError
    from trainer.sweep.measured import MEASURED_DIR, load_rates
    from trainer.sweep.plan import as_json, default_parallel, plan_rows, summary, write_html, write_plan

    measured = Path(args.measured) if args.measured else MEASURED_DIR
    try:
        config = load_cli_config(args)
        if args.measure:
            from trainer.sweep.measure_steps import measure

            measure(config, args.matrix, args.results, directory=measured)
        df = plan_rows(config, args.results, args.matrix, gpu=args.gpu, rates=load_rates(measured))
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    text = summary(df, args.parallel or default_parallel(df, config["launcher"]["backend"]))
    out = write_plan(df, args.out or Path(args.results) / "plan.csv")
    if args.html:
        write_html(df, text, args.html)
    print(as_json(df) if args.json else f"{text}\nwritten: {out}")
    return 0


def clean_command(args: argparse.Namespace) -> int:
    """`python -m trainer clean`: remove (or list) the superseded state of unfinished runs (trainer/sweep/clean.py)."""
    from trainer.sweep.clean import clean

    found = clean(args.results, dry_run=args.dry_run)
    for path, size in found:
        print(f"{'would remove' if args.dry_run else 'removed'} {path} ({size / 1e9:.3f} GB)")
    print(f"{len(found)} paths, {sum(s for _, s in found) / 1e9:.3f} GB" + (" (dry run)" if args.dry_run else ""))
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "base-model": base_model_command,
    "launch": launch_command,
    "prefetch": prefetch_command,
    "pin": pin_command,
    "train": train_command,
    "export": export_command,
    "install-profile": install_profile_command,
    "status": status_command,
    "plan": plan_command,
    "runs": runs_command,
    "clean": clean_command,
}


if __name__ == "__main__":
    sys.exit(main())
