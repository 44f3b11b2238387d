"""Base models: the offline `tiny` Qwen3-architecture model and its warm start (`base_model`).

May import `trainer.tasks`, `trainer.workflows` and `trainer.sweep.config`.
"""
