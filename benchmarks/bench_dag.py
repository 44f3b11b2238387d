"""How long `snakemake -n --profile profiles/slurm` takes to build the DAG of a big matrix, and where the time goes.

    nice -n 15 python -m benchmarks.bench_dag [--roots /tmp/dag-old .] [--seeds 3 24 238] [--profile-seeds 24]

The paper matrix has 42 runs a seed (36 multi-agent runs and 6 single-agent baselines), so `--config
seeds=[0..N-1]` gives 126, 1,008 and 9,996 runs for N = 3, 24 and 238. Each dry-run runs in a fresh process;
its seconds and peak resident memory are printed per checkout (`--roots`: an older checkout beside this one,
e.g. made with `git worktree add /tmp/dag-old COMMIT`, so the two stand side by side). With
`--profile-seeds N` the N-seed dry-run of each checkout also runs under cProfile and the report splits its
time into parsing the workflow (the rules and common.smk's config checks), building the DAG and the rest,
then names the heaviest functions of this repository.
"""

from __future__ import annotations

import argparse
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS_PER_SEED = 42  # the paper matrix: 3 workflows x 2 tasks x 3 scales x 2 policies + 2 tasks x 3 scales baselines
# where snakemake spends it: its Workflow.include parses the Snakefile (common.smk's checks run there),
# Workflow._build_dag builds the DAG; everything else is start-up and the dry-run's report
PHASES = {"parse": ("workflow.py", "include"), "DAG": ("workflow.py", "_build_dag")}


def snakemake_command(seeds: int, profile_out: Path | None = None) -> list[str]:
    """The dry-run of the paper matrix with seeds 0..seeds-1 (under cProfile when `profile_out` is given)."""
    args = ["-n", "--quiet", "--profile", "profiles/slurm", "--config", "matrix=paper", f"seeds=[{seeds_list(seeds)}]"]
    snakemake = str(Path(sys.executable).with_name("snakemake"))
    if profile_out is None:
        return [snakemake, *args]
    return [sys.executable, "-m", "cProfile", "-o", str(profile_out), snakemake, *args]


def seeds_list(seeds: int) -> str:
    return ",".join(str(s) for s in range(seeds))


def timed(cmd: list[str], cwd: Path) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system) and peak resident memory (MB) of `cmd` run in `cwd` in a
    fresh child (raises if it fails). On a contended machine the CPU seconds are the steadier figure."""
    wrapper = (
        "import resource, subprocess, sys, time\n"
        "t = time.perf_counter(); rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
        "s = time.perf_counter() - t\n"
        "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(rc, s, u.ru_utime + u.ru_stime, u.ru_maxrss / 1024)\n"
    )
    done = subprocess.run([sys.executable, "-c", wrapper, *cmd], cwd=cwd, capture_output=True, text=True)
    rc, seconds, cpu, mb = done.stdout.split()
    if rc != "0":
        raise SystemExit(f"{' '.join(cmd[:6])} ... in {cwd} failed (exit {rc}):\n{done.stderr[-3000:]}")
    return float(seconds), float(cpu), float(mb)


def phase_seconds(stats: pstats.Stats, total: float) -> dict[str, float]:
    """Cumulative seconds of each phase in PHASES, and `other` for the rest of `total`."""
    found = dict.fromkeys(PHASES, 0.0)
    for (path, _line, name), (_cc, _nc, _tt, cumulative, _callers) in stats.stats.items():
        for phase, (file, func) in PHASES.items():
            if path.endswith(f"snakemake/{file}") and name == func:
                found[phase] = max(found[phase], cumulative)
    found["other"] = max(total - sum(found.values()), 0.0)
    return found


def heaviest(stats: pstats.Stats, root: Path, top: int = 12) -> list[tuple[float, int, str]]:
    """(cumulative seconds, calls, name) of this checkout's heaviest functions, and deepcopy's."""
    rows = []
    for (path, line, name), (_cc, calls, _tt, cumulative, _callers) in stats.stats.items():
        ours = path.startswith(str(root)) and "/.venv/" not in path
        if ours or name == "deepcopy":
            rows.append((cumulative, calls, f"{os.path.relpath(path, root) if ours else path}:{line}({name})"))
    return sorted(rows, reverse=True)[:top]


def profile_report(root: Path, seeds: int) -> None:
    """Run the `seeds` dry-run of `root` under cProfile and print its phases and heaviest functions."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "dag.prof"
        t = time.perf_counter()
        subprocess.run(snakemake_command(seeds, out), cwd=root, check=True, capture_output=True)
        total = time.perf_counter() - t
        stats = pstats.Stats(str(out))
    print(f"\n{root}: {seeds * RUNS_PER_SEED} runs under cProfile, {total:.1f} s")
    for phase, seconds in phase_seconds(stats, total).items():
        print(f"  {phase:<6} {seconds:7.1f} s")
    print("  heaviest functions (cumulative s, calls):")
    for cumulative, calls, name in heaviest(stats, root):
        print(f"    {cumulative:7.2f} {calls:8d}  {name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--roots", type=Path, nargs="+", default=[Path(".")], help="checkouts to time")
    parser.add_argument("--seeds", type=int, nargs="+", default=[3, 24, 238], help="seeds of each matrix")
    parser.add_argument("--profile-seeds", type=int, help="also profile the dry-run of this many seeds")
    args = parser.parse_args(argv)
    roots = [r.resolve() for r in args.roots]
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    load = os.getloadavg()[0]
    print(f"CPU: {cpu}, {os.cpu_count()} cores; load average at start {load:.2f}")
    print(f"{'runs':>7}  " + "  ".join(f"{str(r)[-30:]:>30}: wall s / CPU s / MB" for r in roots))
    for seeds in args.seeds:
        cells = []
        for root in roots:
            seconds, cpu, mb = timed(snakemake_command(seeds), root)
            cells.append(f"{seconds:39.1f} / {cpu:5.1f} / {mb:4.0f}")
        print(f"{seeds * RUNS_PER_SEED:>7}  " + "  ".join(cells), flush=True)
    print(f"load average at end {os.getloadavg()[0]:.2f} (above 0 while something else runs: contended)")
    if args.profile_seeds:
        for root in roots:
            profile_report(root, args.profile_seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
