"""`python -m trainer`: every subcommand of the parser has a handler, and handlers return statuses."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from trainer.__main__ import COMMANDS, build_parser, main
from trainer.contract.runid import parse_run_id

ROOT = Path(__file__).resolve().parent.parent


def subcommands(parser: argparse.ArgumentParser) -> set[str]:
    """The names of the parser's subcommands."""
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(sub.choices)


def test_every_subcommand_has_a_handler() -> None:
    # `score` is handed to trainer.tasks.cli before parsing (it has a parser of its own)
    assert subcommands(build_parser()) - {"score"} == set(COMMANDS)


def test_runs_lists_the_demo_matrix(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "--config", str(ROOT / "config.yaml"), "--matrix", "demo"]) == 0
    runs = capsys.readouterr().out.split()
    assert runs and all(parse_run_id(r).scale == "tiny" for r in runs)


def test_a_malformed_override_is_named_with_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--config", "no_equals_sign"]) == 2
    assert "--config 'no_equals_sign': expected KEY=VALUE" in capsys.readouterr().err


def test_an_unknown_subcommand_exits_with_usage() -> None:
    with pytest.raises(SystemExit) as e:
        main(["nope"])
    assert e.value.code == 2
