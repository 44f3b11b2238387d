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
}
TABLE_FORMATS = ("csv", "md", "tex", "html")

# written by `summarize` (one job over every finished run) into results/analysis/
INTERMEDIATE = ("runs", "problems", "curves", "gradients", "amplification", "signatures", "warnings")

WORKFLOW_ORDER = ["single", "eval_opt", "voting", "orch_workers"]
WORKFLOW_NAMES = {"single": "Single agent", "eval_opt": "Evaluator-Optimizer", "voting": "Voting",
                  "orch_workers": "Orchestrator-Workers"}
# the role whose agents run in parallel on one prompt, and the workflow_params key that counts them
GROUP_ROLES = {"voting": ("generator", "n_votes"), "orch_workers": ("worker", "max_subtasks")}
ROLE_ORDER = ["generator", "evaluator", "aggregator", "orchestrator", "worker", "synthesizer"]
AXES = ["workflow", "task", "scale", "policy", "seed"]
CELL = ["workflow", "task", "scale", "policy"]
