"""The multi-role GRPO training loop of one run.

    python -m trainer train --run-dir results/runs/voting-math-tiny-shared-s0

reads the run's config.json (written by `trainer launch`) into RunSettings, evaluates the base
model at step 0, trains `max_steps` GRPO steps (rollouts through the workflow, rewards and
advantages (grpo.py), one update per policy (update.py)), evaluates every `eval_every` steps,
checkpoints under work/ (checkpoint.py), and at the end publishes train/eval/samples parquet and
done.json atomically. Read `Trainer.fit` top to bottom for the loop; trainer/rl/run.py is what a
job calls (the run's lock and failure record around it).
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

from trainer import early_warning
from trainer.contract import rundir
from trainer.rl import tracking
from trainer.rl.checkpoint import ResumeError, load_checkpoint, sampler_state, save_checkpoint, write_run_logs
from trainer.rl.distributed import Ranks, device_of, rank_seed
from trainer.rl.evaluation import EvalProgress, evaluate_splits
from trainer.rl.grpo import assign_rewards_and_advantages
from trainer.rl.inputs import load_base, load_eval_splits, load_train_problems
from trainer.rl.peak_keeper import PeakKeeper
from trainer.rl.policies import Policy, PolicySet, routing_table
from trainer.rl.preflight import check_run
from trainer.rl.rollout import make_generator
from trainer.rl.run_records import done_record, eval_summary, progress_record, step_line
from trainer.rl.seeding import epoch_order, seed_everything, step_seed
from trainer.rl.stopping import StoppableGenerator, StopRequested, pause_for_tests
from trainer.rl.train_rows import NAN, role_row
from trainer.rl.update import GradientRecorder, PolicyUpdater, Row, collate, micro_batches, policy_rows
from trainer.rl.weight_sync import logp_mismatch
from trainer.settings import RunSettings, TrackingSettings
from trainer.tasks import Problem, get_task
from trainer.workflows import Episode, Turn, make_workflow, score_episodes

__all__ = ["GradientRecorder", "ResumeError", "Row", "Trainer", "TrainingError", "collate", "micro_batches"]


class TrainingError(RuntimeError):
    """A run that cannot go on (e.g. too many steps with a non-finite loss or gradient)."""


class Trainer:
    """Everything one run holds: model, policies, task, workflow, data and logs.

    Built from RunSettings (or the config.json dict they are read from). `model` and `tokenizer`,
    when given, replace the base model of `settings.base_model` (tests build a Trainer on a tiny
    in-memory model).
    """

    def __init__(
        self,
        settings: RunSettings | dict[str, Any],
        run_dir: str | Path,
        log=None,
        *,
        model: torch.nn.Module | None = None,
        tokenizer: Any = None,
        ranks: Ranks | None = None,
    ):
        self.ranks = ranks or Ranks.single()  # DDP: this process's rank (trainer/rl/distributed.py)
        self.settings = settings if isinstance(settings, RunSettings) else RunSettings.from_dict(settings)
        self.t = t = self.settings.training
        self.run_dir = Path(run_dir)
        self.work = self.run_dir / rundir.WORK_DIR
        self.work.mkdir(parents=True, exist_ok=True)
        self.log = log or (lambda msg: print(f"[{self.settings.run}] {msg}", file=sys.stderr, flush=True))
        if not self.ranks.is_main:  # DDP: rank 0 alone logs
            self.log = lambda msg: None
        self.device = device_of(self.ranks)  # DDP: this rank's GPU
        seed_everything(self.settings.seed)
        if self.device == "cpu":
            torch.set_num_threads(max(1, self.settings.resources.cpus // self.ranks.world_size))
        check_run(self.settings.raw)  # a rollout backend that cannot start fails before the model loads
        self.tokenizer, base = (tokenizer, model) if model is not None else load_base(self.settings, self.device)
        self.task = get_task(
            self.settings.task, allow_unisolated_sandbox=self.settings.launcher.allow_unisolated_sandbox
        )
        params = dataclasses.asdict(self.settings.workflow_params)  # the workflows read their knobs as a dict
        self.workflow = make_workflow(self.settings.workflow, params, self.task)
        self.routing = routing_table(self.settings.policy, self.workflow.roles, t.policy_groups)
        self.policies = PolicySet(base, self.routing, t)
        self.ranks.broadcast_params([x for p in self.policies for x in p.params])  # DDP: rank 0's adapters
        self.updater = PolicyUpdater(self.policies, t, self.tokenizer.pad_token_id, self.device, self.ranks)
        self.recorders = self.updater.recorders
        self.generate, self.eval_generate = self._generators()  # training's sampling, then eval's
        self.timings = {"update_s": 0.0, "checkpoint_s": 0.0}  # the longest seen: what a signal must wait for
        self.resumed_at: int | None = None  # the step resume() restored (its eval may reuse saved chunks)
        self.train_problems, self.eval_splits = load_train_problems(self.settings), load_eval_splits(self.settings)
        self.train_rows, self.eval_rows, self.sample_rows = [], [], []  # the parquet logs' rows, as dicts
        self.warning_rows: list[dict[str, Any]] = []  # early warnings (early_warning.py): warnings.parquet
        self.warning_thresholds = early_warning.checked(dataclasses.asdict(t.early_warning))
        self.peak = PeakKeeper(
            self.work, next(iter(self.eval_splits)), self.settings.peak_smoothing_window, enabled=self.ranks.is_main
        )  # the policies at the best smoothed eval so far
        # the optional tracker mirrors the rows after each completed step and at publish (rank 0's alone)
        tracker_settings = self.settings.tracking if self.ranks.is_main else TrackingSettings()
        self.tracker = tracking.Tracker(tracker_settings, self.settings.raw, self.run_dir, self.log)

    def _generators(self) -> tuple[StoppableGenerator, StoppableGenerator]:
        """The rollout backend at training's temperature and at eval's (vllm: one engine serves both)."""
        return tuple(
            StoppableGenerator(
                make_generator(
                    self.t,
                    self.policies,
                    self.tokenizer,
                    temperature=temperature,
                    device=self.device,
                    seed=self.settings.seed,
                    ranks=self.ranks,
                    revision=self.settings.model.revision,
                )
            )
            for temperature in (self.t.temperature, self.t.eval_temperature)
        )

    # -- data ------------------------------------------------------------------------------
    def prompts_for_step(self, step: int) -> list[Problem]:
        """The step's prompts: consecutive slices of a per-epoch seeded permutation."""
        n, k = len(self.train_problems), self.t.prompts_per_step
        out = []
        for pos in range((step - 1) * k, step * k):
            epoch, i = divmod(pos, n)
            out.append(self.train_problems[epoch_order(self.settings.seed, epoch, n)[i]])
        return out

    # -- one step ---------------------------------------------------------------------------
    def rollout(self, step: int) -> tuple[list[Episode], list[int]]:
        """The step's episodes (num_generations per prompt), scored, with rewards and advantages."""
        torch.manual_seed(rank_seed(step_seed(self.settings.seed, step), self.ranks.rank))
        prompts = self.prompts_for_step(step)
        g = self.t.num_generations
        group_of = [i for i in range(len(prompts)) for _ in range(g)]
        for m in self.policies.modules():
            m.eval()
        # DDP: this rank's prompts (all their generations), then every rank's episodes in rank order
        episodes = self.workflow.run([p for p in self.ranks.shard(prompts) for _ in range(g)], self.generate)
        score_episodes(self.workflow, episodes)
        episodes = self.ranks.all_gather(episodes)
        assign_rewards_and_advantages(self.workflow, episodes, group_of, self.t)
        return episodes, group_of

    def update(self, policy: Policy, rows: list[Row]) -> dict[str, dict[str, float]]:
        """One optimizer step of `policy` on its own rows; returns per-role metrics (update.py)."""
        return self.updater.update(policy, rows)

    def policy_rows(self, policy: Policy, turns: list[Turn]) -> list[Row]:
        """The step's training samples of `policy`: its roles' turns that generated tokens (update.policy_rows)."""
        return policy_rows(policy.name, turns, self.routing, self.workflow.parallel_role)

    def train_step(self, step: int) -> None:
        t0 = time.time()
        episodes, group_of = self.rollout(step)
        t_update = time.time()
        turns = [t for ep in episodes for t in ep.turns]
        zero_var = early_warning.zero_variance_shares(episodes, group_of)  # early warning: advantage collapse
        # training-inference mismatch per role, before the update (vllm only: HF logps are the trainer's)
        mismatch = (
            logp_mismatch(self.policies, turns, self.t.temperature, self.ranks)
            if self.t.generation_backend == "vllm"
            else {}
        )
        self.generate.before_update()  # vllm enable_sleep_mode: the engine sleeps through the update
        for policy in self.policies:
            stats = self.update(policy, self.ranks.shard(self.policy_rows(policy, turns)))  # DDP: this rank's share
            lr = policy.scheduler.get_last_lr()[0]
            for role in policy.roles:
                signals = {
                    "lr": lr,
                    "time_s": time.time() - t0,
                    "logp_mismatch": mismatch.get(role, NAN),
                    "zero_var_group_share": zero_var.get(role, NAN),
                }
                role_turns = [x for x in turns if x.role == role]
                row = role_row(
                    step, role, policy.name, role_turns, stats.get(role, {}), signals, self.t.agent_gradients
                )
                self.train_rows.append(row)
        self.generate.after_update(step)  # sync the updated weights into the vllm engine, verified
        self.timings["update_s"] = max(self.timings["update_s"], time.time() - t_update)

    # -- evaluation -------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, step: int) -> None:
        """Evaluate every split in chunks (evaluation.py), each saved as it finishes; a resumed step's eval
        reuses its saved chunks. The rows are kept only once all splits are done (a stop abandons them)."""
        for m in self.policies.modules():
            m.eval()
        progress = EvalProgress(self.work, step, self.settings.config_hash, self.ranks.is_main, self.log)
        progress.discard(keep=step == self.resumed_at)  # saved chunks are of the policies resumed with
        eval_rows, sample_rows = evaluate_splits(
            step,
            self.eval_splits,
            self.workflow,
            self.task,
            self.eval_generate,
            self.ranks,
            self.t,
            self.settings.seed,
            progress,
        )
        if progress.resumed:
            self.log(f"step {step} eval: resumed {progress.resumed} saved chunks of problems")
        progress.discard()
        self.eval_rows += eval_rows
        self.sample_rows += sample_rows
        self.peak.observe(self.eval_rows, step, self.policies)

    # -- the loop ---------------------------------------------------------------------------
    def fit(self, stop: threading.Event | None = None) -> dict[str, Any] | None:
        """Resume or start, train to max_steps, publish; return done.json's content.

        When `stop` is set (the job was signalled: SLURM timeout, preemption or requeue), a rollout or
        eval in progress is abandoned at its next generation call, the state after the last completed
        step is checkpointed (an eval it owes is redone on resume) and None is returned.
        """
        max_steps, t_start = self.t.max_steps, time.time()
        self.generate.stop = self.eval_generate.stop = stop
        start = completed = self.resume()
        if start > 0:  # vllm: the engine was built serving the starting weights; it serves the resumed ones
            self.generate.after_update(start)
        self.tracker.resume_at(start)  # the steps after the checkpoint are computed again (tracking.py)
        self.write_progress(start, "started")
        try:
            if self.t.is_eval_step(start) and not any(r["step"] == start for r in self.eval_rows):
                self.evaluate(start)  # step 0, or a step whose eval a signal cut short
                self.write_partial_logs()
                self.log(f"step {start}/{max_steps} eval " + eval_summary(self._last_evals()))
            self.tracker.flush(start, self.train_rows, self.eval_rows, self.warning_rows)
            for step in range(start + 1, max_steps + 1):
                tokens_before, chunks_before, t0 = self.generate.generated_tokens, self.generate.chunks, time.time()
                self.train_step(step)
                completed = step
                pause_for_tests("step")
                self.check_skipped(step)
                warned = self.check_warnings(step)  # early warning: rows, log lines; `stop` ends the run early
                early = bool(warned) and self.t.on_warning == "stop" and step < max_steps
                if self.t.is_eval_step(step):
                    self.evaluate(step)
                    self.write_partial_logs()
                # DDP: submitit signals rank 0 alone; every rank stops at the same step
                stopping = self.ranks.any_true(stop is not None and stop.is_set()) and step < max_steps
                if step % self.t.save_every == 0 or step == max_steps or stopping or early:
                    self.checkpoint(step)
                self.tracker.flush(step, self.train_rows, self.eval_rows, self.warning_rows)  # the step, its eval
                self.write_progress(step, "training")
                if early:
                    self.log(f"step {step}/{max_steps}: training.on_warning is stop; checkpoint saved, ending early")
                    return self.publish(step, time.time() - t_start, stopped_early=warned[0])
                if stopping:
                    self.log(f"step {step}/{max_steps}: the job was signalled; checkpoint saved, stopping")
                    return None
                self.log_step(step, start, t_start, t0, tokens_before, chunks_before)
        except StopRequested:  # DDP: raised on the signalled rank; its peers end with the job
            self.save_on_stop(completed)
            return None
        finally:
            self.close()  # ended, stopped or failed: the rollout backend's files go (vllm: its adapters)
        return self.publish(max_steps, time.time() - t_start)

    def close(self) -> None:
        """Release what the rollout backends hold outside the process (the vllm engine's adapter files)."""
        for generator in (self.generate, self.eval_generate):
            generator.close()

    def log_step(
        self, step: int, start: int, t_start: float, t0: float, tokens_before: int, chunks_before: int
    ) -> None:
        """The progress line of a finished step."""
        elapsed = time.time() - t_start
        speed = {
            "tok_s": (self.generate.generated_tokens - tokens_before) / max(time.time() - t0, 1e-9),
            "chunks": self.generate.chunks - chunks_before,
            "elapsed_s": elapsed,
            "left_s": elapsed / (step - start) * (self.t.max_steps - step),
        }
        rewards = {r["role"]: r["reward_mean"] for r in self.train_rows if r["step"] == step}
        self.log(step_line(step, self.t.max_steps, rewards, self._last_evals(), speed))

    def save_on_stop(self, completed: int) -> None:
        """Checkpoint the state after step `completed` (unless saved already): what a signal keeps."""
        saved = (self.work / rundir.CHECKPOINTS_DIR / f"step-{completed:06d}").exists()
        if not saved and (completed > 0 or self.eval_rows):
            self.checkpoint(completed)
        self.write_progress(completed, "stopped")
        self.log(
            f"step {completed}/{self.t.max_steps}: the job was signalled; the step in progress was "
            f"abandoned, checkpoint step-{completed:06d} holds every completed step, stopping"
        )

    def check_skipped(self, step: int) -> None:
        """Log a skipped update; fail once more than `max_skipped` steps were skipped."""
        skipped = sorted({r["step"] for r in self.train_rows if r["skipped"]})
        if skipped and skipped[-1] == step:
            self.log(f"step {step}: non-finite loss or gradient, update skipped ({len(skipped)} so far)")
        limit = self.t.max_skipped
        if len(skipped) > limit:
            raise TrainingError(
                f"run {self.settings.run}: {len(skipped)} steps skipped for a non-finite loss or "
                f"gradient (training.max_skipped = {limit}), at steps {skipped}"
            )

    def check_warnings(self, step: int) -> list[dict[str, Any]]:
        """The early warnings whose onset is this step: kept for warnings.parquet and logged."""
        found = early_warning.warnings_at(self.train_rows, step, self.warning_thresholds)
        self.warning_rows += found
        for w in found:
            self.log(
                f"step {step}: WARNING {w['detector']} on {w['role']}: {w['value']:.3g} "
                f"(threshold {w['threshold']:.3g})"
            )
        return found

    def write_partial_logs(self) -> None:
        """The logs so far under work/ (rank 0), after each eval: the curves of a running run."""
        if self.ranks.is_main:
            self.write_logs(self.work)

    def _last_evals(self) -> list[dict[str, Any]]:
        return self.eval_rows[-len(self.eval_splits) :]

    def checkpoint(self, step: int) -> None:
        """Everything a resume needs under work/checkpoints/step-N (checkpoint.py), whole or absent."""
        if not self.ranks.is_main:  # DDP: rank 0 writes; every rank holds the same state
            return
        t_ckpt = time.time()
        save_checkpoint(
            self.work,
            step,
            self.settings.raw,  # config.json as it is: the same bytes, the same hash
            self.policies,
            self.sampler_state(step),
            lambda d: (self.write_logs(d), self.peak.link_into(d)),
            self.t.keep_last,
        )
        self.timings["checkpoint_s"] = max(self.timings["checkpoint_s"], time.time() - t_ckpt)

    def sampler_state(self, step: int) -> dict[str, int]:
        """Where the data sampler stands after `step` (checkpoint.sampler_state)."""
        return sampler_state(step, self.t.prompts_per_step, len(self.train_problems))

    def write_progress(self, step: int, phase: str) -> None:
        """work/progress.json (atomically): how far the run is, for `python -m trainer status`."""
        if not self.ranks.is_main:  # DDP: rank 0 writes
            return
        record = progress_record(self.settings.run, step, self.t.max_steps, phase, self.timings)
        rundir.write_json_atomic(record, self.work / rundir.PROGRESS_JSON)

    def resume(self) -> int:
        """Load the newest whole checkpoint, if any; return the step it ends at (0: start afresh).

        Refuses a checkpoint written under another config, naming the keys that changed.
        """
        step, logs = load_checkpoint(
            self.work, self.settings.raw, self.policies, self.sampler_state, self.log, clean_up=self.ranks.is_main
        )  # DDP: rank 0 removes a partial one
        self.resumed_at = step  # the eval of this step may reuse saved chunks (evaluation.py)
        if step:
            self.train_rows, self.eval_rows, self.sample_rows = logs["train"], logs["eval"], logs["samples"]
            self.warning_rows = logs["warnings"]
        self.peak.restore(rundir.checkpoint_dir(self.work, step) if step else None)
        return step

    def write_logs(self, directory: Path) -> None:
        """The four parquet logs so far into `directory` (checkpoint.write_run_logs)."""
        logs = {"train": self.train_rows, "eval": self.eval_rows, "samples": self.sample_rows}
        write_run_logs(directory, {**logs, "warnings": self.warning_rows})

    def publish(self, steps_done: int, wall_time_s: float, stopped_early: dict[str, Any] | None = None) -> dict:
        """The run's logs into its directory, each atomically, and done.json last (DDP: rank 0); a run
        ended by an early warning (training.on_warning: stop) names it in done.json's `stopped_early`."""
        done = done_record(
            self.settings.run, steps_done, self.t.max_steps, self.settings.config_hash, wall_time_s, stopped_early
        )
        if not self.ranks.is_main:
            return done
        self.write_logs(self.run_dir)
        done["peak"] = self.peak.publish(self.run_dir)  # the peak model, linked into the run directory
        pause_for_tests("publish")
        rundir.write_json_atomic(done, self.run_dir / rundir.DONE_JSON)
        self.tracker.flush(steps_done, self.train_rows, self.eval_rows, self.warning_rows, finished=True)
        self.write_progress(steps_done, "done")
        self.log(f"done: {self.run_dir}")
        return done
