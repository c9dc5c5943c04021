"""One update pass (forward + backward of the per-token log-probs and entropies, fp32), three ways,
alternating in the same process, best of a few runs each:

- ``rows``: one ``[prompt | completion]`` row per sample, prompts left-padded and completions
  right-padded to the batch's longest;
- ``slots``: shared-prefix groups (grpoflow.rl.shared_prefix, Prefix Grouper, arXiv 2506.05433)
  with every completion slot as wide as the longest completion, as they were packed before
  2026-12-03 (the same layout, run here by marking the padding as tokens: the same cost);
- ``packed``: shared-prefix groups with each completion only as long as it is (today's default).

Each reports the pad share of its computed token positions (``padding_share``).

Cases: the tiny default (Qwen2, 128 wide, 4 layers, 8 prompts x G 8, prompts of 20-36 tokens,
completions of up to 24) and a small Llama of SmolLM2-135M's width, heads and vocabulary with
fewer layers (8 prompts x G 8, prompts of 96 tokens, completions of up to 48), with LoRA.
"""

from __future__ import annotations

import time

import torch

REPEATS = 3


def _batch(prompts: int, g: int, p_lens: list[int], c_len: int, vocab: int, seed: int = 0):
    """Left-padded prompts, G right-padded completions of lengths between c_len / 2 and c_len."""
    gen = torch.Generator().manual_seed(seed)
    p = max(p_lens)
    ids, attn = [], []
    for i in range(prompts):
        pl = p_lens[i % len(p_lens)]
        prompt = torch.randint(2, vocab, (pl,), generator=gen)
        for _ in range(g):
            cl = int(torch.randint(c_len // 2, c_len + 1, (1,), generator=gen))
            comp = torch.randint(2, vocab, (cl,), generator=gen)
            pad_l, pad_r = torch.ones(p - pl, dtype=torch.long), torch.ones(c_len - cl, dtype=torch.long)
            ids.append(torch.cat([pad_l, prompt, comp, pad_r]))
            attn.append(torch.cat([torch.zeros(p - pl), torch.ones(pl + cl), torch.zeros(c_len - cl)]).long())
    return torch.stack(ids), torch.stack(attn), p


WAYS = ("rows", "slots", "packed")


def _inputs(attn: torch.Tensor, start: int, way: str) -> tuple[torch.Tensor, bool]:
    """The attention mask fed and whether groups share their prompt, for ``way`` of :data:`WAYS`."""
    if way == "slots":  # padding counted as tokens: every slot the longest completion's width
        full = attn.clone()
        full[:, start:] = 1
        return full, True
    return attn, way == "packed"


def _pass(model, ids, attn, start: int, way: str) -> float:
    """Seconds of one forward + backward; the loss counts the real tokens only."""
    from grpoflow.rl.logprobs import completion_logprobs

    fed, shared = _inputs(attn, start, way)
    model.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    logp, ent = completion_logprobs(model, ids, fed, start, with_entropy=True, shared_prefix=shared)
    mask = attn[:, start:].float()
    ((logp * mask).sum() / mask.sum()).backward()
    return time.perf_counter() - t0


def _pad_share(model, ids, attn, start: int, way: str) -> tuple[int, float]:
    """``(computed token positions, share of them that hold no token)`` of ``way``."""
    from grpoflow.rl import shared_prefix as sp

    fed, shared = _inputs(attn, start, way)
    computed, _ = sp.padding_share(fed, sp.packed_for(model, ids, fed, start) if shared else None)
    packed = sp.packed_for(model, ids, attn, start)
    real = packed.tokens if shared and packed is not None else int(attn.sum())
    return computed, round(1 - real / computed, 3)


def _compare(model, ids, attn, start: int) -> dict:
    """Best-of-``REPEATS`` seconds of each way, alternating (after one warm-up of each), each
    way's computed tokens and pad share, and the ratios to ``rows`` and to ``slots``."""
    times: dict[str, list[float]] = {way: [] for way in WAYS}
    for way in WAYS:
        _pass(model, ids, attn, start, way)
    for _ in range(REPEATS):
        for way in WAYS:
            times[way].append(_pass(model, ids, attn, start, way))
    best = {way: min(t) for way, t in times.items()}
    out: dict = {f"{way}_s": round(best[way], 3) for way in WAYS}
    for way in WAYS:
        out[f"tokens_{way}"], out[f"pad_share_{way}"] = _pad_share(model, ids, attn, start, way)
    out["slots_over_rows"] = round(best["slots"] / best["rows"], 3)
    out["packed_over_rows"] = round(best["packed"] / best["rows"], 3)
    out["packed_over_slots"] = round(best["packed"] / best["slots"], 3)
    return out


def _tiny() -> dict:
    from grpoflow.config import ModelConfig
    from grpoflow.models.modeling import build_tiny_model

    tok = type("Tok", (), {"__len__": lambda self: 384, "eos_token_id": 0, "pad_token_id": 1})()
    model = build_tiny_model(ModelConfig(), tok, seed=0).train()
    ids, attn, start = _batch(8, 8, [20, 26, 31, 36], 24, 384)
    return {"setup": "tiny default, 8 x G 8, prompt 20-36, completion <= 24", **_compare(model, ids, attn, start)}


def _llama(layers: int = 4) -> dict:
    from benchmarks.models import smollm2_width_lora

    model = smollm2_width_lora(layers)
    ids, attn, start = _batch(8, 8, [96], 48, 49152)
    setup = f"SmolLM2-width Llama, {layers} layers, LoRA, 8 x G 8, prompt 96, completion <= 48"
    return {"setup": setup, **_compare(model, ids, attn, start)}


def run() -> dict:
    """Both cases' seconds per pass and the shared-over-rows ratio."""
    return {"tiny": _tiny(), "llama": _llama()}
