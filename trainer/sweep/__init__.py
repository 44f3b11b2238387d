"""The sweep side: the experiment config, launching and watching runs, and what they cost before they run.

Owns: config validation, matrix expansion and per-run resolution (`config`, `variants`), job submission
(`launch`, `array_submit`, `train_job`), the matrix's errors before work (`preflight`, `gate`), `status`
and the Snakemake profile link (`profiles`), a run's cost and disk before it runs (`cost`, `disk`,
`plan`). The layer above `trainer.rl`: may import `trainer.contract`, `trainer.settings`, the models,
tasks and workflows, and `trainer.rl`; never `analysis` (tests/test_package_layers.py).
"""
