"""Analysis of the sweep: run summaries, peak/terminal/cliff, gradient dynamics, figures (parquet in).

As the data flows: `runs` reads and checks one run directory; `per_run` makes its tables from
`curves` (base, peak, terminal, cliff), `gradients` (capture, amplification), `signatures` and
`agents` (variant, parallel agents, amplification index); `analyse` writes them with the summary table
(`summary`: vs single, seeds aggregated), the question tables (`tables`) and the claim tables (`claims`,
`claim_signatures`, `claim_amplification`, statistics in `intervals`); `figures` renders them (with
`figure_data`, `gradient_figures` and `claim_figures`).
`names` holds what the Snakemake rules share; `__main__` is the CLI the rules call. Of the trainer it
imports only `trainer.contract` (the run-directory contract), `trainer.settings` and
`trainer.early_warning` (the detectors it replays in `calibrate`); never `trainer.rl`
or `trainer.sweep` (tests/test_package_layers.py).
"""
