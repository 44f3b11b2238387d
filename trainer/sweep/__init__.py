"""The sweep side: the experiment config, run ids, the run-directory contract, launching and watching runs.

Owns: config validation and matrix expansion (`config`), the run-id format (`runid`), the
files a run writes and analysis reads (`rundir`), job submission (`launch`), `status` and the
Snakemake profile link (`profiles`). May import `trainer.settings`, `trainer.workflows` (its
registry: which workflow names exist and their roles; lazily from `config`, which the workflows
import) and, lazily inside a job, `trainer.rl`; never `analysis`.
"""
