"""Rollout engines: generate G completions per prompt from the current policy.

Two implementations behind one interface: ``transformers`` generation (:mod:`.hf`) and vLLM
(:mod:`.vllm_engine`), chosen by ``rl.rollout_engine``. After every optimizer step the trainer
calls :meth:`RolloutEngine.sync_weights` so that the next rollouts come from the updated policy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch


@dataclass(frozen=True)
class Sampling:
    """How to sample: temperature (0: greedy), top-p, and the completion cap."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    logprobs: bool = False  # also report each sampled token's log-prob under the sampler (untempered)


@dataclass
class Rollouts:
    """``len(prompts) * n`` completions, ordered group by group (prompt 0's n, then prompt 1's...)."""

    prompt_ids: torch.Tensor  # (N, P) left-padded
    prompt_mask: torch.Tensor  # (N, P)
    completion_ids: torch.Tensor  # (N, C) right-padded with pad_token_id
    completion_mask: torch.Tensor  # (N, C): 1 up to and including EOS
    texts: list[str]  # decoded completions, without special tokens
    truncated: torch.Tensor  # (N,) bool: hit max_new_tokens without EOS
    seconds: float = 0.0
    sampler_logprobs: torch.Tensor | None = None  # (N, C) log-probs the engine sampled with, if it reports them

    @property
    def num_completion_tokens(self) -> int:
        """Completion tokens generated, EOS included."""
        return int(self.completion_mask.sum())

    def to(self, device: torch.device | str) -> Rollouts:
        """The same rollouts with every tensor on ``device`` (vLLM hands them over on the CPU)."""
        return self._map(lambda t: t.to(device), self.texts)

    def select(self, rows: list[int]) -> Rollouts:
        """The completions at ``rows`` (indices into the N), in that order."""
        idx = torch.tensor(rows, dtype=torch.long, device=self.completion_ids.device)
        return self._map(lambda t: t[idx], [self.texts[i] for i in rows])

    def _map(self, fn: Callable[[torch.Tensor], torch.Tensor], texts: list[str]) -> Rollouts:
        """``fn`` of every tensor (the sampler's log-probs where there are some), with ``texts``."""
        return Rollouts(
            fn(self.prompt_ids),
            fn(self.prompt_mask),
            fn(self.completion_ids),
            fn(self.completion_mask),
            texts,
            fn(self.truncated),
            self.seconds,
            None if self.sampler_logprobs is None else fn(self.sampler_logprobs),
        )


def concat_rollouts(parts: list[Rollouts], pad_id: int) -> Rollouts:
    """One batch of several: prompts left-padded to the widest, completions right-padded (``pad_id``,
    mask 0), texts in order, seconds summed."""

    def pad(tensors: list[torch.Tensor], left: bool, value: float) -> torch.Tensor:
        width = max(t.shape[1] for t in tensors)
        out = []
        for t in tensors:
            fill = t.new_full((t.shape[0], width - t.shape[1]), value)
            out.append(torch.cat([fill, t] if left else [t, fill], dim=1))
        return torch.cat(out)

    logprobs = [p.sampler_logprobs for p in parts]
    return Rollouts(
        pad([p.prompt_ids for p in parts], True, pad_id),
        pad([p.prompt_mask for p in parts], True, 0),
        pad([p.completion_ids for p in parts], False, pad_id),
        pad([p.completion_mask for p in parts], False, 0),
        [text for p in parts for text in p.texts],
        torch.cat([p.truncated for p in parts]),
        sum(p.seconds for p in parts),
        None if any(lp is None for lp in logprobs) else pad(logprobs, False, 0.0),
    )


# Told how many samples have just finished, as they finish (evaluate's heartbeat: one call may take minutes).
Progress = Callable[[int], None]


class RolloutEngine(Protocol):
    """What a rollout engine offers the trainer; ``progress``, when set, hears of finished samples."""

    progress: Progress | None

    def generate(self, prompts: list[str], n: int, sampling: Sampling, seed: int) -> Rollouts:
        """``n`` completions for each prompt, ordered group by group."""
        ...

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the next rollouts come from ``model``'s current weights."""
        ...

    def close(self) -> None:
        """Release what the engine holds (vLLM: its engine core and the process groups it made);
        a second call does nothing."""
        ...


def completion_mask(completion_ids: torch.Tensor, stop_ids: int | list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mask, truncated)``: 1 on tokens up to and including the first stop token (EOS or end of
    turn); truncated when a completion has none, i.e. it hit the length cap. Built from positions,
    never from ``ids != pad``: many tokenizers pad with their EOS."""
    stops = torch.tensor([stop_ids] if isinstance(stop_ids, int) else list(stop_ids), device=completion_ids.device)
    is_eos = torch.isin(completion_ids, stops)
    has_eos = is_eos.any(dim=1)
    first = torch.where(
        has_eos, is_eos.float().argmax(dim=1), torch.full_like(has_eos, completion_ids.shape[1], dtype=torch.long)
    )
    positions = torch.arange(completion_ids.shape[1], device=completion_ids.device).unsqueeze(0)
    return (positions <= first.unsqueeze(1)).long(), ~has_eos


def build_rollout(
    kind: str,
    model: torch.nn.Module,
    tokenizer,
    model_path: str | Path,
    *,
    seed: int,
    max_model_len: int,
    stop_ids: list[int] | None = None,
    decode: str = "auto",
) -> RolloutEngine:
    """The ``rl.rollout_engine`` named ``kind``: vLLM loads ``model_path`` itself (and is kept in
    sync with ``model`` through :meth:`RolloutEngine.sync_weights`); transformers samples ``model``,
    with the decode loop ``rl.decode`` names (``decode``)."""
    if kind == "vllm":
        from grpoflow.rollout.vllm_engine import VLLMRolloutEngine

        return VLLMRolloutEngine(str(model_path), tokenizer, seed=seed, max_model_len=max_model_len, stop_ids=stop_ids)
    from grpoflow.rollout.hf import HFRolloutEngine

    static = {"auto": None, "static": True, "dynamic": False}[decode]
    return HFRolloutEngine(model, tokenizer, batch_size=128, stop_ids=stop_ids, static=static)
