"""The peak model kept: the policies at the best smoothed eval, besides the last `keep_last` checkpoints.

At each eval the smoothed peak of the primary split (the first eval split, as the analysis reads
it) is recomputed over the evals so far (trainer/contract/peak.py, the analysis' definition). The
smoothing is trailing, so the peak can only move to the newest eval: then the current policies
(no optimizer) are written to work/peak/step-N and the previous peak is removed. Each checkpoint
hard-links the peak of its time (step-N/peak/), so a resume restores the peak that goes with its
step. At publish the peak is linked into the run directory (rundir.PEAK_DIR) and named in done.json.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from trainer.contract import rundir
from trainer.rl.policies import PolicySet


def link_tree(src: Path, dst: Path) -> None:
    """Copy a directory tree as hard links (no extra disk), copying where linking fails (another device)."""
    try:
        shutil.copytree(src, dst, copy_function=os.link)
    except OSError:
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst)


def replace_tree(src: Path, dst: Path, tmp: Path) -> None:
    """`dst` becomes a linked copy of `src`, written under `tmp` first (a kill leaves `dst` whole or absent)."""
    shutil.rmtree(tmp, ignore_errors=True)
    link_tree(src, tmp)
    shutil.rmtree(dst, ignore_errors=True)
    os.replace(tmp, dst)


class PeakKeeper:
    """Keeps work/peak/step-N: the policies at the smoothed peak of `split` (rank 0 alone: `enabled`)."""

    def __init__(self, work: Path, split: str, window: int, enabled: bool = True):
        self.root, self.split, self.window, self.enabled = work / rundir.PEAK_DIR, split, window, enabled
        self.current: dict[str, Any] | None = None  # {step, accuracy, smoothed, split, smoothing_window}

    def observe(self, eval_rows: list[dict[str, Any]], step: int, policies: PolicySet) -> None:
        """After the eval of `step`: keep the current policies when the smoothed peak moved to it."""
        rows = [r for r in eval_rows if r["split"] == self.split]
        top = rundir.curve_peak([r["step"] for r in rows], [r["accuracy"] for r in rows], self.window)
        if not self.enabled or top is None or top["step"] != step or (self.current or {}).get("step") == step:
            return
        peak = {
            "step": int(step),
            "accuracy": float(top["accuracy"]),
            "smoothed": float(top["smoothed"]),
            "split": self.split,
            "smoothing_window": self.window,
        }
        final, tmp = self.root / f"step-{step:06d}", self.root / f".step-{step:06d}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        policies.save(str(tmp / rundir.POLICIES_DIR))
        rundir.write_json_atomic(peak, tmp / rundir.PEAK_JSON)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        self._remove_all_but(final)
        self.current = peak

    def _remove_all_but(self, keep: Path | None) -> None:
        for old in self.root.glob("*step-*") if self.root.exists() else []:
            if old != keep:
                shutil.rmtree(old)

    def _dir(self) -> Path:
        return self.root / f"step-{self.current['step']:06d}"

    def link_into(self, checkpoint: Path) -> None:
        """Hard-link the peak of now into a checkpoint being written (step-N/peak/)."""
        if self.enabled and self.current:
            link_tree(self._dir(), checkpoint / rundir.PEAK_DIR)

    def restore(self, checkpoint: Path | None) -> None:
        """The peak that goes with a resumed checkpoint (None: a fresh start, no peak): any other is removed."""
        if not self.enabled:
            return
        saved = checkpoint / rundir.PEAK_DIR if checkpoint else None
        self.current = None
        if saved is None or not (saved / rundir.PEAK_JSON).exists():  # a fresh start, or a checkpoint before any peak
            self._remove_all_but(None)
            return
        self.current = json.loads((saved / rundir.PEAK_JSON).read_text())
        final = self._dir()
        replace_tree(saved, final, self.root / f".step-{self.current['step']:06d}.tmp")
        self._remove_all_but(final)

    def publish(self, run_dir: Path) -> dict[str, Any] | None:
        """Link the peak into the run directory (rundir.PEAK_DIR); done.json's `peak` entry (path relative to
        the run directory), or None when no peak was kept."""
        if not self.enabled or not self.current:
            return None
        replace_tree(self._dir(), run_dir / rundir.PEAK_DIR, run_dir / rundir.PEAK_PUBLISHING)
        return {**self.current, "path": f"{rundir.PEAK_DIR}/{rundir.POLICIES_DIR}"}
