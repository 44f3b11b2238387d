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
    "claim_cliff_incidence": "Claims",
    "claim_signature_rates": "Claims",
    "claim_amplification_dose": "Claims",
    "claim_capture_onset": "Claims",
}
FIGURE_FORMATS = ("png", "pdf")

# tables written by `analyse` into results/tables/: stem -> report category
TABLES = {
    "summary": "Tables",            # one row per cell: mean and std over seeds
    "improves_on_base": "Questions",
    "isolated_vs_shared": "Questions",
    "variance_decomposition": "Questions",
    "failure_signatures": "Failure signatures",
    "skipped_runs": "Runs",         # runs of the matrix not analysed: missing, or left out with why
    "early_warnings": "Cliffs",     # per early-warning detector: fired before the cliff, lead time, false alarms
    "cliff_incidence": "Claims",    # the claim tables (CLAIMS below): a statistic with an interval for each
    "signature_rates": "Claims",
    "amplification_dose": "Claims",
    "capture_onset": "Claims",
}

# The study's claims (DESIGN.md), each with the table that measures it (results/tables/) and its figure
# (results/figures/): claim -> (table stem, figure stem). analysis/claims.py computes the tables.
CLAIMS = {
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
WORKFLOW_NAMES = {"single": "Single agent", "eval_opt": "Evaluator-Optimizer", "voting": "Voting",
                  "orch_workers": "Orchestrator-Workers"}
ROLE_ORDER = ["generator", "evaluator", "aggregator", "orchestrator", "worker", "synthesizer"]
AXES = ["workflow", "task", "scale", "policy", "seed"]
CELL = ["workflow", "task", "scale", "policy"]


def ordered(names: set[str] | list[str], order: list[str]) -> list[str]:
    """`names` in `order`, then those `order` does not list, sorted (a workflow or role added since)."""
    present = set(names)
    return [n for n in order if n in present] + sorted(present - set(order))


def workflow_rank(name: str) -> str:
    """A sort key of a workflow name: WORKFLOW_ORDER's first, then the others by name."""
    rank = WORKFLOW_ORDER.index(name) if name in WORKFLOW_ORDER else len(WORKFLOW_ORDER)
    return f"{rank:03d}:{name}"
