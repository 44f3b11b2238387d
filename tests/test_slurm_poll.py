"""One squeue call per poll interval for every launcher of a sweep (without a
cluster: a fake squeue on PATH that logs its calls), of the submitting user's jobs only, and a launcher
that imports neither torch nor pandas. The 100-launcher measurement on the real cluster is benchmarks/bench_launchers.py."""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
from pathlib import Path

from tests.workflow import ROOT

FAKE_SQUEUE = """#!/bin/sh
echo "$@" >> {log}
sleep 0.2
printf '11|PENDING|run-a@x\\n12|RUNNING|run-b@y\\n'
"""


def test_launchers_share_one_squeue_call_per_interval(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "squeue").write_text(FAKE_SQUEUE.format(log=log))
    (tmp_path / "bin" / "squeue").chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    code = (
        "import sys, time; from pathlib import Path; from trainer.sweep.slurm_poll import slurm_state\n"
        "states = set()\n"
        "t_end = time.time() + 4\n"
        "while time.time() < t_end:\n"
        "    states.add(slurm_state(sys.argv[1], Path(sys.argv[2]), 1.0)); time.sleep(0.1)\n"
        "print(sorted(map(str, states)))"
    )
    launchers = [
        subprocess.Popen(
            [sys.executable, "-c", code, job, str(tmp_path / "runs")], env=env, stdout=subprocess.PIPE, text=True
        )
        for job in ("11", "12", "13") * 4
    ]
    outs = [p.communicate(timeout=60)[0].strip() for p in launchers]
    assert outs[:3] == ["['PENDING']", "['RUNNING']", "['None']"]  # 13: not listed
    calls = log.read_text().splitlines()
    # 12 launchers polling every 0.1 s for ~4 s against a 1 s snapshot: ~4-6 calls, never one each a poll
    assert 3 <= len(calls) <= 8, calls
    assert all(f" -u {getpass.getuser()} " in f" {c} " for c in calls), f"squeue of every user's jobs: {calls}"


def test_the_launcher_imports_neither_torch_nor_pandas() -> None:
    code = (
        "import sys, trainer.__main__, trainer.sweep.launch, trainer.sweep.slurm_poll;"
        "print(sorted(m for m in ('torch', 'transformers', 'pandas', 'pyarrow') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    ).stdout
    assert out.strip() == "[]"
