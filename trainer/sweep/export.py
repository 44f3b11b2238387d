"""Export a finished run's policies: the peak model kept (done.json's `peak`) or the last step's.

    python -m trainer export --run-dir results/runs/RUN --which peak --out exported/RUN-peak

writes one folder per policy in `save_pretrained` layout, as the trainer saved them: a PEFT adapter
per policy (Isolated-Policy: one per role; Shared-Policy: the one `shared` adapter) or a full model
(`training.finetune: full`), and a README.md model card naming the run, the step and its accuracy.
Load an adapter with `PeftModel.from_pretrained(base_model, OUT/POLICY)` on the run's base model.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from trainer.contract import rundir
from trainer.settings import TrainingSettings, default_of

WHICH = ("peak", "last")


class ExportError(RuntimeError):
    """A run whose policies cannot be exported; the message names the run directory and why."""


def _read_json(path: Path, what: str) -> dict[str, Any]:
    if not path.exists():
        raise ExportError(f"{path}: no {path.name}; {what}")
    return json.loads(path.read_text())


def _primary_accuracy(run_dir: Path, step: int) -> tuple[str, float]:
    """(split, accuracy) of the primary eval split (the first logged) at `step`, from eval.parquet."""
    import pyarrow.parquet as pq

    rows = pq.read_table(run_dir / rundir.EVAL_PARQUET, columns=["step", "split", "accuracy"]).to_pylist()
    if not rows:
        raise ExportError(f"{run_dir / rundir.EVAL_PARQUET}: no evals")
    split = rows[0]["split"]
    at = [r["accuracy"] for r in rows if r["split"] == split and r["step"] == step]
    if not at:
        raise ExportError(f"{run_dir / rundir.EVAL_PARQUET}: no eval of split {split} at step {step}")
    return split, float(at[0])


def source_of(run_dir: Path, which: str) -> tuple[Path, dict[str, Any]]:
    """The policies folder to export and what the model card says of it: step, split, accuracy."""
    if which not in WHICH:
        raise ExportError(f"--which: {which!r} is not one of {', '.join(WHICH)}")
    done = _read_json(run_dir / rundir.DONE_JSON, "the run has not finished (export reads a finished run)")
    if which == "peak":
        peak = done.get("peak")
        if not peak:
            raise ExportError(
                f"{run_dir / rundir.DONE_JSON}: no `peak`: the run finished before the trainer kept its "
                f"peak model; rerun it, or export --which last"
            )
        return run_dir / peak["path"], {k: peak[k] for k in ("step", "split", "accuracy", "smoothed")}
    step = int((done.get("stopped_early") or {}).get("step", done["steps_done"]))
    ckpt = rundir.checkpoint_dir(run_dir / rundir.WORK_DIR, step)
    if not (ckpt / rundir.POLICIES_DIR).is_dir():
        raise ExportError(f"{ckpt}: no checkpoint of the last step {step} (its policies are what --which last exports)")
    split, accuracy = _primary_accuracy(run_dir, step)
    return ckpt / rundir.POLICIES_DIR, {"step": step, "split": split, "accuracy": accuracy}


def model_card(config: dict[str, Any], which: str, facts: dict[str, Any], policies: list[str]) -> str:
    """README.md of an export: the run id, which model, its step and accuracy, how to load it."""
    training = config.get("training", {})
    finetune = training.get("finetune", default_of(TrainingSettings, "finetune"))
    roles = config.get(rundir.ROLES_KEY) or []
    smoothed = f" (smoothed peak {facts['smoothed']:.4f})" if "smoothed" in facts else ""
    base = (config.get("base_model") or {}).get("path", config["model"]["name"])
    lines = [
        f"# {config['run']}: the {which} model",
        "",
        f"- run: `{config['run']}` (config hash `{config.get('config_hash')}`)",
        f"- step: {facts['step']} of {training.get('max_steps')}",
        f"- accuracy: {facts['accuracy']:.4f} on eval split `{facts['split']}`{smoothed}",
        f"- base model: `{base}`",
        f"- policy: {config['policy']}; roles: {', '.join(roles) or '(not recorded)'}",
        f"- finetune: {finetune}; one folder per policy: {', '.join(policies)}",
        "",
    ]
    if finetune == "lora":
        lines += [
            "Load a policy with PEFT on the base model:",
            "",
            "```python",
            "from peft import PeftModel",
            "from transformers import AutoModelForCausalLM",
            "",
            f"base = AutoModelForCausalLM.from_pretrained({base!r})",
            f"model = PeftModel.from_pretrained(base, 'OUT/{policies[0]}')",
            "```",
            "",
        ]
    else:
        lines += [f"Load a policy with `AutoModelForCausalLM.from_pretrained('OUT/{policies[0]}')`.", ""]
    return "\n".join(lines)


def export(run_dir: str | Path, which: str, out: str | Path) -> list[Path]:
    """Write the run's `which` policies (peak or last) under `out`, one folder per policy, and a model card."""
    run_dir, out = Path(run_dir), Path(out)
    source, facts = source_of(run_dir, which)
    config = _read_json(run_dir / rundir.CONFIG_JSON, "not a run directory")
    policies = sorted(p.name for p in source.iterdir() if p.is_dir()) if source.is_dir() else []
    if not policies:
        raise ExportError(f"{source}: no policies saved there")
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"--out {out}: exists and is not empty; name a new folder")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in policies:
        shutil.copytree(source / name, out / name)
        written.append(out / name)
    (out / "README.md").write_text(model_card(config, which, facts, policies))
    return written
