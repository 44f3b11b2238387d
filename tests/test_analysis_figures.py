"""`snakemake figures` on a synthetic results tree: every figure and table, missing cells, a corrupt run, the report."""

from __future__ import annotations

import json

import pandas as pd

from analysis.names import FIGURE_FORMATS, FIGURES, TABLES
from tests.workflow import snakemake
from trainer.sweep.config import expand_matrix, load_yaml

SEEDS = "seeds=[0,1]"


def demo_runs(workdir) -> list[str]:
    config = load_yaml(workdir / "config.yaml")
    config["seeds"] = [0, 1]
    return [str(r) for r in expand_matrix(config)]


def test_figures_render_with_missing_cells_and_a_corrupt_run(workdir):
    from tests.synthetic_logs import planted_run

    runs = demo_runs(workdir)
    missing = [r for r in runs if r.startswith("orch_workers-code-") or r == "voting-math-tiny-isolated-s1"]
    written = [r for r in runs if r not in missing]
    runs_dir = workdir / "results" / "runs"
    for r in written:
        planted_run(runs_dir / r, r, steps=60, eval_every=10, samples_per_eval=2)
    corrupt = "eval_opt-code-tiny-isolated-s0"
    done = json.loads((runs_dir / corrupt / "done.json").read_text())
    (runs_dir / corrupt / "done.json").write_text(json.dumps({**done, "steps_done": 80, "steps_expected": 80}))
    truncated = "voting-code-tiny-shared-s1"  # partial logs: a parquet cut short
    eval_parquet = runs_dir / truncated / "eval.parquet"
    eval_parquet.write_bytes(eval_parquet.read_bytes()[:200])

    dry = snakemake("figures", "-n", "--config", SEEDS, cwd=workdir).stdout
    assert "rule train" not in dry and "rule figures:" in dry  # one job: the analysis and the figures
    snakemake("figures", "--cores", "1", "--config", SEEDS, cwd=workdir)

    results = workdir / "results"
    for name in FIGURES:
        for ext in FIGURE_FORMATS:
            assert (results / "figures" / f"{name}.{ext}").stat().st_size > 5000, (name, ext)
    for name in TABLES:
        for ext in ("csv", "md", "html"):
            assert (results / "tables" / f"{name}.{ext}").exists(), (name, ext)
    for ext in ("parquet", "csv", "md", "tex"):
        assert (results / f"summary.{ext}").stat().st_size > 100

    summary = pd.read_parquet(results / "summary.parquet")
    assert set(summary["run"]) == set(written) - {corrupt, truncated}
    assert summary.loc[summary["workflow"] != "single", "gain_vs_single_terminal"].notna().all()
    skipped = pd.read_csv(results / "tables" / "skipped_runs.csv")
    left_out = skipped[skipped["status"] == "left out"]
    reasons = dict(zip(left_out["run"], left_out["reason"]))
    assert set(reasons) == {corrupt, truncated}
    assert "train.parquet ends at step 60" in reasons[corrupt] and "cannot read eval.parquet" in reasons[truncated]
    assert set(skipped[skipped["status"] == "missing"]["run"]) == set(missing)
    log = (results / "logs" / "analyse.log").read_text()
    assert (
        f"left out: {corrupt}" in log and f"left out: {truncated}" in log and f"{len(missing)} runs not finished" in log
    )

    pairs = pd.read_csv(results / "tables" / "isolated_vs_shared.csv")
    assert "all" in set(pairs["workflow"]) and pairs["n_pairs"].max() >= 2
    var = pd.read_csv(results / "tables" / "variance_decomposition.csv")
    assert abs(var["gain_peak_share"].sum() - 1) < 1e-6  # with the residual, the shares are the whole

    snakemake("figures", "--config", SEEDS, "--report", "report.html", cwd=workdir)
    html = (workdir / "report.html").read_text(errors="replace")
    assert len(html) > 100_000
    for name in ("accuracy_curves", "shared_capture", "isolated_vs_shared", "skipped_runs"):
        assert name in html, name


def test_figures_with_no_finished_run_say_so(workdir):
    snakemake("figures", "--cores", "1", cwd=workdir)
    results = workdir / "results"
    for name in FIGURES:
        assert (results / "figures" / f"{name}.png").stat().st_size > 5000, name
    skipped = pd.read_csv(results / "tables" / "skipped_runs.csv")
    assert len(skipped) == len(demo_runs(workdir)) // 2 and set(skipped["status"]) == {"missing"}


def test_a_role_without_any_gradient_draws_an_empty_line():
    """All of a role's grad_sq_share NaN (every group's rewards tied: no gradient) is an empty line, not an error."""
    import matplotlib.pyplot as plt

    from analysis.gradient_figures import _binned_mean

    empty = _binned_mean(pd.DataFrame({"step": [], "grad_sq_share": []}), "grad_sq_share")
    some = _binned_mean(pd.DataFrame({"step": [1, 2], "grad_sq_share": [0.25, 0.75]}), "grad_sq_share")
    assert empty.empty and list(some.values) == [0.25, 0.75]
    frame = pd.DataFrame({"generator": some, "aggregator": empty}).sort_index().fillna(0.0)
    fig, ax = plt.subplots()
    ax.stackplot(frame.index, frame.T.values)
    plt.close(fig)
