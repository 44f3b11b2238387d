"""The run contract: what a run is named, what it writes and how it is measured, shared by every layer.

Owns: the run id (`runid`), the run directory, its files and their parquet schemas (`rundir`), the
metric definitions the trainer keeps and the analysis reports (`peak`: smoothed peak, terminal,
cliff), and the run config's hashed view, its hash and `ConfigError` (`config`).
Imports nothing of the trainer: `trainer.settings`, the models, tasks, workflows, `trainer.rl`,
`trainer.sweep` and `analysis` all import it (tests/test_package_layers.py checks the directions).
"""
