"""Math and code tasks: problem sources, answer extraction, rewards and the code sandbox."""

from trainer.tasks.base import Problem, Score, Task
from trainer.tasks.registry import get_task, load_problems

__all__ = ["Problem", "Score", "Task", "get_task", "load_problems"]
