"""The RL side: the multi-role GRPO loop of one run.

Owns: the training loop (`train`), the policy update and per-role gradient recording (`update`),
the GRPO loss, rewards and advantages (`grpo`), checkpoint and resume (`checkpoint`), the role ->
policy routing and the policies' adapters and optimizers (`policies`), rollout engines (`rollout`).
May import `trainer.settings`, `trainer.sweep.rundir` (the files it writes), `trainer.sweep.config`
(hashing), `trainer.workflows`, `trainer.tasks` and `trainer.models`; never `trainer.sweep.launch`.
"""
