"""Rollouts with vLLM, colocated with the trainer (in-process), with weight sync after each update.

The sync path works on CPU and GPU alike: the worker's own ``reload_weights`` (reached with
``LLM.collective_rpc``) restores the layers, loads all tensors in one call and redoes the
platform's post-load processing. On CPU vLLM repacks each linear layer's weight for its GEMM
kernels; a tied ``lm_head`` keeps its own packed copy, which is repacked here too (without that,
log-probs after a sync are off by several nats). TRL's colocate path calls the model's
``load_weights`` instead, which fails on CPU (``'Parameter' object has no attribute
'weight_loader'``) because the repacked parameters have no loader.

vLLM in-process sets the global torch seed and pins torch's thread count; both are accepted
here as the cost of a 2-3 s engine start instead of about 20 s.
"""

from __future__ import annotations

import io
import logging
import os
import time

import torch

from grpoflow.rollout import Progress, Rollouts, Sampling

ROTARY_WARNING = "RotaryEmbedding: Failed to load weights"
RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"


class RotaryCacheKept(logging.Filter):
    """vLLM's rotary-embedding cache is computed from the model's config, not trained: a weight sync has no
    tensor for it, and at each sync vLLM says ``RotaryEmbedding: Failed to load weights`` (28 times in a
    SmolLM2 run) and keeps its own cache, which is the right one. Said once, in words, instead: the log-probs
    after a sync match the trainer's (tests/e2e/test_vllm_rollout.py)."""

    said = False

    def filter(self, record: logging.LogRecord) -> bool:
        """Let every record through but the rotary warning, which is said once in words instead."""
        if record.getMessage() != ROTARY_WARNING:
            return True
        if not RotaryCacheKept.said:
            RotaryCacheKept.said = True
            print("vLLM keeps its own rotary-embedding cache at each weight sync (it is computed, not trained)")
        return False


def _quiet_rotary_warning() -> None:
    """Install :class:`RotaryCacheKept` once on vLLM's reload logger."""
    reload_logger = logging.getLogger(RELOAD_LOGGER)
    if not any(isinstance(f, RotaryCacheKept) for f in reload_logger.filters):
        reload_logger.addFilter(RotaryCacheKept())


def _reload(worker, state: dict[str, torch.Tensor]) -> bool:
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm
    from vllm.platforms import current_platform

    worker.reload_weights(weights_iterator=iter(state.items()), is_checkpoint_format=True)
    model = worker.get_model() if hasattr(worker, "get_model") else worker.model_runner.model
    if current_platform.is_cpu() and getattr(model.config, "tie_word_embeddings", False):
        dispatch_cpu_unquantized_gemm(model.lm_head, remove_weight=False)
    return True


def _progress_bar(report: Progress):
    """A progress bar for ``LLM.generate`` that draws nothing and passes on each finished request's
    samples: vLLM's offline loop calls ``update(len(outputs))`` on its bar of requests as one finishes.
    vLLM also wraps the prompts it renders in a bar of the same class, whose iteration calls ``update``
    with prompts rendered: that bar has an iterable, and is not heard. (Not ``disable=True``: vLLM
    divides by the bar's elapsed time, which a disabled bar leaves at 0.)"""
    from tqdm import tqdm

    class Reporter(tqdm):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **{**kwargs, "file": io.StringIO()})

        def update(self, n: float | None = 1) -> bool | None:
            if self.iterable is None:
                report(int(n or 0))
            return super().update(n)

    return Reporter


class VLLMRolloutEngine:
    """Rollouts with an in-process vLLM engine, kept in sync with the trainer's weights.

    Each prompt is one request with ``n`` samples, and prefix caching lets the samples reuse the
    prompt's KV blocks; ``prefix_caching=False`` prefills each sample's prompt (kept to compare)."""

    def __init__(
        self,
        model_path: str,
        tokenizer,
        *,
        seed: int,
        max_model_len: int,
        gpu_memory_utilization: float = 0.3,
        stop_ids: list[int] | None = None,
        max_batched_tokens: int = 65536,
        prefix_caching: bool = True,
    ):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # colocated: same process
        _quiet_rotary_warning()
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache on CPU
        from vllm import LLM

        from grpoflow.models.device import compute_device

        gpu = compute_device().type == "cuda"  # vLLM samples where the trainer computes
        kwargs: dict = {"gpu_memory_utilization": gpu_memory_utilization} if gpu else {}
        if prefix_caching and not gpu:
            # Only full KV blocks are shared, and vLLM-CPU's default block holds 128 tokens: a
            # prompt shorter than that would share nothing with its G - 1 siblings. 32 is the
            # smallest the CPU backend prefers (a multiple of 32).
            kwargs["block_size"] = 32
        self.progress: Progress | None = None
        self.llm = LLM(
            model=model_path,
            dtype="auto" if gpu else "float32",
            seed=seed,
            max_model_len=max_model_len,
            enforce_eager=True,
            # A prefill split into chunks rewinds the per-request seeded generator, which only CUDA
            # generators support ("CPU Generator does not use offset"): give one step room for a
            # whole batch of prompts x G instead of vLLM's default 4096 tokens.
            max_num_batched_tokens=max(max_batched_tokens, max_model_len),
            # The n = G samples of a request share its prompt's KV blocks (vLLM's default on most
            # platforms; said here so that a changed default cannot silently drop it).
            enable_prefix_caching=prefix_caching,
            **kwargs,
        )
        self.tokenizer = tokenizer
        self.stop_ids = list(stop_ids) if stop_ids else [tokenizer.eos_token_id]
        self.syncs = 0

    def sync_weights(self, model: torch.nn.Module) -> None:
        # All tensors in one call: one call per tensor gave NaN or wrong log-probs on CPU.
        """Load ``model``'s weights into the engine (all in one call) and reset its prefix cache.
        Under ZeRO-3 they are gathered one module at a time into host memory (every rank syncs its
        own engine at once: the gathers are collectives)."""
        from grpoflow.models.device import compute_device
        from grpoflow.models.full_weights import full_state_dict
        from grpoflow.models.lora import is_zero3

        device = compute_device()
        state = full_state_dict(model, "cpu" if device.type != "cuda" or is_zero3(model) else device)
        self.llm.collective_rpc(_reload, args=(state,))
        self.llm.reset_prefix_cache()
        self.syncs += 1

    def close(self) -> None:
        """Shut the in-process engine core down now. It tears down vLLM's process groups and then
        torch's default group; left to the interpreter's exit, it would run after the trainer had
        destroyed those groups and fail on each rank ("Invalid process group specified")."""
        self.llm.llm_engine.engine_core.shutdown()  # idempotent: a second call finds no finalizer

    def generate(self, prompts: list[str], n: int, sampling: Sampling, seed: int) -> Rollouts:
        """``n`` samples per prompt from vLLM, as left/right-padded tensors like the HF engine's."""
        from vllm import SamplingParams

        start = time.perf_counter()
        tok = self.tokenizer
        prompt_ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
        params = SamplingParams(
            n=n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_new_tokens,
            seed=seed,
            stop_token_ids=self.stop_ids,
            detokenize=False,
            logprobs=0,
        )
        bar = _progress_bar(self.progress) if self.progress is not None else False
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], params, use_tqdm=bar)
        width_p, width_c = max(map(len, prompt_ids)), sampling.max_new_tokens
        rows = [
            (ids, list(c.token_ids), c.finish_reason, c.logprobs)
            for ids, out in zip(prompt_ids, outputs)
            for c in out.outputs
        ]
        pad = tok.pad_token_id
        p_ids = torch.full((len(rows), width_p), pad)
        p_mask = torch.zeros((len(rows), width_p), dtype=torch.long)
        c_ids = torch.full((len(rows), width_c), pad)
        c_mask = torch.zeros((len(rows), width_c), dtype=torch.long)
        truncated = torch.zeros(len(rows), dtype=torch.bool)
        sampler_lp = torch.zeros((len(rows), width_c))
        for i, (ids, comp, reason, lps) in enumerate(rows):
            p_ids[i, width_p - len(ids) :] = torch.tensor(ids)
            p_mask[i, width_p - len(ids) :] = 1
            c_ids[i, : len(comp)] = torch.tensor(comp, dtype=torch.long)
            c_mask[i, : len(comp)] = 1
            truncated[i] = reason == "length"
            if lps:
                sampler_lp[i, : len(comp)] = torch.tensor([lp[t].logprob for lp, t in zip(lps, comp)])
        texts = tok.batch_decode(c_ids.masked_fill(c_mask == 0, pad), skip_special_tokens=True)
        return Rollouts(p_ids, p_mask, c_ids, c_mask, texts, truncated, time.perf_counter() - start, sampler_lp)
