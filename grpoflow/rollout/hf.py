"""Rollouts with ``transformers`` ``generate``: batched, left-padded, KV cache, on the policy itself.

Generating from the live training module means there is nothing to sync: the weights are shared.
"""

from __future__ import annotations

import time

import torch

from grpoflow.rollout import Rollouts, Sampling, completion_mask


class HFRolloutEngine:
    """Rollouts with transformers ``generate`` on the training model itself (no copy, no sync)."""

    def __init__(self, model: torch.nn.Module, tokenizer, batch_size: int = 64, stop_ids: list[int] | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.stop_ids = list(stop_ids) if stop_ids else [tokenizer.eos_token_id]

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Generate from ``model`` from now on: the trained module's own tensors, nothing to copy."""
        self.model = model  # same tensors: nothing to copy

    @torch.no_grad()
    def generate(self, prompts: list[str], n: int, sampling: Sampling, seed: int) -> Rollouts:
        """``n`` samples per prompt, in batches, seeded."""
        start = time.perf_counter()
        tok = self.tokenizer
        expanded = [p for p in prompts for _ in range(n)]
        enc = tok(expanded, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
        torch.manual_seed(seed)
        was_training = self.model.training
        self.model.eval()
        outs, logprobs = [], []
        for lo in range(0, len(expanded), self.batch_size):
            ids, mask = enc["input_ids"][lo : lo + self.batch_size], enc["attention_mask"][lo : lo + self.batch_size]
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
            pad = sampling.max_new_tokens - gen.shape[1]
            outs.append(torch.nn.functional.pad(gen, (0, pad), value=tok.pad_token_id))
            if sampling.logprobs:  # the raw (untempered) logits, as the trainer computes its log-probs
                step_lp = (
                    torch.stack(out.logits, dim=1).float().log_softmax(-1).gather(-1, gen.unsqueeze(-1)).squeeze(-1)
                )
                logprobs.append(torch.nn.functional.pad(step_lp, (0, pad)))
        self.model.train(was_training)
        completion_ids = torch.cat(outs)
        cmask, truncated = completion_mask(completion_ids, self.stop_ids)
        completion_ids = torch.where(cmask.bool(), completion_ids, torch.full_like(completion_ids, tok.pad_token_id))
        texts = tok.batch_decode(completion_ids, skip_special_tokens=True)
        return Rollouts(
            enc["input_ids"],
            enc["attention_mask"],
            completion_ids,
            cmask,
            texts,
            truncated,
            time.perf_counter() - start,
            torch.cat(logprobs) * cmask if sampling.logprobs else None,
        )
