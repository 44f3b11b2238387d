"""Multi-role GRPO trainer for LLM workflows: config, tasks, workflows, training loop, launcher."""
