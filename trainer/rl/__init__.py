"""The RL side: the multi-role GRPO loop of one run.

Owns: the training loop (`train`) and what a job calls around it (`run`), the policy update and
per-role gradient recording (`update`), the GRPO loss, rewards and advantages (`grpo`), checkpoint
and resume (`checkpoint`), data-parallel ranks (`distributed`), stopping on a signal (`stopping`),
the role -> policy routing and the policies' adapters and optimizers (`policies`), rollout engines
(`rollout`: HF, chunked; `vllm_engine`: the colocated vLLM engine; `weight_sync`: its verified sync
and the training-inference mismatch), a backend's errors before work (`preflight`) and a run's process
count (`processes`).
May import `trainer.contract` (the files it writes, the config hash), `trainer.settings`,
`trainer.early_warning` (the detectors it watches each step),
`trainer.models`, `trainer.workflows` and `trainer.tasks`; never `trainer.sweep` (the launcher above it)
nor `analysis` (tests/test_package_layers.py).
"""
