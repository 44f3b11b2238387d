"""The GPU path's rules, checked on CPU: the vLLM engine and the HF backend's generation.

No test here needs a GPU or vLLM: CUDA is faked where a rule depends on it (tests/collective_checker.py),
and vLLM is a recording stand-in (tests/fake_vllm.py) where the trainer's side of its contract is checked
(the arguments and environment of each rank's engine, the order of sleep, wake-up, sync and generation).
What only a GPU shows (vLLM's external_launcher and sleep mode on a device, the real memory) is said in
docs/gpu.md; benchmarks/device_check.sh runs what the GPU machine can.

vLLM with data-parallel ranks: test_llm_arguments_per_rank,
    test_each_ranks_engine_is_built_on_its_gpu_then_all_wait, test_preflight_refuses_tensor_parallel_engines.
The engine and generation on a GPU: test_sleep_mode_*, test_hf_kv_budget_counts_what_the_torch_cache_holds,
    test_shared_prompt_cache_keeps_the_last_logits_only, test_hf_and_vllm_stop_at_the_same_tokens,
    test_adapters_are_written_to_a_job_temp_dir_and_removed.
The trainer's side over a run: tests/test_gpu_trainer_rules.py.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch

from tests import fake_vllm
from tests.collective_checker import fake_gpus
from trainer.rl.distributed import Ranks

RUN = "voting-math-qwen3-0.6b-isolated-s0"  # two policies (generator, aggregator)


# -- one engine per rank, on its GPU -------------------------------------------------------------

LORA = {"enable_lora": True, "max_loras": 2, "max_lora_rank": 64}


def test_llm_arguments_per_rank() -> None:
    """Each rank's `LLM(...)`: external_launcher when several ranks (vLLM's default executor otherwise,
    which takes local rank 0 and cuda:0), the environment it reads (LOCAL_RANK = the GPU the rank sees),
    a seed per rank, the pinned revision."""
    from trainer.rl.distributed import device_index
    from trainer.rl.vllm_engine import engine_arguments, engine_environment

    for world, gpus in ((1, 1), (2, 2), (4, 4), (4, 1), (2, 1)):
        seeds = []
        for rank in range(world):
            ranks = Ranks(rank, world, rank)
            with fake_gpus(gpus):
                gpu = device_index(ranks)
            args = engine_arguments(
                model="Qwen/Qwen3-1.7B",
                revision="0123abcd",
                dtype=torch.bfloat16,
                seed=7,
                ranks=ranks,
                training={"vllm": {"gpu_memory_utilization": 0.25}},
                max_model_len=6144,
                lora=LORA,
                cuda=True,
            )
            env = engine_environment(ranks, gpu)
            assert args["revision"] == args["tokenizer_revision"] == "0123abcd"
            assert args["model"] == args["tokenizer"] == "Qwen/Qwen3-1.7B"
            assert args["tensor_parallel_size"] == 1 and args["gpu_memory_utilization"] == 0.25
            assert args["max_model_len"] == 6144 and args["logprobs_mode"] == "processed_logprobs"
            assert {k: args[k] for k in LORA} == LORA
            assert "enable_chunked_prefill" not in args  # CPU only
            if world == 1:
                assert "distributed_executor_backend" not in args and env == {} and args["seed"] == 7
            else:
                assert args["distributed_executor_backend"] == "external_launcher"
                assert env == {
                    "RANK": str(rank),
                    "LOCAL_RANK": str(rank % gpus),
                    "WORLD_SIZE": str(world),
                    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
                }
            seeds.append(args["seed"])
        assert seeds[0] == 7 and len(set(seeds)) == world  # rank 0 keeps the run's seed; each rank its own
    cpu = engine_arguments(
        model="m",
        revision=None,
        dtype=torch.float32,
        seed=0,
        ranks=Ranks.single(),
        training={},
        max_model_len=512,
        lora={},
        cuda=False,
    )
    assert cpu["enable_chunked_prefill"] is False and cpu["revision"] is None


@pytest.fixture(scope="module")
def tiny():
    """A small random Qwen3 (small vocabulary, the Qwen special tokens) and its tokenizer."""
    from tests.local_qwen3 import small_vocab_tokenizer
    from trainer.models.base_model import build_tiny_model

    tok = small_vocab_tokenizer()
    arch = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    }
    return tok, lambda: build_tiny_model(
        arch, 0, vocab_size=len(tok), eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    )


def policy_set(tiny, routing=None):
    from trainer.rl.policies import PolicySet
    from trainer.settings import TrainingSettings, from_dict

    training = from_dict(
        TrainingSettings,
        {
            "finetune": "lora",
            "lora": {"r": 4, "lora_alpha": 8},
            "max_steps": 1,
            "learning_rate": 1e-3,
            "lr_scheduler_type": "constant",
        },
        "training",
    )
    return PolicySet(tiny[1](), routing or {"generator": "generator", "aggregator": "aggregator"}, training)


def test_each_ranks_engine_is_built_on_its_gpu_then_all_wait(tiny, monkeypatch, tmp_path) -> None:
    """Rank 1 of 2 in a task that sees one GPU: its engine is built under external_launcher with RANK 1,
    LOCAL_RANK 0 and WORLD_SIZE 2 in the environment, its own seed, and every rank waits after the engines."""
    from trainer.rl.vllm_engine import VLLMEngine

    llm = fake_vllm.install(monkeypatch)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    events: list[str] = []
    monkeypatch.setattr(Ranks, "barrier", lambda self: events.append(f"barrier after {len(llm.instances)} engine"))
    with fake_gpus(1):
        VLLMEngine(policy_set(tiny), tiny[0], {"lora": {"r": 4}}, 256, seed=5, ranks=Ranks(1, 2, 1), revision="abc")
    (engine,) = llm.instances
    assert engine.env == {"RANK": "1", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    assert engine.kwargs["distributed_executor_backend"] == "external_launcher"
    assert engine.kwargs["seed"] != 5 and engine.kwargs["revision"] == "abc"
    assert events == ["barrier after 1 engine"]


def test_preflight_refuses_tensor_parallel_engines(monkeypatch) -> None:
    from tests.test_backend_preflight import run_config
    from trainer.contract.config import ConfigError
    from trainer.rl import preflight

    monkeypatch.setattr(preflight, "vllm_import_error", lambda: None)
    rc = run_config({"generation_backend": "vllm", "vllm": {"tensor_parallel_size": 2}}, {"gpus": 2})
    with pytest.raises(ConfigError, match=r"training\.vllm\.tensor_parallel_size: 2 is not supported yet"):
        preflight.check_run(rc)
    assert preflight.run_problems(run_config({"generation_backend": "vllm"}, {"gpus": 2})) == []


# -- the engine and generation on a GPU ------------------------------------------------------------


def test_sleep_mode_sleeps_through_the_update_and_wakes_before_sync_and_generation(tiny, monkeypatch, tmp_path):
    """enable_sleep_mode, as TRL's colocate mode: the engine sleeps (level 1: its weights offloaded, which
    keeps the base weights that adapters-only syncs never reload) after the rollouts, and wakes before the
    sync and before any generation; without it, neither is called."""
    from trainer.rl.vllm_engine import VLLMGenerator

    llm = fake_vllm.install(monkeypatch)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    for sleep_mode in (True, False):
        llm.instances = []
        gen = VLLMGenerator(
            policy_set(tiny),
            tiny[0],
            max_new_tokens=4,
            temperature=1.0,
            seed=0,
            training={"lora": {"r": 4}, "vllm": {"enable_sleep_mode": sleep_mode}},
        )
        (engine,) = llm.instances
        engine.events.clear()
        gen.generate_roles(["generator"], ["Calculate 1 + 2."])
        gen.before_update()  # the trainer: after the rollouts, before the optimizer steps
        gen.engine.sync(1)  # after_update's sync (then verify_sync, which generates)
        gen.generate_roles(["aggregator"], ["Calculate 1 + 2."])
        names = [e.split()[0] for e in engine.events]
        if sleep_mode:
            assert names == [
                "generate",
                "sleep",
                "wake_up",
                "remove_lora",
                "remove_lora",
                "reset_prefix_cache",
                "generate",
            ], engine.events
            assert "sleep 1" in engine.events
        else:
            assert "sleep" not in names and "wake_up" not in names
        gen.close()


def test_hf_kv_budget_counts_what_the_torch_cache_holds(monkeypatch) -> None:
    """After the update PyTorch's caching allocator keeps its blocks reserved: the driver counts them as used,
    yet `generate` reuses them. The budget is half of free + reserved - allocated."""
    from trainer.rl import rollout

    gib = 2**30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (10 * gib, 80 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 30 * gib)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 6 * gib)
    assert rollout.generation_budget_bytes(None, "cuda:0") == int(0.5 * (10 + 30 - 6) * gib)
    assert rollout.generation_budget_bytes(1.5, "cuda:0") == int(1.5 * gib)  # a configured budget wins


def test_shared_prompt_cache_keeps_the_last_logits_only(tiny) -> None:
    """The shared prefill wants the cache: logits of the last position only (not prompt x vocabulary)."""
    from trainer.rl.rollout import shared_prompt_cache

    policies = policy_set(tiny, {"generator": "shared"})
    model = policies.model("shared")
    shapes = []
    hook = model.get_base_model().register_forward_hook(lambda mod, args, out: shapes.append(tuple(out.logits.shape)))
    try:
        ids = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 8, 9], [4, 6, 7, 8, 9]])
        cache = shared_prompt_cache(model, ids, torch.ones_like(ids))
    finally:
        hook.remove()
    assert cache is not None and cache.get_seq_length() == 4
    assert shapes == [(2, 1, len(tiny[0]))]


def test_hf_and_vllm_stop_at_the_same_tokens(tiny, monkeypatch, tmp_path) -> None:
    """Both backends stop at chat.stop_token_ids: the tokenizer's eos (<|im_end|>), <|endoftext|> and the
    generation config's eos ids. A model that says <|endoftext|> first ends its completion there under HF
    (not only at <|im_end|>), and vLLM is given the same ids."""
    from trainer.rl.rollout import HFGenerator

    tok = tiny[0]
    vocab = tok.get_vocab()
    im_end, eot = vocab["<|im_end|>"], vocab["<|endoftext|>"]
    assert tok.eos_token_id == im_end
    policies = policy_set(tiny, {"generator": "shared"})
    model = policies.model("shared")
    lm_head = model.get_base_model().lm_head

    def says_endoftext(mod, args, out):
        out = out.clone()
        out[..., eot] += 1e4
        return out

    hook = lm_head.register_forward_hook(says_endoftext)
    try:
        (c,) = HFGenerator(policies, tok, max_new_tokens=6, temperature=0.0)("generator", ["Calculate 1 + 2."])
    finally:
        hook.remove()
    assert c.completion_ids == [eot]
    from trainer.models.chat import stop_token_ids
    from trainer.rl.vllm_engine import VLLMGenerator

    assert set(stop_token_ids(tok, model)) == {im_end, eot}
    fake_vllm.install(monkeypatch)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    gen = VLLMGenerator(policies, tok, max_new_tokens=6, temperature=1.0, seed=0, training={"lora": {"r": 4}})
    assert all(sorted(p.stop_token_ids) == sorted(stop_token_ids(tok, model)) for p in gen.sampling(3, 0))
    gen.close()


def test_adapters_are_written_to_a_job_temp_dir_and_removed(tiny, monkeypatch, tmp_path) -> None:
    """The engine's adapters go under $TMPDIR (job-local scratch on SLURM sites), not /dev/shm (64 MB in
    containers), and `close` removes them."""
    from trainer.rl.vllm_engine import VLLMGenerator

    fake_vllm.install(monkeypatch)
    job_tmp = tmp_path / "job-tmp"
    job_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(job_tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    gen = VLLMGenerator(
        policy_set(tiny), tiny[0], max_new_tokens=4, temperature=1.0, seed=0, training={"lora": {"r": 4}}
    )
    adapter_dir = Path(gen.engine.adapter_dir)
    assert adapter_dir.parent == job_tmp and not str(adapter_dir).startswith("/dev/shm")
    assert len(list(adapter_dir.iterdir())) == 2  # the two policies' adapters of sync 0
    gen.engine.sync(1)
    assert len(list(adapter_dir.iterdir())) == 2  # the old ones removed
    gen.close()
    assert not adapter_dir.exists() and list(job_tmp.iterdir()) == []
