"""The sweep side: the experiment config, run ids, the run-directory contract, launching and watching runs.

Owns: config validation and matrix expansion (`config`), the run-id format (`runid`), the
files a run writes and analysis reads (`rundir`), job submission (`launch`), `status` and the
Snakemake profile link (`profiles`), a run's cost before it runs (`cost`). May import
`trainer.settings`, `trainer.workflows` (its registry: which workflow names exist, their roles
and turns) and, lazily inside a job, `trainer.rl`; never `analysis`.
"""
