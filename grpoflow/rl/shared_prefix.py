"""Shared-prefix groups: each group's prompt is encoded once per pass, not once per completion.

Prefix Grouper (Liu et al. 2025, arXiv 2506.05433): GRPO's G completions of a prompt share it, and
attention is causal, so the prompt's keys and values are the same for all G. We pack a group into
one sequence ``[prompt | completion_1 | ... | completion_g]``, each completion only as long as it is (its
padding is not fed in), with an attention mask under which
a prompt token sees the prompt causally and a completion token sees the prompt and its own
completion causally, never another completion. Position ids are each token's position in its own
``[prompt | completion]`` row, so every token's computation is the one of the unshared row; the
per-token outputs are the same (up to float summation order), and the prompt positions receive
the G completions' gradients summed, once.

A custom 4-D mask (not a key/value cache) keeps Hugging Face's gradient checkpointing and peft's
LoRA working unchanged. A completion's last token predicts nothing we keep, so it is not fed in,
and the prompt's last position predicts every completion's first token.

Groups are found from the inputs: consecutive rows whose prompt tokens and mask are equal. A
micro-batch that splits a group encodes its prompt once per micro-batch holding part of it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from itertools import accumulate

import torch

from grpoflow.models.attention import NAME as OWN_ATTENTION
from grpoflow.models.attention import SLOTS_KWARG

log = logging.getLogger(__name__)

ARCHITECTURES = frozenset({"qwen2", "llama"})  # verified equal to the unshared path in tests
_ATTENTION = frozenset({"sdpa", OWN_ATTENTION, "eager"})  # implementations that take an arbitrary 4-D mask
LOGGED_FALLBACKS: set[str] = set()  # the reasons logged so far: each is logged once per process


@dataclass
class Slots:
    """The packed sequences' completion slots as a batch of their own, for an attention that splits
    a packed pass in two (:mod:`grpoflow.models.attention`): each prompt attending to itself, and
    each completion to its prompt and itself, instead of every position to the whole packed row
    (about (P + G S)^2 / (P^2 + G S (P + S)) times the work: 4 to 5 at G = 8 and S ~ P)."""

    width: int  # W: the packed sequences' length (the attention applies the split to these only)
    prompt: int  # P: the prompt columns, 0..P-1 of every packed sequence
    group: torch.Tensor  # (R,) the packed sequence of each slot
    index: torch.Tensor  # (R, S) long: flat position (k * W + column) of each slot token, 0 past its end
    mask: torch.Tensor  # (R, 1, S, P + S) bool: a slot token sees its prompt's tokens and its slot causally
    out_index: torch.Tensor  # (K * P + real slot tokens,) flat positions the split attention writes
    real: torch.Tensor  # (R, S) bool: a slot position holding a fed token


@dataclass
class Packed:
    """One micro-batch as packed group sequences, and where each row's outputs are in them."""

    input_ids: torch.Tensor  # (K, L) one row per group
    mask: torch.Tensor  # (K, 1, L, L) bool: query i may attend to key j
    position_ids: torch.Tensor  # (K, L)
    keep_from: int  # P - 1: outputs from this column on are the ones kept
    rows: torch.Tensor  # (N, C) long: index into the kept outputs flattened to (K * (L - P + 1))
    tokens: int = 0  # positions holding a token the results need (each prompt once, each fed token)
    slots: Slots | None = None  # the completion slots for a split attention; None without completions


def hf_config(model) -> object | None:
    """The Hugging Face config under DeepSpeed, peft, reference and critic wrappers (None if none)."""
    seen = 0
    while model is not None and seen < 8:
        config = getattr(model, "config", None)
        if config is not None and hasattr(config, "model_type"):
            return config
        model = next((getattr(model, a) for a in ("module", "model", "trunk") if hasattr(model, a)), None)
        seen += 1
    return None


def unsupported(model) -> str | None:
    """Why ``model`` cannot take packed groups, or None when it can."""
    config = hf_config(model)
    if config is None:
        return "no Hugging Face config found"
    kind = getattr(config, "model_type", None)
    if kind not in ARCHITECTURES:
        return f"architecture {kind!r} is not verified (only {sorted(ARCHITECTURES)})"
    attention = getattr(config, "_attn_implementation", None) or "sdpa"
    if attention not in _ATTENTION:
        return f"attention implementation {attention!r} takes no custom 4-D mask"
    if getattr(config, "use_sliding_window", False) or any(
        t != "full_attention" for t in (getattr(config, "layer_types", None) or [])
    ):
        return "sliding-window layers"
    return None


def usable(model) -> bool:
    """Whether ``model`` takes packed groups; logs the reason once per reason when it does not."""
    reason = unsupported(model)
    if reason is not None and reason not in LOGGED_FALLBACKS:
        LOGGED_FALLBACKS.add(reason)
        log.warning("shared_prefix: falling back to one [prompt | completion] row per sample: %s", reason)
    return reason is None


def _starts(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> torch.Tensor:
    """``(N,)`` bool: the rows that begin a group, a run of consecutive equal prompts."""
    same = (prompt_ids[1:] == prompt_ids[:-1]).all(1) & (prompt_mask[1:] == prompt_mask[:-1]).all(1)
    return torch.cat([torch.ones(1, dtype=torch.bool, device=same.device), ~same])


def groups(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(group of each row (N,), first row of each group (K,))``: runs of consecutive equal prompts."""
    starts = _starts(prompt_ids, prompt_mask)
    return starts.long().cumsum(0) - 1, starts.nonzero().squeeze(1)


@dataclass(frozen=True)
class Layout:
    """What a pack's shapes depend on, read from the device once (:func:`layout`): a GPU pays one
    wait for the stream per pack, not one per shape. The tensors stay on the device."""

    group: torch.Tensor  # (N,) the group of each row
    first: torch.Tensor  # (K,) the first row of each group
    fed: torch.Tensor  # (N,) completion tokens fed: the last predicts nothing we keep
    fed_per_row: list[int]  # the same, on the host
    group_of_row: list[int]  # ``group``, on the host
    prompt_tokens: int  # real prompt tokens of the groups' first rows: each prompt's, once
    right_padded: bool  # each completion's tokens first and its padding after (what pack lays out)

    @property
    def shared(self) -> bool:
        """Whether two rows share a prompt (else packing saves nothing)."""
        return len(self.first) < len(self.fed)


@dataclass(frozen=True)
class Rows:
    """Each row's part of a :class:`Layout`, on the host: read from the device once for a whole batch
    (:func:`read_rows`), the layout of any run of its rows (a micro-batch, in any pass) needs no read."""

    starts: list[int]  # 1 where a row begins a group (a run of equal prompts), else 0
    fed: list[int]  # completion tokens fed
    prompt_lengths: list[int]  # real prompt tokens
    right_padded: list[int]  # 1 where the row's completion tokens come first and its padding after

    def __getitem__(self, sl: slice) -> Rows:
        """Rows ``sl`` (a run of consecutive rows, as micro-batches are) as a read of those rows alone
        gives them: the first of them begins a group."""
        if sl.step not in (None, 1):
            raise ValueError(f"rows of a run of consecutive rows, not every {sl.step}th")
        starts = self.starts[sl]
        return Rows([1, *starts[1:]] if starts else [], self.fed[sl], self.prompt_lengths[sl], self.right_padded[sl])


def _row_tensors(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, start: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(starts, fed, prompt lengths, right padded)``, each ``(N,)`` on the device."""
    p, prompt_mask, completion_mask = start, attention_mask[:, :start], attention_mask[:, start:]
    lengths = completion_mask.sum(1, keepdim=True)
    steps = torch.arange(completion_mask.shape[1], device=lengths.device)
    right_padded = (completion_mask.bool() == (steps < lengths)).all(1)
    fed = (completion_mask.sum(1) - 1).clamp(min=0)
    return _starts(input_ids[:, :p], prompt_mask), fed, prompt_mask.long().sum(1), right_padded


def read_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor, start: int) -> Rows:
    """The batch's :class:`Rows`, with one read of the device."""
    return _read(_row_tensors(input_ids, attention_mask, start))


def _read(tensors: tuple[torch.Tensor, ...]) -> Rows:
    n = len(tensors[0])
    host = torch.cat([t.long() for t in tensors]).tolist()
    return Rows(host[:n], host[n : 2 * n], host[2 * n : 3 * n], host[3 * n :])


def layout(input_ids: torch.Tensor, attention_mask: torch.Tensor, start: int, rows: Rows | None = None) -> Layout:
    """The batch's :class:`Layout`: its groups, fed tokens and padding, with one read of the device, or
    none when its ``rows`` were read already (:meth:`Rows.__getitem__` of the whole batch's)."""
    tensors = _row_tensors(input_ids, attention_mask, start)
    starts, fed = tensors[0], tensors[1]
    rows = rows if rows is not None else _read(tensors)
    if len(rows.fed) != len(input_ids):
        raise ValueError(f"rows of {len(rows.fed)} sequences for a batch of {len(input_ids)}")
    first = torch.nonzero_static(starts, size=sum(rows.starts)).squeeze(1)  # its size known: no second wait
    return Layout(
        group=starts.long().cumsum(0) - 1,
        first=first,
        fed=fed,
        fed_per_row=rows.fed,
        group_of_row=[g - 1 for g in accumulate(rows.starts)],
        prompt_tokens=sum(length for length, s in zip(rows.prompt_lengths, rows.starts) if s),
        right_padded=all(rows.right_padded),
    )


def packed_for(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, start: int, rows: Rows | None = None
) -> Packed | None:
    """:func:`pack` when two rows share a prompt and ``model`` is :func:`usable`, else None; the
    layout is made once, here (from ``rows`` when read already), and handed to :func:`pack`."""
    if not usable(model):  # before the layout: a model that cannot pack reads nothing
        return None
    found = layout(input_ids, attention_mask, start, rows)
    if not found.shared or not found.right_padded:
        return None
    return pack(input_ids, attention_mask, start, found, with_slots=takes_slots(model))


def pack(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    start: int,
    found: Layout | None = None,
    with_slots: bool = True,
) -> Packed:
    """``[left-padded prompt | right-padded completion]`` rows as packed group sequences
    (``found``: their :func:`layout`, when already read). Each completion's slot is as long as
    the completion itself, not the batch's longest: its padding is never fed in. ``with_slots``:
    also lay out the completion slots for our split attention (not for a model that cannot use them)."""
    p, c = start, input_ids.shape[1] - start
    found = found if found is not None else layout(input_ids, attention_mask, start)
    group, first, fed = found.group, found.first, found.fed
    k, dev = len(first), input_ids.device
    before = fed.cumsum(0) - fed
    offset = before - before[first][group]  # where each row's slot starts after the prompt
    per_group = [0] * k
    for g, n in zip(found.group_of_row, found.fed_per_row):
        per_group[g] += n
    width = p + max(per_group) if c > 1 else p
    ids = input_ids.new_zeros(k, width)
    valid = torch.zeros(k, width, dtype=torch.bool, device=dev)
    segment = torch.full((k, width), -2, dtype=torch.long, device=dev)  # -1 prompt, s slot s, -2 filler
    positions = torch.zeros(k, width, dtype=torch.long, device=dev)
    # The unshared row's position ids: padding does not shift positions.
    row_positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    ids[:, :p], valid[:, :p] = input_ids[first, :p], attention_mask[first, :p].bool()
    segment[:, :p], positions[:, :p] = -1, row_positions[first, :p]
    row, tok = _fed_tokens(fed, sum(found.fed_per_row))
    at = (group[row], p + offset[row] + tok)
    ids[at], valid[at] = input_ids[row, p + tok], True
    segment[at], positions[at] = (row - first[group[row]]), row_positions[row, p + tok]
    rows = _row_index(group, offset, fed, width - p + 1, c)
    mask = _visibility(valid, segment)
    longest = max(found.fed_per_row)
    slots = (
        _slots(group, offset, fed, mask, width, p, longest, (row, tok)) if with_slots and c > 1 and longest else None
    )
    return Packed(ids, mask, positions, p - 1, rows, found.prompt_tokens + sum(found.fed_per_row), slots)


def _fed_tokens(fed: torch.Tensor, total: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(row, t)`` of every fed completion token, row by row (``total`` of them, known on the host, so
    that their count costs no read of the device)."""
    row = torch.repeat_interleave(torch.arange(len(fed), device=fed.device), fed, output_size=total)
    return row, torch.arange(total, device=fed.device) - (fed.cumsum(0) - fed)[row]


def _slots(
    group: torch.Tensor,
    offset: torch.Tensor,
    fed: torch.Tensor,
    mask: torch.Tensor,
    width: int,
    p: int,
    s: int,
    tokens: tuple[torch.Tensor, torch.Tensor],
) -> Slots:
    """Each row's completion slot, padded to the longest (``s``): where its tokens sit in the packed
    sequences, and what each may see (the prompt keys its prompt rows see, its own slot causally).
    ``tokens``: :func:`_fed_tokens`, the real slot positions in order."""
    t = torch.arange(s, device=fed.device)
    real = t < fed.unsqueeze(1)
    index = torch.where(real, group.unsqueeze(1) * width + p + offset.unsqueeze(1) + t, 0)
    prompt_keys = mask[group, 0, p - 1, :p]  # the prompt's last query sees every real prompt token
    causal = torch.ones(s, s, dtype=torch.bool, device=fed.device).tril()
    own = causal & real.unsqueeze(1)  # (R, S, S): keys of the slot at or before the query
    own |= torch.eye(s, dtype=torch.bool, device=fed.device)  # a position past the end sees itself
    seen = torch.cat([prompt_keys.unsqueeze(1).expand(-1, s, -1), own], dim=2)
    prompt_out = torch.arange(len(mask), device=fed.device).unsqueeze(1) * width + torch.arange(p, device=fed.device)
    out_index = torch.cat([prompt_out.reshape(-1), index[tokens]])
    return Slots(width, p, group, index, seen.unsqueeze(1), out_index, real)


def padding_share(attention_mask: torch.Tensor, packed: Packed | None) -> tuple[int, int]:
    """``(computed, real)`` token positions of one pass: every position the model runs on (a packed
    row's prompt padding and filler included, or every ``[prompt | completion]`` cell unpacked), and
    those holding a token (packed: each prompt once and each fed completion token)."""
    if packed is None:
        return attention_mask.numel(), int(attention_mask.sum())
    return packed.input_ids.numel(), packed.tokens


def _visibility(valid: torch.Tensor, segment: torch.Tensor) -> torch.Tensor:
    """``(K, 1, L, L)``: a valid key at or before the query, in the prompt or the query's own slot."""
    width = valid.shape[1]
    causal = torch.ones(width, width, dtype=torch.bool, device=valid.device).tril()
    own = (segment.unsqueeze(2) == segment.unsqueeze(1)) | (segment == -1).unsqueeze(1)
    seen = causal & own & valid.unsqueeze(1)
    # A query that sees nothing (left padding) sees itself: finite outputs that no kept token reads.
    lonely = ~seen.any(-1)
    seen |= torch.eye(width, dtype=torch.bool, device=valid.device) & lonely.unsqueeze(-1)
    return seen.unsqueeze(1)


def _row_index(group: torch.Tensor, offset: torch.Tensor, fed: torch.Tensor, kept: int, c: int) -> torch.Tensor:
    """``(N, C)`` indices into kept outputs flattened over (group, column): a row's first token is
    predicted by the prompt's last position (column 0), token t > 0 by its slot's token t - 1. A
    padding token (t > fed) takes column 0's output too: finite, and masked out by every user."""
    t = torch.arange(c, device=group.device)
    col = 1 + offset.unsqueeze(1) + (t - 1).clamp(min=0)
    col = torch.where((t == 0) | (t > fed.unsqueeze(1)), 0, col)
    return group.unsqueeze(1) * kept + col


def mask_for(model, mask: torch.Tensor) -> torch.Tensor:
    """The bool mask as the attention implementation wants it: eager adds a float mask."""
    config = hf_config(model)
    if getattr(config, "_attn_implementation", "sdpa") != "eager":
        return mask
    dtype = getattr(config, "dtype", None)
    dtype = dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else torch.float32
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)


def slot_kwargs(model, packed: Packed) -> dict:
    """The keyword that hands ``packed``'s slots to the model's attention, when it takes them
    (:func:`takes_slots`); none otherwise."""
    return {SLOTS_KWARG: packed.slots} if packed.slots is not None and takes_slots(model) else {}


def takes_slots(model) -> bool:
    """Whether ``model`` (under its wrappers) runs our attention function, which takes a packed
    pass's :class:`Slots` (:mod:`grpoflow.models.attention`)."""
    return getattr(hf_config(model), "_attn_implementation", None) == OWN_ATTENTION


def gather_rows(kept: torch.Tensor, packed: Packed) -> torch.Tensor:
    """``(N, C, ...)`` per-row outputs from the packed ones kept, ``(K, L - P + 1, ...)`` (columns
    from ``packed.keep_from`` on); the backward pass sums a shared position's gradients."""
    flat = kept.reshape(-1, *kept.shape[2:])
    return flat.index_select(0, packed.rows.reshape(-1)).view(*packed.rows.shape, *kept.shape[2:])
