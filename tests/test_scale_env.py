"""A scale's `env` in config (the tiny scale's allocator setting): the prefix of its jobs' commands,
and a derived parameter of the rules, so changing it reruns nothing."""

from __future__ import annotations

import re

import yaml

from tests.workflow import ROOT, snakemake

OFFLINE = "env HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1"
TINY_ENV = yaml.safe_load((ROOT / "config.yaml").read_text())["scales"]["tiny"]["env"]


def command_prefixes(dry_run_output: str) -> list[str]:
    """What stands before `python -m trainer` in each base_model and train command of `snakemake -n -p`,
    less the train rule's own offline settings (tests/test_prefetch.py checks those)."""
    return [
        p.replace(OFFLINE, "").strip()
        for p in re.findall(
            r"^Shell command: (.*?)python -m trainer (?:launch|base-model) ", dry_run_output, flags=re.MULTILINE
        )
    ]


def test_tiny_scale_jobs_run_under_the_config_env():
    prefixes = command_prefixes(snakemake("-n", "-p").stdout)
    assert len(prefixes) == 15  # the base model and 14 runs
    assert set(prefixes) == {"env " + " ".join(f"{k}={v}" for k, v in TINY_ENV.items())}
    assert "GLIBC_TUNABLES" in TINY_ENV


def test_env_entries_from_the_command_line_are_added_and_quoted():
    out = snakemake("-n", "-p", "--config", "scales={tiny: {env: {OMP_NUM_THREADS: '1', NOTE: 'a b'}}}").stdout
    prefixes = set(command_prefixes(out))
    assert len(prefixes) == 1
    assert prefixes.pop() == f"env GLIBC_TUNABLES={TINY_ENV['GLIBC_TUNABLES']} NOTE='a b' OMP_NUM_THREADS=1"


def test_scales_without_env_get_no_prefix():
    prefixes = command_prefixes(snakemake("-n", "-p", "--config", "matrix=paper").stdout)
    assert len(prefixes) == 126 + 3 and set(prefixes) == {""}


def test_bad_env_name_is_refused_naming_the_key():
    proc = snakemake("-n", "--config", "scales={tiny: {env: {'1X': 'y'}}}", check=False)
    assert proc.returncode != 0 and "scales.tiny.env" in proc.stdout + proc.stderr


def test_changing_the_env_reruns_nothing(workdir):
    """A base model recorded by Snakemake (--touch) stays up to date under another env, not under another spec."""
    model = workdir / "results" / "models" / "tiny" / "model.json"
    model.parent.mkdir(parents=True)
    model.write_text("{}")
    snakemake("--touch", "--forcerun", "base_model", "--cores", "1", str(model.relative_to(workdir)), cwd=workdir)
    target = str(model.relative_to(workdir))
    other_env = snakemake("-n", target, "--config", "scales={tiny: {env: {GLIBC_TUNABLES: ''}}}", cwd=workdir)
    assert "Nothing to be done" in other_env.stdout + other_env.stderr
    other_spec = snakemake("-n", target, "--config", "scales={tiny: {tiny: {seed: 3}}}", cwd=workdir)
    assert "Params have changed since last execution" in other_spec.stdout
