"""The float summation order the tests run under, and the environment of the trainer subprocesses that
carries it.

TEST_FLOAT_ORDER=N (docs/testing.md) runs the tests under another float summation order: the warm start's
micro-batch split, the RL update's micro-batch size and the threads of every trainer differ, so a test that
rests on one CPU's float trajectory fails here as it would on another CPU. 0 (the default): none.
"""

from __future__ import annotations

import os

from tests.workflow import ROOT

FLOAT_ORDERS = {
    0: {"warm_start_micro_batches": None, "micro_batch_tokens": None, "threads": 1},
    1: {"warm_start_micro_batches": 2, "micro_batch_tokens": 1024, "threads": 2},
    2: {"warm_start_micro_batches": 8, "micro_batch_tokens": 256, "threads": 1},
}
FLOAT_ORDER = int(os.environ.get("TEST_FLOAT_ORDER", "0"))
if FLOAT_ORDER not in FLOAT_ORDERS:
    raise ValueError(f"TEST_FLOAT_ORDER={FLOAT_ORDER}: not one of {sorted(FLOAT_ORDERS)}")
PERTURB = FLOAT_ORDERS[FLOAT_ORDER]
FAST_ENV = {
    "GLIBC_TUNABLES": "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736",
    "OMP_NUM_THREADS": str(PERTURB["threads"]),
    "TOKENIZERS_PARALLELISM": "false",
}


def trainer_env(**extra: str) -> dict[str, str]:
    """The environment of a trainer subprocess: this checkout first on the path, fast CPU settings and the
    float order's threads."""
    return {**os.environ, **FAST_ENV, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}", **extra}
