"""Command line of the trainer: what the Snakemake rules call.

    python -m trainer base-model --spec JSON --out results/models/tiny/model.json
    python -m trainer launch --run-config JSON --base-model MODEL_JSON --run-dir results/runs/RUN
    python -m trainer train --run-dir results/runs/RUN
    python -m trainer runs [--config config.yaml] [--matrix paper]
    python -m trainer status [--config-file config.yaml] [--config matrix=paper] [--json]
    python -m trainer score --task math|code FILE.jsonl
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
    parser = argparse.ArgumentParser(prog="python -m trainer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("base-model", help="resolve or build a scale's base model")
    p.add_argument("--spec", type=_json_arg, required=True, help="the scale's spec (JSON or @file)")
    p.add_argument("--out", required=True, help="model.json to write")
    p = sub.add_parser("launch", help="submit one run with submitit and wait for it")
    p.add_argument("--run-config", type=_json_arg, required=True, help="the resolved run config (JSON or @file)")
    p.add_argument("--base-model", required=True, help="the scale's model.json")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--restart", action="store_true",
                   help="start afresh where the run's checkpoints or live job are of another config (state of the "
                        "current config is resumed, never discarded)")
    p = sub.add_parser("train", help="train a run in this process (its config.json must exist)")
    p.add_argument("--run-dir", required=True)
    p = sub.add_parser("runs", help="list the run ids of a matrix")
    p.add_argument("--config", default="config.yaml")
    p.add_argument("--schema", default=None, help="default: rules/config.schema.yaml beside the config")
    p.add_argument("--matrix", default=None)
    _add_status_parser(sub)
    sub.add_parser("score", help="re-score saved completions (see trainer/tasks/cli.py)")
    p = sub.add_parser("install-profile", help="link profiles/NAME where `snakemake --profile NAME` looks")
    p.add_argument("--name", default="slurm")
    p.add_argument("--repo", default=".", help="the repository root (default: here)")
    return parser


def _add_status_parser(sub: argparse._SubParsersAction) -> None:
    """`status`'s options: config files and overrides as Snakemake takes them."""
    p = sub.add_parser("status", help="where every run of the matrix stands (not started, queued, running, failed, "
                                      "interrupted, done)")
    p.add_argument("--config-file", action="append", default=None,
                   help="config files merged in order like Snakemake's --configfile (default: config.yaml)")
    p.add_argument("--config", nargs="+", default=[], metavar="KEY=VALUE",
                   help="overrides like Snakemake's --config, e.g. matrix=paper 'seeds=[0,1]'")
    p.add_argument("--config-json", type=_json_arg, default=None,
                   help="an already merged config (JSON or @file; what `snakemake status` passes)")
    p.add_argument("--schema", default=None, help="default: rules/config.schema.yaml beside the first config file")
    p.add_argument("--matrix", default=None, help="the matrix to list (default: the config's `matrix`)")
    p.add_argument("--results", default="results", help="the results directory (default: results)")
    p.add_argument("--json", action="store_true", help="print JSON rows instead of a table")


def base_model_command(args: argparse.Namespace) -> int:
    """`python -m trainer base-model`: resolve or build a scale's base model."""
    from trainer.models.base_model import build_base_model

    build_base_model(args.spec, args.out)
    return 0


def launch_command(args: argparse.Namespace) -> int:
    """`python -m trainer launch`: submit one run and wait for it; 1 when it cannot be launched."""
    from trainer.sweep.launch import LaunchError, launch

    try:
        launch(args.run_config, args.base_model, args.run_dir, restart=args.restart)
    except LaunchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def train_command(args: argparse.Namespace) -> int:
    """`python -m trainer train`: train a run in this process."""
    from trainer.rl.train import run_training

    run_training(args.run_dir)
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
        out[key] = merge_config(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def status_command(args: argparse.Namespace) -> int:
    """`python -m trainer status`: load and validate the config as Snakemake would, list the runs."""
    import yaml

    from trainer.sweep.config import ConfigError, load_yaml, validate_config
    from trainer.sweep.status import as_json, format_table, matrix_status

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
            print(f"error: --config {item!r}: expected KEY=VALUE", file=sys.stderr)
            return 2
        config = merge_config(config, {key: yaml.safe_load(value)})
    try:
        validate_config(config, load_yaml(schema_path))
        if args.matrix is not None and args.matrix not in config["matrices"]:
            raise ConfigError(f"--matrix: {args.matrix!r} is not one of matrices: {sorted(config['matrices'])}")
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = matrix_status(config, args.results, args.matrix)
    print(as_json(rows) if args.json else format_table(rows))
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "base-model": base_model_command,
    "launch": launch_command,
    "train": train_command,
    "install-profile": install_profile_command,
    "status": status_command,
    "runs": runs_command,
}


if __name__ == "__main__":
    sys.exit(main())
