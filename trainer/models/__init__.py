"""Base models: the offline `tiny` Qwen3-architecture model and its warm start (`base_model`), the chat
template every rollout backend renders (`chat`), a model's size and a checkpoint's bytes (`size`), and the
memory model of generation and the update (`memory`).

May import `trainer.contract`, `trainer.settings`, `trainer.tasks` and `trainer.workflows`; never
`trainer.rl` or `trainer.sweep`, which import this package (tests/test_package_layers.py).
"""
