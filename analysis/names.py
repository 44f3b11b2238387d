"""Names the analysis shares with the Snakemake rules: figures, tables, intermediate files, workflow facts.

Light on purpose (no pandas, no matplotlib): rules/common.smk imports it while Snakemake parses.
"""

from __future__ import annotations

# figure file stem -> (report category, caption file in rules/report/)
FIGURES = {
    "accuracy_curves": "Accuracy",
    "peak_vs_terminal": "Accuracy",
    "gain_heatmaps": "Accuracy",
    "cliffs": "Cliffs",
    "isolated_gradients": "Gradient dynamics",
    "shared_capture": "Gradient dynamics",
    "early_warnings": "Cliffs",
    "claim_base_gain": "Claims",
    "claim_gain_factors": "Claims",
    "claim_cliff_incidence": "Claims",
    "claim_signature_rates": "Claims",
    "claim_amplification_dose": "Claims",
    "claim_capture_onset": "Claims",
}
FIGURE_FORMATS = ("png", "pdf")

# tables written by `analyse` into results/tables/: stem -> report category
TABLES = {
    "summary": "Tables",  # one row per cell: mean and std over seeds
    "improves_on_base": "Questions",
    "isolated_vs_shared": "Questions",
    "variance_decomposition": "Questions",
    "failure_signatures": "Failure signatures",
    "skipped_runs": "Runs",  # runs of the matrix not analysed: missing, or left out with why
    "early_warnings": "Cliffs",  # per early-warning detector: fired before the cliff, lead time, false alarms
    "base_gain": "Claims",  # the claim tables (CLAIMS below): a statistic with an interval for each
    "gain_factors": "Claims",
    "cliff_incidence": "Claims",
    "signature_rates": "Claims",
    "amplification_dose": "Claims",
    "capture_onset": "Claims",
}

# The study's claims (docs/evaluation.md), each with the table that measures it (results/tables/) and its figure
# (results/figures/): claim -> (table stem, figure stem). analysis/claims.py computes the tables.
CLAIMS = {
    "multi_agent_rl_improves_on_base": ("base_gain", "claim_base_gain"),
    "gains_depend_on_workflow_task_scale_more_than_policy": ("gain_factors", "claim_gain_factors"),
    "isolated_falls_off_cliffs_more_often": ("cliff_incidence", "claim_cliff_incidence"),
    "failure_signatures_isolated_vs_shared": ("signature_rates", "claim_signature_rates"),
    "parallel_agents_amplify_isolated_gradients": ("amplification_dose", "claim_amplification_dose"),
    "dominant_role_captures_shared_policy": ("capture_onset", "claim_capture_onset"),
}
CLAIM_TABLES = tuple(t for t, _ in CLAIMS.values())
TABLE_FORMATS = ("csv", "md", "tex", "html")

# written by `summarize` (one job over every finished run) into results/analysis/
INTERMEDIATE = ("runs", "problems", "curves", "gradients", "amplification", "signatures", "warnings")

# How the paper's workflows and roles are shown (order, display name). Presentation only: what a workflow
# is (its roles, its parallel role) the analysis reads from each run's config.json, and a workflow or role
# not listed here is shown under its own name, after these.
WORKFLOW_ORDER = ["single", "eval_opt", "voting", "orch_workers"]
WORKFLOW_NAMES = {
    "single": "Single agent",
    "eval_opt": "Evaluator-Optimizer",
    "voting": "Voting",
    "orch_workers": "Orchestrator-Workers",
}
ROLE_ORDER = ["generator", "evaluator", "aggregator", "orchestrator", "worker", "synthesizer"]
# `variant` (a named config delta of the matrix, trainer/sweep/variants.py) is "" for a plain run: an axis of
# every grouping, shown in a table only where some run has one (analysis.tables.write_table).
AXES = ["workflow", "task", "scale", "policy", "seed", "variant"]
CELL = ["workflow", "task", "scale", "policy", "variant"]
PLAIN = ""  # the variant of a run without one


def run_axes(cfg: dict) -> dict:
    """A run's values by axis from its config.json (or run id axes): `variant` PLAIN where it has none."""
    return {a: (cfg.get(a) or PLAIN) if a == "variant" else cfg[a] for a in AXES}


def with_variant(df):
    """A table (pandas) with its `variant` column, PLAIN where missing (tables written before variants)."""
    return df.assign(variant=df["variant"].fillna(PLAIN) if "variant" in df else PLAIN)


def plain_runs(df):
    """The rows of a table (pandas) that are of plain runs: what the figures draw (their grid has no variant axis)."""
    return df[with_variant(df)["variant"] == PLAIN] if len(df) else df


def has_variants(df) -> bool:
    """Whether a table (pandas) holds a run of some variant."""
    return "variant" in df and bool((df["variant"].fillna(PLAIN) != PLAIN).any())


def as_written(df):
    """A table (pandas) as the analysis writes it: without a `variant` column where no row has a variant, so a
    matrix without variants writes tables without the axis."""
    return df.drop(columns="variant") if "variant" in df and not has_variants(df) else df


def ordered(names: set[str] | list[str], order: list[str]) -> list[str]:
    """`names` in `order`, then those `order` does not list, sorted (a workflow or role added since)."""
    present = set(names)
    return [n for n in order if n in present] + sorted(present - set(order))


def workflow_rank(name: str) -> str:
    """A sort key of a workflow name: WORKFLOW_ORDER's first, then the others by name."""
    rank = WORKFLOW_ORDER.index(name) if name in WORKFLOW_ORDER else len(WORKFLOW_ORDER)
    return f"{rank:03d}:{name}"
