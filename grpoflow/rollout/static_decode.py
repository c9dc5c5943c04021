"""The decode loop's step on a GPU: a static KV cache, and the step captured once as a CUDA graph.

On a GPU a 135M model's decode step is some hundreds of small kernels, each launched from Python;
at 128 rows the GPU waits on the launches, not on arithmetic (TRL's eager ``generate`` ran 3,600
tokens/s on an H200, whose bf16 peak would allow far more). A CUDA graph (NVIDIA's CUDA Graphs,
``torch.cuda.CUDAGraph``) records the step's kernels once and replays them with one launch. A graph
replays fixed addresses and shapes, so everything the step reads or writes lives in buffers made
before the capture:

- the KV cache is transformers' :class:`~transformers.StaticCache` of ``P + max_new_tokens``
  positions per row, its write position a device tensor the step advances itself; it starts as the
  shared prefill's cache (each distinct prompt prefilled once), copied to every sample's row;
- the step's token, position and attention mask are buffers each step overwrites: the mask is 4D
  (rows, 1, 1, P + T), True where a row's prompt has a real token and where a token was fed, which
  transformers hands to the attention unchanged (no mask building inside the graph).

The attention runs over all ``P + T`` positions, the unwritten ones masked: a softmax over the same
keys as the growing cache's, so the step's logits are the dynamic loop's (checked on CPU, where the
same static step runs eagerly: ``tests/unit/test_static_decode.py``; on CUDA against ``generate``:
``tests/gpu/test_decode_cuda.py``).
"""

from __future__ import annotations

import torch
from transformers import StaticCache
from transformers.cache_utils import StaticLayer

WARMUP_STEPS = 2  # eager steps on a side stream before the capture (cuBLAS workspaces, lazy inits)


# Whether a failed static step hands the run to the growing cache. The device audit (tests/device_audit.py)
# turns it off: there a failure of the static step is a device bug to report, not a path to leave.
FALL_BACK = True


class StaticDecodeFailed(RuntimeError):
    """The static step could not be built, captured or replayed; its cause is chained. The rollout
    engine then decodes over the growing cache for the rest of the run (:mod:`grpoflow.rollout.hf`)."""


def _failed(what: str, exc: Exception) -> StaticDecodeFailed:
    return StaticDecodeFailed(f"{what}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")


def static_cache(config, prefill, inverse: torch.Tensor, length: int) -> StaticCache:
    """A :class:`StaticCache` of ``length`` positions holding ``prefill``'s keys and values (one row per
    distinct prompt), row ``inverse[i]`` copied to row ``i``. NotImplementedError for models whose
    layers are not all plain static layers (sliding windows, hybrids)."""
    cache = StaticCache(config=config, max_cache_len=length)
    layers = getattr(prefill, "layers", None)
    if layers is None or len(layers) != len(cache.layers):
        raise NotImplementedError("the prefill's cache has no layer per static layer")
    for static, layer in zip(cache.layers, layers):
        if type(static) is not StaticLayer:
            raise NotImplementedError(f"{type(static).__name__}: only full-attention layers have a static step")
        keys, values = layer.keys[inverse], layer.values[inverse]
        static.lazy_initialization(keys, values)
        static.keys[:, :, : keys.shape[-2]].copy_(keys)
        static.values[:, :, : values.shape[-2]].copy_(values)
        static.cumulative_length.fill_(keys.shape[-2])
    return cache


def static_step(model, prefill, inverse: torch.Tensor, mask: torch.Tensor, max_new_tokens: int, graph: bool):
    """The decode loop's step over a :func:`static_cache` holding ``prefill``'s keys and values (row
    ``inverse[i]`` of the distinct prompts' ``mask`` for sample ``i``), a CUDA graph's replay when ``graph``."""
    try:
        cache = static_cache(model.config, prefill, inverse, mask.shape[1] + max_new_tokens)
    except (NotImplementedError, torch.OutOfMemoryError):  # no static step for this model; or memory: the caller's
        raise
    except Exception as exc:  # noqa: BLE001 - any other failure: the growing cache takes over
        raise _failed("static KV cache", exc) from exc
    return StaticStep(model, cache, mask[inverse], max_new_tokens, graph)


class StaticStep:
    """One decode step over a :func:`static_cache`: ``step(token, position) -> logits (rows, vocab)``.
    ``graph``: captured as a CUDA graph and replayed (CUDA only); else run eagerly (any device)."""

    def __init__(self, model, cache: StaticCache, prompt_mask: torch.Tensor, max_new_tokens: int, graph: bool):
        rows, prompt = prompt_mask.shape
        device = prompt_mask.device
        self.model, self.cache, self.start, self.fed = model, cache, prompt, 0
        self.mask = torch.zeros(rows, 1, 1, prompt + max_new_tokens, dtype=torch.bool, device=device)
        self.mask[:, 0, 0, :prompt] = prompt_mask.bool()
        self.token = torch.zeros(rows, 1, dtype=torch.long, device=device)
        self.position = torch.zeros(rows, 1, dtype=torch.long, device=device)
        self.logits: torch.Tensor | None = None
        self.graph = self._guarded("CUDA graph capture", self._capture) if graph else None

    @staticmethod
    def _guarded(what: str, run):
        """``run()``, its failure a :class:`StaticDecodeFailed` (out of memory stays itself: the
        caller's backoff answers it, not another decode path)."""
        try:
            return run()
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - a capture or replay CUDA refuses, whatever its type
            raise _failed(what, exc) from exc

    def _forward(self) -> torch.Tensor:
        out = self.model(
            input_ids=self.token,
            attention_mask=self.mask,
            position_ids=self.position,
            past_key_values=self.cache,
            use_cache=True,
        )
        return out.logits[:, -1]

    def _capture(self) -> torch.cuda.CUDAGraph:
        """Warm up on a side stream, put the cache's write positions back, capture one step."""
        lengths = [layer.cumulative_length.clone() for layer in self.cache.layers]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_STEPS):  # they write positions the real steps overwrite before reading
                self._forward()
        torch.cuda.current_stream().wait_stream(side)
        for layer, length in zip(self.cache.layers, lengths):
            layer.cumulative_length.copy_(length)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.logits = self._forward()
        return graph

    def __call__(self, token: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        """Feed ``token`` (rows,) at ``position`` (rows,); the next logits (a buffer the next step
        overwrites under a graph: read them before calling again)."""
        self.token.copy_(token.unsqueeze(1))
        self.position.copy_(position.unsqueeze(1))
        self.mask[:, 0, 0, self.start + self.fed] = True
        self.fed += 1
        if self.graph is None:
            return self._guarded("static decode step", self._forward)
        self._guarded("CUDA graph replay", self.graph.replay)
        assert self.logits is not None
        return self.logits
