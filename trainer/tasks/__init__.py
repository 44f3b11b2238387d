"""Math and code tasks: problem sources, answer extraction, rewards and the code sandbox.

Owns: the task interface (`base`), the tasks by name (`registry`: `get_task`, `load_problems`),
the math task (`math_task`, its math-verify worker `math_worker`) and the code task
(`code_task`), problem sources (`sources`, code tests columns in `code_tests`, offline problems
in `synthetic`), the sandbox (`sandbox`, its limits and cleanup in `sandbox_isolation`, which
isolation holds in `sandbox_mechanisms`, its namespaces and view in `sandbox_view`, the programs
it runs in `runners/`, its helper process `sandbox_helper`) and `cli` (`python -m trainer score`).
Imports nothing else of the trainer; the task modules import `base`, never `registry`.
"""

from trainer.tasks.base import Problem, Score, Task
from trainer.tasks.registry import get_task, load_problems

__all__ = ["Problem", "Score", "Task", "get_task", "load_problems"]
