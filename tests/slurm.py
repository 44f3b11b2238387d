"""The SLURM cluster the slurm-marked tests run on (.ci/slurm-up starts a single-node one)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def slurm_available() -> bool:
    """Whether sbatch exists and the controller answers."""
    return shutil.which("sbatch") is not None and subprocess.run(["sinfo"], capture_output=True).returncode == 0


def require_slurm() -> None:
    """Skip the test where no cluster answers; fail it instead where REQUIRE_SLURM is set (CI)."""
    if not slurm_available():
        if os.environ.get("REQUIRE_SLURM"):
            pytest.fail("REQUIRE_SLURM is set but no SLURM cluster answers (run .ci/slurm-up)")
        pytest.skip("no SLURM cluster here (.ci/slurm-up starts one)")
