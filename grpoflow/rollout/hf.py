"""Rollouts with ``transformers`` ``generate``: batched, left-padded, KV cache, on the policy itself.

Generating from the live training module means there is nothing to sync: the weights are shared.
With LoRA, each adapted layer samples with its merged weight ``W + scale * B @ A``
(:func:`grpoflow.models.lora.merged_for_sampling`): one matmul per layer and token instead of three.

The ``n`` samples of a prompt share its prefill: each batch's distinct prompts run through the
model once, the resulting KV cache is expanded to one row per sample along the batch axis, and
:mod:`grpoflow.rollout.decode` samples from it. Attention is causal, so the cached keys and values
are the ones each sample would have computed itself; greedy decoding gives ``generate``'s tokens.
"""

from __future__ import annotations

import logging
import time

import torch

from grpoflow.models.device import model_device
from grpoflow.models.lora import is_zero3, merged_for_sampling
from grpoflow.rollout import Progress, Rollouts, Sampling, completion_mask, static_decode
from grpoflow.rollout.decode import decode

log = logging.getLogger(__name__)


class HFRolloutEngine:
    """Rollouts with transformers ``generate`` on the training model itself (no copy, no sync).

    ``share_prefill=False`` prefills every sample's prompt on its own (the path before shared
    prefills; kept to compare them). ``static``: decode over a static KV cache
    (:mod:`grpoflow.rollout.static_decode`), each step a CUDA graph's replay on CUDA; None (the
    default, ``rl.decode: auto``) chooses it on any accelerator, where a step is launch-bound, unless
    the model is partitioned by ZeRO-3 (its weights are gathered by hooks a graph cannot replay);
    the device audit's stand-in takes it too, eagerly. ``True`` on a CPU runs the same static step
    eagerly; ``False`` always steps over the growing cache. A static step that fails to build,
    capture or replay hands the rest of the run to the growing cache, with one warning naming why."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer,
        batch_size: int = 64,
        stop_ids: list[int] | None = None,
        *,
        share_prefill: bool = True,
        static: bool | None = None,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.stop_ids = list(stop_ids) if stop_ids else [tokenizer.eos_token_id]
        self.share_prefill = share_prefill
        self.static = static
        self._said = False
        self.progress: Progress | None = None

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Generate from ``model`` from now on: the trained module's own tensors, nothing to copy."""
        self.model = model  # same tensors: nothing to copy

    def close(self) -> None:
        """Nothing to release: the engine samples the trained module itself."""

    @torch.no_grad()
    def generate(self, prompts: list[str], n: int, sampling: Sampling, seed: int) -> Rollouts:
        """``n`` samples per prompt, in batches of at most ``batch_size`` samples, seeded."""
        start = time.perf_counter()
        tok = self.tokenizer
        device = model_device(self.model)  # the policy's own: every tensor of the rollout lives there
        enc = tok(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False).to(device)
        rows = torch.arange(len(prompts), device=device).repeat_interleave(n)  # sample -> its prompt, group by group
        torch.manual_seed(seed)
        was_training = self.model.training
        self.model.eval()
        outs, logprobs = [], []
        try:
            with merged_for_sampling(self.model):
                for lo in range(0, len(rows), self.batch_size):
                    gen, step_lp = self._batch(
                        enc["input_ids"], enc["attention_mask"], rows[lo : lo + self.batch_size], sampling
                    )
                    pad = sampling.max_new_tokens - gen.shape[1]
                    outs.append(torch.nn.functional.pad(gen, (0, pad), value=tok.pad_token_id))
                    if step_lp is not None:
                        logprobs.append(torch.nn.functional.pad(step_lp, (0, pad)))
                    if self.progress is not None:
                        self.progress(len(gen))
        finally:
            self.model.train(was_training)
        completion_ids = torch.cat(outs)
        cmask, truncated = completion_mask(completion_ids, self.stop_ids)
        completion_ids = torch.where(cmask.bool(), completion_ids, torch.full_like(completion_ids, tok.pad_token_id))
        texts = tok.batch_decode(completion_ids, skip_special_tokens=True)
        return Rollouts(
            enc["input_ids"][rows],
            enc["attention_mask"][rows],
            completion_ids,
            cmask,
            texts,
            truncated,
            time.perf_counter() - start,
            torch.cat(logprobs) * cmask if sampling.logprobs else None,
        )

    def _batch(
        self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, rows: torch.Tensor, sampling: Sampling
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The samples whose prompts are ``rows``: ``(generated ids, untempered log-probs of them or
        None)``, from :func:`grpoflow.rollout.decode.decode` (each prompt prefilled once), or from
        ``generate`` where the model's KV cache cannot be expanded or sharing is off."""
        if self.share_prefill:
            static, graph = self._static()
            try:
                return decode(
                    self.model,
                    prompt_ids,
                    prompt_mask,
                    rows,
                    sampling,
                    self.stop_ids,
                    self.tokenizer.pad_token_id,
                    static=static,
                    graph=graph,
                )
            except static_decode.StaticDecodeFailed as exc:
                if not static_decode.FALL_BACK:
                    raise exc.__cause__ or exc from None
                log.warning(
                    "rollout: the static decode failed (%s); this run decodes over the growing KV cache from now on",
                    exc,
                )
                self.static = False
                return self._batch(prompt_ids, prompt_mask, rows, sampling)
            except (AttributeError, NotImplementedError, TypeError) as exc:
                if static and isinstance(exc, NotImplementedError):
                    log.warning("rollout: decode steps over the growing KV cache (no static one here: %s)", exc)
                    self.static = False
                    return self._batch(prompt_ids, prompt_mask, rows, sampling)
                log.warning(
                    "rollout: each sample prefills its own prompt (the model's KV cache cannot be expanded: %s)", exc
                )
                self.share_prefill = False
        return self._generate(prompt_ids[rows], prompt_mask[rows], sampling)

    def _static(self) -> tuple[bool, bool]:
        """``(static cache, CUDA graph)`` for this model (see the class docstring)."""
        device = model_device(self.model).type
        cuda = device == "cuda"
        static = (device != "cpu" and not is_zero3(self.model)) if self.static is None else self.static
        if static and cuda and not self._said:
            log.info("rollout: static KV cache, each decode step a CUDA graph replay")
            self._said = True
        return static, static and cuda

    def _generate(
        self, ids: torch.Tensor, mask: torch.Tensor, sampling: Sampling
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """transformers ``generate`` over one row per sample, each prefilling its own prompt."""
        tok = self.tokenizer
        out = self.model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=sampling.temperature > 0,
            temperature=sampling.temperature if sampling.temperature > 0 else None,
            top_p=sampling.top_p if sampling.temperature > 0 else None,
            top_k=None,  # no top-k filter (transformers 5 reads 0 as "not set" and warns)
            max_new_tokens=sampling.max_new_tokens,
            pad_token_id=tok.pad_token_id,
            eos_token_id=self.stop_ids,
            output_logits=sampling.logprobs,
            return_dict_in_generate=True,
        )
        gen = out.sequences[:, ids.shape[1] :]
        if not sampling.logprobs:
            return gen, None
        # the raw (untempered) logits, as the trainer computes its log-probs
        step_lp = torch.stack(out.logits, dim=1).float().log_softmax(-1).gather(-1, gen.unsqueeze(-1)).squeeze(-1)
        return gen, step_lp
