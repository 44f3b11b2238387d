"""The RL side: the multi-role GRPO loop of one run.

Owns: the training loop (`train`) and what a job calls around it (`run`), the policy update and
per-role gradient recording (`update`), the GRPO loss, rewards and advantages (`grpo`), checkpoint
and resume (`checkpoint`), data-parallel ranks (`distributed`), stopping on a signal (`stopping`),
the role -> policy routing and the policies' adapters and optimizers (`policies`), rollout engines
(`rollout`: HF, chunked; `vllm_engine`: the colocated vLLM engine; `weight_sync`: its verified sync
and the training-inference mismatch; `chat`: the chat template).
May import `trainer.settings`, `trainer.contract.rundir` (the files it writes), `trainer.sweep.config`
(hashing), `trainer.rl.preflight` (a backend's errors before work), `trainer.workflows`,
`trainer.tasks` and `trainer.models`; never `trainer.sweep.launch`.
"""
