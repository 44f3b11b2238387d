"""The multi-role GRPO training loop of one run.

    python -m trainer train --run-dir results/runs/voting-math-tiny-shared-s0

reads the run's config.json (written by `trainer launch`), evaluates the base model at step 0,
trains `max_steps` GRPO steps (rollouts through the workflow, rewards, advantages, one update
per policy), evaluates every `eval_every` steps, checkpoints under work/, and at the end
publishes train/eval/samples parquet and done.json atomically.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import random
import shutil
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pandas as pd
import torch

from trainer.sweep import rundir
from trainer.sweep.config import changed_keys, is_eval_step
from trainer.rl import early_warning, tracking
from trainer.rl.grpo import LOSS_AGGREGATIONS, BatchTotals, group_advantages, grpo_token_loss, per_token_logps
from trainer.rl.policies import Policy, PolicySet, routing_table
from trainer.rl.rollout import make_generator
from trainer.tasks import Problem, get_task, load_problems
from trainer.workflows import Episode, Turn, Workflow, make_workflow, score_episodes


class ResumeError(RuntimeError):
    """A run cannot resume from its checkpoint (the config changed)."""


class TrainingError(RuntimeError):
    """A run that cannot go on (e.g. too many steps with a non-finite loss or gradient)."""


def pause_for_tests(point: str) -> None:
    """TEST HOOK, off unless set: sleep TRAINER_TEST_PAUSE_S seconds at each `point` named in
    TRAINER_TEST_PAUSE_AT (comma list of checkpoint, publish, step), so that a test can kill the
    process inside that window (e.g. while a checkpoint is half-written)."""
    if point in os.environ.get("TRAINER_TEST_PAUSE_AT", "").split(","):
        time.sleep(float(os.environ.get("TRAINER_TEST_PAUSE_S", "1")))


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU runs are then deterministic)."""
    import numpy as np

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def step_seed(seed: int, step: int, salt: int = 0) -> int:
    """A seed per (run seed, step): a resumed run draws what an uninterrupted one would."""
    return (seed * 1_000_003 + step * 7_919 + salt) % 2**31


@dataclass
class Row:
    """One turn as a training sample of its policy."""

    role: str
    prompt_ids: list[int]
    completion_ids: list[int]
    advantage: float
    reward: float


class GradientRecorder:
    """Each role's share of a policy's gradient, from leaf hooks on role-grouped micro-batches.

    The backward pass of a micro-batch that holds one role's rows delivers exactly that role's
    gradient to each parameter's hook, so no extra backward pass is needed.
    """

    def __init__(self, params: list[torch.nn.Parameter]):
        self.role: str | None = None
        self.grads: dict[str, list[torch.Tensor | None]] = {}
        self.handles = [p.register_hook(self._hook(i, len(params))) for i, p in enumerate(params)]

    def _hook(self, i: int, n: int):
        def hook(grad: torch.Tensor) -> None:
            buf = self.grads.setdefault(self.role, [None] * n)
            buf[i] = grad.detach().float().clone() if buf[i] is None else buf[i] + grad.detach().float()
        return hook

    def reset(self) -> None:
        self.grads = {}

    def metrics(self) -> dict[str, dict[str, float]]:
        """Per role: norm of its gradient, its share of the summed squared norms, cosine with the others'."""
        flat = {r: torch.cat([g.flatten() for g in gs if g is not None]) if any(g is not None for g in gs)
                else None for r, gs in self.grads.items()}
        flat = {r: v for r, v in flat.items() if v is not None}
        sq = {r: float(v.pow(2).sum()) for r, v in flat.items()}
        total_sq = sum(sq.values())
        total = sum(flat.values()) if flat else None
        out = {}
        for r, v in flat.items():
            others = total - v
            denom = float(v.norm() * others.norm())
            out[r] = {"grad_norm": math.sqrt(sq[r]),
                      "grad_sq_share": sq[r] / total_sq if total_sq > 0 else float("nan"),
                      "grad_cos_others": float(v @ others) / denom if len(flat) > 1 and denom > 0 else float("nan")}
        return out


def micro_batches(rows: list[Row], token_budget: int) -> list[list[Row]]:
    """Rows grouped by role (so gradients can be attributed), chunked so rows x width <= budget."""
    batches = []
    for role in dict.fromkeys(r.role for r in rows):
        current: list[Row] = []
        for row in (r for r in rows if r.role == role):
            width = max([len(x.prompt_ids) + len(x.completion_ids) for x in current + [row]])
            if current and width * (len(current) + 1) > token_budget:
                batches.append(current)
                current = []
            current.append(row)
        if current:
            batches.append(current)
    return batches


def collate(rows: list[Row], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-padded prompts followed by right-padded completions: (input_ids, attention_mask, completion_mask)."""
    p_len = max(len(r.prompt_ids) for r in rows)
    c_len = max(len(r.completion_ids) for r in rows)
    ids = torch.full((len(rows), p_len + c_len), pad_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    cmask = torch.zeros((len(rows), c_len), dtype=torch.float32)
    for i, r in enumerate(rows):
        p, c = len(r.prompt_ids), len(r.completion_ids)
        ids[i, p_len - p:p_len] = torch.tensor(r.prompt_ids)
        ids[i, p_len:p_len + c] = torch.tensor(r.completion_ids)
        attn[i, p_len - p:p_len + c] = 1
        cmask[i, :c] = 1
    return ids, attn, cmask


def assign_rewards_and_advantages(workflow: Workflow, episodes: list[Episode], group_of: list[int],
                                  training: dict[str, Any]) -> None:
    """Set every turn's reward (final outcome or per role) and its GRPO advantage."""
    for ep in episodes:
        for t in ep.turns:
            t.reward = (ep.score.score if training["reward_mode"] == "final_outcome"
                        else workflow.role_reward(ep, t))
    scale = training["scale_rewards"] == "group"
    if training["advantage_grouping"] == "episode":
        rewards = [sum(t.reward for t in ep.turns) / len(ep.turns) for ep in episodes]
        advs = group_advantages(rewards, group_of, scale)
        for ep, a in zip(episodes, advs):
            for t in ep.turns:
                t.advantage = a
    else:  # a group per prompt and role instance, across the rollouts; every turn a sample
        turns = [(g, t) for g, ep in zip(group_of, episodes) for t in ep.turns]
        advs = group_advantages([t.reward for _, t in turns], [(g, t.role, t.agent) for g, t in turns], scale)
        for (_, t), a in zip(turns, advs):
            t.advantage = a
    if training.get("normalize_advantages_per_role"):
        normalize_per_role([t for ep in episodes for t in ep.turns])


def normalize_per_role(turns: list[Turn]) -> None:
    """Divide each role's advantages by their std over the step (Bessel, +1e-4, as the group std), so
    that every role's advantages have the same scale whatever its reward variance. Not re-centred:
    each GRPO group keeps its zero mean, each turn its sign."""
    for role in dict.fromkeys(t.role for t in turns):
        mine = [t for t in turns if t.role == role]
        if len(mine) < 2:
            continue
        std = float(torch.tensor([t.advantage for t in mine], dtype=torch.float64).std())
        for t in mine:
            t.advantage = t.advantage / (std + 1e-4)


class Trainer:
    """Everything one run holds: model, policies, task, workflow, data and logs."""

    def __init__(self, run_config: dict[str, Any], run_dir: str | Path, log=None):
        self.cfg = run_config
        self.t = run_config["training"]
        self.run_dir = Path(run_dir)
        self.work = self.run_dir / rundir.WORK_DIR
        self.work.mkdir(parents=True, exist_ok=True)
        self.log = log or (lambda msg: print(f"[{run_config['run']}] {msg}", file=sys.stderr, flush=True))
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        seed_everything(run_config["seed"])
        if self.device == "cpu":
            torch.set_num_threads(max(1, int(run_config["resources"].get("cpus", 1))))
        self.tokenizer, base = self._load_base()
        self.task = get_task(run_config["task"])
        self.workflow = make_workflow(run_config["workflow"], run_config["workflow_params"], self.task)
        self.routing = routing_table(run_config["policy"], self.workflow.roles, self.t.get("policy_groups"))
        self.policies = PolicySet(base, self.routing, self.t)
        self.recorders = {p.name: GradientRecorder(p.params) for p in self.policies}
        common = dict(max_new_tokens=self.t["max_completion_length"], top_p=self.t["top_p"],
                      enable_thinking=self.t["enable_thinking"], device=self.device)
        backend = self.t.get("generation_backend", "hf")
        self.generate = make_generator(backend, self.policies, self.tokenizer, temperature=self.t["temperature"],
                                       **common)
        self.eval_generate = make_generator(backend, self.policies, self.tokenizer,
                                            temperature=self.t["eval_temperature"], **common)
        params = run_config["task_params"]
        self.train_problems = load_problems(run_config["task"], params["train"], "train")
        self.eval_splits = {}
        for i, spec in enumerate(params["eval"]):
            spec = {**spec, "train_spec": params["train"]} if spec.get("from_train_holdout") else spec
            name = spec.get("name", f"eval{i}")
            self.eval_splits[name] = load_problems(run_config["task"], spec, "eval")[: self.t["eval_problems"]]
        self.train_rows: list[dict[str, Any]] = []
        self.eval_rows: list[dict[str, Any]] = []
        self.sample_rows: list[dict[str, Any]] = []
        # early warning (trainer/rl/early_warning.py): thresholds and on_warning read there, once
        self.warning_thresholds = early_warning.thresholds_of(self.t)
        self.on_warning = early_warning.on_warning_of(self.t)
        self.warning_rows: list[dict[str, Any]] = []
        # optional tracker (trainer/rl/tracking.py): rows mirrored after each checkpoint and at publish
        self.tracker = tracking.Tracker(run_config, self.run_dir, self.log)

    def _load_base(self):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        info = self.cfg["base_model"]
        dtype = getattr(torch, self.cfg["model"]["dtype"]) if self.device == "cuda" else torch.float32
        tokenizer = AutoTokenizer.from_pretrained(info["path"])
        model = AutoModelForCausalLM.from_pretrained(info["path"], dtype=dtype).to(self.device)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        if self.t.get("gradient_checkpointing"):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.enable_input_require_grads()
        return tokenizer, model

    # -- data ------------------------------------------------------------------------------
    def prompts_for_step(self, step: int) -> list[Problem]:
        """The step's prompts: consecutive slices of a per-epoch seeded permutation."""
        n, k = len(self.train_problems), self.t["prompts_per_step"]
        out = []
        for pos in range((step - 1) * k, step * k):
            epoch, i = divmod(pos, n)
            order = list(range(n))
            random.Random(step_seed(self.cfg["seed"], epoch, salt=1)).shuffle(order)
            out.append(self.train_problems[order[i]])
        return out

    # -- one step ---------------------------------------------------------------------------
    def rollout(self, step: int) -> tuple[list[Episode], list[int]]:
        torch.manual_seed(step_seed(self.cfg["seed"], step))
        prompts = self.prompts_for_step(step)
        g = self.t["num_generations"]
        problems = [p for p in prompts for _ in range(g)]
        group_of = [i for i in range(len(prompts)) for _ in range(g)]
        for m in self.policies.modules():
            m.eval()
        episodes = self.workflow.run(problems, self.generate)
        score_episodes(self.workflow, episodes)
        assign_rewards_and_advantages(self.workflow, episodes, group_of, self.t)
        return episodes, group_of

    def update(self, policy: Policy, rows: list[Row]) -> dict[str, dict[str, float]]:
        """One optimizer step of `policy` on its own rows; returns per-role metrics."""
        stats: dict[str, dict[str, float]] = {}
        if not rows:
            return stats
        model = self.policies.model(policy.name)
        model.train()
        recorder = self.recorders[policy.name]
        recorder.reset()
        totals = BatchTotals(n_sequences=len(rows), n_tokens=sum(len(r.completion_ids) for r in rows),
                             max_completion_length=self.t["max_completion_length"])
        eps_low, eps_high = self.t["epsilon"], self.t.get("epsilon_high") or self.t["epsilon"]
        beta, finite = self.t["beta"], True
        batches = micro_batches(rows, self.t["micro_batch_tokens"])
        old_logps = None
        if self.t["num_iterations"] > 1:  # the sampling policy's log-probs, before any update
            with torch.no_grad():
                old_logps = [self._logps(model, b)[0] for b in batches]
        for _ in range(self.t["num_iterations"]):
            policy.optimizer.zero_grad(set_to_none=True)
            recorder.reset()
            for bi, batch in enumerate(batches):
                role = batch[0].role
                s = stats.setdefault(role, {"loss": 0.0, "entropy": 0.0, "kl": 0.0, "clipped": 0.0, "tokens": 0.0})
                recorder.role = role
                logps, entropy, cmask = self._logps(model, batch, with_entropy=True)
                old = old_logps[bi] if old_logps is not None else logps.detach()
                ref = None
                if beta > 0:
                    ref_model, ctx = self.policies.reference_logps_context(policy.name)
                    with ctx, torch.no_grad():
                        ref = self._logps(ref_model, batch)[0]
                    self.policies.model(policy.name)
                adv = torch.tensor([r.advantage for r in batch], dtype=torch.float32, device=self.device)
                token = grpo_token_loss(logps, old, adv, eps_low, eps_high, beta, ref,
                                        self.t.get("use_bias_correction_kl", True))
                loss = LOSS_AGGREGATIONS[self.t["loss_type"]](token.loss, cmask, totals)
                finite &= bool(torch.isfinite(loss))
                loss.backward()
                n_tok = float(cmask.sum())
                s["loss"] += float(loss.detach())
                s["entropy"] += float((entropy * cmask).sum())
                s["kl"] += float((token.kl * cmask).sum()) if token.kl is not None else float("nan")
                s["clipped"] += float((token.clipped.float() * cmask).sum())
                s["tokens"] += n_tok
            grad_metrics = recorder.metrics()
            total_norm = torch.nn.utils.clip_grad_norm_(policy.params, self.t["max_grad_norm"])
            finite &= bool(torch.isfinite(total_norm))
            if finite:
                policy.optimizer.step()
            policy.optimizer.zero_grad(set_to_none=True)
            policy.scheduler.step()
        for role, s in stats.items():
            s.update(grad_metrics.get(role, {}))
            s["skipped"] = not finite
        return stats

    def _logps(self, model, batch: list[Row], with_entropy: bool = False):
        ids, attn, cmask = collate(batch, self.tokenizer.pad_token_id)
        ids, attn, cmask = ids.to(self.device), attn.to(self.device), cmask.to(self.device)
        logps, entropy = per_token_logps(model, ids, attn, cmask.shape[1], self.t["temperature"], with_entropy)
        return logps, entropy, cmask

    def train_step(self, step: int) -> None:
        t0 = time.time()
        episodes, group_of = self.rollout(step)
        turns = [t for ep in episodes for t in ep.turns]
        zero_var = early_warning.zero_variance_shares(episodes, group_of)  # early warning: advantage collapse
        for policy in self.policies:
            rows = [Row(t.role, t.completion.prompt_ids, t.completion.completion_ids, t.advantage, t.reward)
                    for t in turns if self.routing[t.role] == policy.name and t.completion.completion_ids]
            stats = self.update(policy, rows)
            lr = policy.scheduler.get_last_lr()[0]
            for role in policy.roles:
                rt = [t for t in turns if t.role == role]
                rewards = torch.tensor([t.reward for t in rt], dtype=torch.float64)
                s = stats.get(role, {})
                tokens = s.get("tokens", 0.0) or float("nan")
                self.train_rows.append({
                    "step": step, "role": role, "policy": policy.name, "n_turns": len(rt),
                    "n_tokens": int(sum(len(t.completion.completion_ids) for t in rt)),
                    "reward_mean": float(rewards.mean()) if len(rt) else float("nan"),
                    "reward_std": float(rewards.std()) if len(rt) > 1 else float("nan"),
                    "adv_abs_mean": sum(abs(t.advantage) for t in rt) / len(rt) if rt else float("nan"),
                    "loss": s.get("loss", float("nan")), "grad_norm": s.get("grad_norm", float("nan")),
                    "grad_sq_share": s.get("grad_sq_share", float("nan")),
                    "grad_cos_others": s.get("grad_cos_others", float("nan")),
                    "entropy": s.get("entropy", float("nan")) / tokens, "kl": s.get("kl", float("nan")) / tokens,
                    "clip_ratio": s.get("clipped", float("nan")) / tokens,
                    "completion_len_mean": sum(len(t.completion.completion_ids) for t in rt) / max(len(rt), 1),
                    "lr": lr, "skipped": bool(s.get("skipped", False)), "time_s": time.time() - t0,
                    "zero_var_group_share": zero_var.get(role, float("nan")),  # early warning
                })

    # -- evaluation -------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, step: int) -> None:
        for m in self.policies.modules():
            m.eval()
        for split, problems in self.eval_splits.items():
            t0 = time.time()
            torch.manual_seed(step_seed(self.cfg["seed"], step, salt=2))
            episodes = self.workflow.run(problems, self.eval_generate)
            score_episodes(self.workflow, episodes)
            row = {"step": step, "split": split, "n": len(episodes),
                   "accuracy": sum(ep.correct for ep in episodes) / len(episodes),
                   "final_answer_parse_rate": sum(bool(ep.score and ep.score.parsed) for ep in episodes) / len(episodes),
                   **self.workflow.diagnostics(episodes), "time_s": time.time() - t0}
            self.eval_rows.append(row)
            keep = random.Random(step_seed(self.cfg["seed"], step, salt=3)).sample(
                range(len(episodes)), min(self.t["samples_per_eval"], len(episodes)))
            for e in sorted(keep):
                ep = episodes[e]
                for k, turn in enumerate(ep.turns):
                    self.sample_rows.append({
                        "step": step, "split": split, "episode": e, "problem_id": ep.problem.id, "turn": k,
                        "role": turn.role, "agent": turn.agent, "prompt": turn.prompt,
                        "completion": turn.completion.text, "reward": float(ep.score.score if ep.score else 0.0),
                        "final_answer": self.task.extract_answer(ep.final_text) or "", "correct": ep.correct})

    # -- the loop ---------------------------------------------------------------------------
    def fit(self, stop: threading.Event | None = None) -> dict[str, Any] | None:
        """Resume or start, train to max_steps, publish; return done.json's content.

        When `stop` is set (the job was signalled: SLURM timeout or preemption), the loop
        checkpoints at the end of the current step and returns None; the requeued job resumes there.
        """
        max_steps, t_start = self.t["max_steps"], time.time()
        start = self.resume()
        self.write_progress(start, "started")
        if start == 0:
            self.evaluate(0)
            self.write_logs(self.work)  # curves of running runs: partial logs under work/ at each eval
            self.log(f"step 0/{max_steps} eval " + self._eval_summary())
        for step in range(start + 1, max_steps + 1):
            tokens_before = self.generate.generated_tokens
            t0 = time.time()
            self.train_step(step)
            pause_for_tests("step")
            self.check_skipped(step)
            warned = self.check_warnings(step)  # early warning: rows, log lines; `stop` ends the run early
            early = bool(warned) and self.on_warning == "stop" and step < max_steps
            if is_eval_step(step, self.t):
                self.evaluate(step)
                self.write_logs(self.work)  # curves of running runs: partial logs under work/ at each eval
            stopping = stop is not None and stop.is_set() and step < max_steps
            if step % self.t["save_every"] == 0 or step == max_steps or stopping or early:
                self.checkpoint(step)
            self.write_progress(step, "training")
            if early:
                self.log(f"step {step}/{max_steps}: training.on_warning is stop; checkpoint saved, ending early")
                return self.publish(step, time.time() - t_start, stopped_early=warned[0])
            if stopping:
                self.log(f"step {step}/{max_steps}: the job was signalled; checkpoint saved, stopping")
                return None
            elapsed = time.time() - t_start
            rewards = " ".join(f"{r['role']}={r['reward_mean']:.2f}" for r in self.train_rows if r["step"] == step)
            tok_s = (self.generate.generated_tokens - tokens_before) / max(time.time() - t0, 1e-9)
            left = elapsed / (step - start) * (max_steps - step)
            self.log(f"step {step}/{max_steps} reward {rewards} | eval {self._eval_summary()} | "
                     f"{tok_s:.0f} tok/s | {elapsed:.0f}s elapsed, {left:.0f}s left")
        return self.publish(max_steps, time.time() - t_start)

    def check_skipped(self, step: int) -> None:
        """Log a skipped update; fail once more than `max_skipped` steps were skipped."""
        skipped = sorted({r["step"] for r in self.train_rows if r["skipped"]})
        if skipped and skipped[-1] == step:
            self.log(f"step {step}: non-finite loss or gradient, update skipped ({len(skipped)} so far)")
        limit = self.t.get("max_skipped", 10)
        if len(skipped) > limit:
            raise TrainingError(f"run {self.cfg['run']}: {len(skipped)} steps skipped for a non-finite loss or "
                                f"gradient (training.max_skipped = {limit}), at steps {skipped}")

    def check_warnings(self, step: int) -> list[dict[str, Any]]:
        """The early warnings whose onset is this step: kept for warnings.parquet and logged."""
        found = early_warning.warnings_at(self.train_rows, step, self.warning_thresholds)
        self.warning_rows += found
        for w in found:
            self.log(f"step {step}: WARNING {w['detector']} on {w['role']}: {w['value']:.3g} "
                     f"(threshold {w['threshold']:.3g})")
        return found

    def _eval_summary(self) -> str:
        last = self.eval_rows[-len(self.eval_splits):]
        return " ".join(f"{r['split']}={r['accuracy']:.3f}@{r['step']}" for r in last)

    def checkpoint(self, step: int) -> None:
        """Everything a resume needs, under work/checkpoints/step-N: each policy (save_pretrained
        layout), optimizer, scheduler and RNG states, the config, and the logs so far.

        Written under a temporary name and renamed, so a checkpoint is either whole or absent.
        """
        root = self.work / "checkpoints"
        final = root / f"step-{step:06d}"
        tmp = root / f".step-{step:06d}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        self.policies.save(str(tmp / "policies"))
        pause_for_tests("checkpoint")
        import numpy as np

        torch.save({"step": step, "config_hash": self.cfg["config_hash"],
                    "params": {p.name: [x.detach().cpu().clone() for x in p.params] for p in self.policies},
                    "optimizers": {p.name: p.optimizer.state_dict() for p in self.policies},
                    "schedulers": {p.name: p.scheduler.state_dict() for p in self.policies},
                    "sampler": self.sampler_state(step),
                    "rng": {"python": random.getstate(), "numpy": np.random.get_state(),
                            "torch": torch.get_rng_state()}}, tmp / "state.pt")
        rundir.write_json_atomic(self.cfg, tmp / rundir.CONFIG_JSON)
        self.write_logs(tmp)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        self.tracker.flush(step, self.train_rows, self.eval_rows, self.warning_rows)  # tracker: after the checkpoint
        for old in sorted(root.glob("step-*"))[: -self.t["keep_last"]]:
            # renamed first, so a kill during the delete never leaves a partial step-* behind
            doomed = root / f".{old.name}.deleting"
            os.replace(old, doomed)
            shutil.rmtree(doomed)

    def sampler_state(self, step: int) -> dict[str, int]:
        """Where the data sampler stands after `step`: the next prompt's position in the epoch order.

        The order of each epoch is a seeded permutation (prompts_for_step), so this position
        is all a resume needs; it is stored to check that it agrees with the config.
        """
        position = step * self.t["prompts_per_step"]
        epoch, index = divmod(position, len(self.train_problems))
        return {"next_step": step + 1, "position": position, "epoch": epoch, "index": index,
                "n_problems": len(self.train_problems)}

    def write_progress(self, step: int, phase: str) -> None:
        """work/progress.json (atomically): how far the run is, for `python -m trainer status`."""
        rundir.write_json_atomic({"run": self.cfg["run"], "step": step, "max_steps": self.t["max_steps"],
                                  "phase": phase, "host": socket.gethostname(), "pid": os.getpid(),
                                  "updated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
                                 self.work / rundir.PROGRESS_JSON)

    def resume(self) -> int:
        """Load the newest whole checkpoint, if any; return the step it ends at (0: start afresh).

        Refuses a checkpoint written under another config, naming the keys that changed.
        """
        root = self.work / "checkpoints"
        for stale in root.glob(".step-*"):  # a checkpoint write or delete that was killed
            self.log(f"removing incomplete checkpoint {stale}")
            shutil.rmtree(stale)
        ckpts = sorted(root.glob("step-*"))
        if not ckpts:
            return 0
        latest = ckpts[-1]
        old_cfg = json.loads((latest / rundir.CONFIG_JSON).read_text())
        if old_cfg["config_hash"] != self.cfg["config_hash"]:
            raise ResumeError(
                f"run {self.cfg['run']}: its checkpoint {latest} was written under another config; changed: "
                f"{', '.join(changed_keys(old_cfg, self.cfg)) or '(base model)'}. Restore the config, or start the "
                f"run afresh: delete {self.work / 'checkpoints'} (or `python -m trainer launch ... --restart`)")
        state = torch.load(latest / "state.pt", weights_only=False)
        with torch.no_grad():
            for p in self.policies:
                for x, saved in zip(p.params, state["params"][p.name]):
                    x.copy_(saved)
                p.optimizer.load_state_dict(state["optimizers"][p.name])
                p.scheduler.load_state_dict(state["schedulers"][p.name])
        import numpy as np

        random.setstate(state["rng"]["python"])
        np.random.set_state(state["rng"]["numpy"])
        torch.set_rng_state(state["rng"]["torch"])
        step = int(state["step"])
        if state.get("sampler") not in (None, self.sampler_state(step)):
            raise ResumeError(f"run {self.cfg['run']}: {latest / 'state.pt'}: sampler position "
                              f"{state['sampler']} does not match training.prompts_per_step and the train data "
                              f"({self.sampler_state(step)}); restart the run")
        read = lambda name: pd.read_parquet(latest / name).to_dict("records")  # noqa: E731
        self.train_rows = [r for r in read(rundir.TRAIN_PARQUET) if r["step"] <= step]
        self.eval_rows = [r for r in read(rundir.EVAL_PARQUET) if r["step"] <= step]
        self.sample_rows = [r for r in read(rundir.SAMPLES_PARQUET) if r["step"] <= step]
        if (latest / rundir.WARNINGS_PARQUET).exists():  # absent in checkpoints from before early warning
            self.warning_rows = [r for r in read(rundir.WARNINGS_PARQUET) if r["step"] <= step]
        self.log(f"resumed from {latest.name}")
        return step

    def write_logs(self, directory: Path) -> None:
        rundir.write_parquet_atomic(rundir.to_table(self.train_rows, rundir.TRAIN_SCHEMA), directory / rundir.TRAIN_PARQUET)
        rundir.write_parquet_atomic(rundir.to_table(self.eval_rows, rundir.EVAL_SCHEMA), directory / rundir.EVAL_PARQUET)
        rundir.write_parquet_atomic(rundir.to_table(self.sample_rows, rundir.SAMPLES_SCHEMA),
                                    directory / rundir.SAMPLES_PARQUET)
        rundir.write_parquet_atomic(rundir.to_table(self.warning_rows, rundir.WARNINGS_SCHEMA),
                                    directory / rundir.WARNINGS_PARQUET)

    def publish(self, steps_done: int, wall_time_s: float,
                stopped_early: dict[str, Any] | None = None) -> dict[str, Any]:
        """The run's logs into its directory, each atomically, and done.json last; a run ended by an early
        warning (training.on_warning: stop) names it in done.json's `stopped_early`."""
        self.write_logs(self.run_dir)
        pause_for_tests("publish")
        done = {"run": self.cfg["run"], "steps_done": steps_done, "steps_expected": self.t["max_steps"],
                "config_hash": self.cfg["config_hash"], "wall_time_s": wall_time_s,
                "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        if stopped_early:
            done["stopped_early"] = {"step": int(stopped_early["step"]), "role": str(stopped_early["role"]),
                                     "detector": str(stopped_early["detector"]),
                                     "value": float(stopped_early["value"]),
                                     "threshold": float(stopped_early["threshold"])}
        rundir.write_json_atomic(done, self.run_dir / rundir.DONE_JSON)
        self.tracker.flush(steps_done, self.train_rows, self.eval_rows, self.warning_rows, finished=True)  # tracker
        self.write_progress(steps_done, "done")
        self.log(f"done: {self.run_dir}")
        return done


def run_training(run_dir: str | Path, restart: bool = False,
                 stop: threading.Event | None = None) -> dict[str, Any] | None:
    """Train the run whose config.json is in `run_dir` (what a submitit job calls).

    Resumes from the newest checkpoint under work/; `restart` discards the checkpoints first.
    Holds work/train.lock while training, so a second process on the same run fails at once
    instead of writing the same checkpoints. An error is also written to work/failure.json (for
    `status`). Returns done.json's content, or None when `stop` ended the run early.
    """
    run_dir = Path(run_dir)
    work = run_dir / rundir.WORK_DIR
    work.mkdir(parents=True, exist_ok=True)
    with hold_run_lock(work):
        remove_stale_temporaries(run_dir)
        if restart:
            shutil.rmtree(work / "checkpoints", ignore_errors=True)
            (work / tracking.TRACKING_JSON).unlink(missing_ok=True)  # tracker: a fresh tracker run
        (work / rundir.FAILURE_JSON).unlink(missing_ok=True)
        cfg = json.loads((run_dir / rundir.CONFIG_JSON).read_text())
        done_path = run_dir / rundir.DONE_JSON
        if done_path.exists():
            done = json.loads(done_path.read_text())
            if done.get("config_hash") == cfg["config_hash"] and (
                    done.get("steps_done") == cfg["training"]["max_steps"] or done.get("stopped_early")):
                return done
        try:
            return Trainer(cfg, run_dir).fit(stop)
        except Exception as e:
            write_failure(work, cfg["run"], e)
            raise


class RunBusyError(RuntimeError):
    """Another process is training this run right now."""


@contextlib.contextmanager
def hold_run_lock(work: Path) -> Iterator[None]:
    """An exclusive flock on work/train.lock for the duration of a `with` block.

    The kernel drops it when the holder dies (SIGKILL included), so it never goes stale.
    """
    with open(work / rundir.TRAIN_LOCK, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            raise RunBusyError(f"{work / rundir.TRAIN_LOCK}: another process trains this run ({f.read().strip()}); "
                               f"wait for it or stop it") from None
        f.truncate(0)
        f.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        f.flush()
        yield


def remove_stale_temporaries(run_dir: Path) -> None:
    """Delete the temporary files of atomic writes (`.NAME.tmp-PID`) that a killed process left in
    the run directory; a live process's (e.g. the launcher's, on this host) is left alone."""
    for stale in [*run_dir.glob(".*.tmp-*"), *(run_dir / rundir.WORK_DIR).glob(".*.tmp-*")]:
        pid = stale.name.rsplit("-", 1)[-1]
        if not (pid.isdigit() and int(pid) != os.getpid() and rundir.pid_alive(int(pid))):
            stale.unlink(missing_ok=True)


def write_failure(work: Path, run: str, error: BaseException) -> None:
    """work/failure.json: the error that ended this attempt, one line first (read by `status`)."""
    line = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    rundir.write_json_atomic({"run": run, "error": line, "message": str(error)[-4000:], "host": socket.gethostname(),
                              "failed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, work / rundir.FAILURE_JSON)
