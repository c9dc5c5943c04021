"""The reward model as a model: a Hugging Face ``*ForSequenceClassification`` with one label whose
backbone starts from the SFT policy, read at the last token that is not padding; how it is built,
checked and loaded, how it scores a batch of pairs, and :class:`RewardModelScorer`, a trained one
scoring rollouts for the RL reward. Its training is :mod:`grpoflow.trainers.reward_model`.

Torch and transformers are imported inside the functions that need them."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpoflow.config import PromptConfig
from grpoflow.data.pairs import EncodedPair

if TYPE_CHECKING:
    import torch

    from grpoflow.models.prompting import Prompter


def collate_sequences(seqs: Sequence[Sequence[int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids`` and their ``attention_mask``. Right padding keeps every real token
    at its own position, so a sequence's score does not depend on what it is batched with."""
    import torch

    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)], mask[i, : len(s)] = torch.tensor(list(s), dtype=torch.long), 1
    return {"input_ids": ids, "attention_mask": mask}


def pair_scores(model: Any, batch: Sequence[EncodedPair], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(r_chosen, r_rejected)`` of ``batch`` in one forward pass of its 2 x len(batch) sequences."""
    from grpoflow.models.device import model_device, on

    inputs = collate_sequences([c for c, _ in batch] + [r for _, r in batch], pad_id)
    scores = model(**on(inputs, model_device(model)), use_cache=False).logits[:, 0].float()
    return scores[: len(batch)], scores[len(batch) :]


def _pad_id(tokenizer: Any) -> int:
    pad = tokenizer.pad_token_id
    return int(pad if pad is not None else tokenizer.eos_token_id)


def reward_model_from_policy(policy: Any, tokenizer: Any) -> Any:
    """A ``*ForSequenceClassification`` with one label whose backbone is the policy's (a model or its
    folder); the LM head is dropped and the new ``score`` head starts at zero.

    A zero head makes every initial score 0 (loss exactly log 2) with no randomness to seed, and
    the head's first gradient, ``sum (sigmoid(m) - 1)(h_c - h_r)``, is not zero, so training starts
    at once. ``pad_token_id`` is the tokenizer's: the model reads its score at the last token that is
    not padding. (When padding and end-of-turn are one token, that is the completion's last token.)
    """
    import torch
    from transformers import AutoModelForSequenceClassification

    from grpoflow.models.attention import use_own_attention

    pad_id = _pad_id(tokenizer)
    if isinstance(policy, (str, Path)):
        if not (Path(policy) / "config.json").is_file():
            raise FileNotFoundError(f"{policy} has no config.json: not a Hugging Face model folder")
        model = AutoModelForSequenceClassification.from_pretrained(
            str(policy), num_labels=1, pad_token_id=pad_id, dtype=torch.float32, local_files_only=True
        )
    else:
        config = copy.deepcopy(policy.config)
        config.num_labels, config.pad_token_id = 1, pad_id
        model = AutoModelForSequenceClassification.from_config(config, dtype=policy.dtype)
        backbone = getattr(model, model.base_model_prefix)
        backbone.load_state_dict(policy.base_model.state_dict())
    with torch.no_grad():
        model.score.weight.zero_()
        if getattr(model.score, "bias", None) is not None:
            model.score.bias.zero_()
    model.config.pad_token_id = pad_id
    return use_own_attention(model)


def check_reward_model_config(path: str | Path) -> None:
    """Raise unless ``path`` holds a sequence classifier with exactly one label (reads config.json only)."""
    from transformers import AutoConfig

    if not (Path(path) / "config.json").is_file():
        raise FileNotFoundError(f"{path} has no config.json: train a reward model with the reward_model stage")
    config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    architectures = list(getattr(config, "architectures", None) or [])
    is_classifier = any(a.endswith("ForSequenceClassification") for a in architectures)
    if not is_classifier or config.num_labels != 1:
        says = ", ".join(architectures) or "no architecture"
        if is_classifier:
            says += f" with num_labels={config.num_labels}"
        raise ValueError(
            f"{path} is not a reward model: its config says {says}; a reward model is a *ForSequenceClassification "
            "with num_labels=1 (train one with the reward_model stage)"
        )


def load_reward_model(path: str | Path, dtype: torch.dtype | None = None) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of a saved reward model; its config is checked before any weight is read."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from grpoflow.models.attention import use_own_attention

    check_reward_model_config(path)
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForSequenceClassification.from_pretrained(
        str(path), dtype=dtype or torch.float32, local_files_only=True
    )
    if model.config.pad_token_id is None:
        model.config.pad_token_id = _pad_id(tokenizer)
    return use_own_attention(model), tokenizer


class RewardModelScorer:
    """A frozen reward model as a batch scorer: ``(completions, rows) -> raw scores``.

    Each completion is scored after its row's prompt, rendered by the RM's own prompter, and ends
    with the end-of-turn token: the very encoding of the training pairs, so a completion is judged
    as a finished turn (one cut at the length cap too; the overlong penalty is for those). An input
    longer than ``max_length`` (default: the model's ``max_position_embeddings``) keeps its last
    ``max_length`` tokens: the prompt loses its start first, the part least needed to judge the
    answer, and the score is always read at the completion's true end.

    The model is loaded on the first call (building the reward costs nothing), in eval mode with no
    parameter requiring gradients, on ``device`` (default: the process's,
    :func:`grpoflow.models.device.compute_device`). Sequences are
    scored ``batch_size`` at a time, sorted by length to pad little; right padding makes each score
    independent of its batch.
    """

    def __init__(
        self,
        path: str | Path,
        prompt_cfg: PromptConfig | None = None,
        *,
        batch_size: int,
        device: str | None = None,
        max_length: int | None = None,
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.path, self.prompt_cfg = Path(path), prompt_cfg or PromptConfig()
        self.batch_size, self.device, self.max_length = batch_size, device, max_length
        self._loaded: tuple[Any, Prompter, int, int] | None = None

    def _load(self) -> tuple[Any, Prompter, int, int]:
        if self._loaded is None:
            from grpoflow.models.device import compute_device
            from grpoflow.models.prompting import prompter_for

            model, tokenizer = load_reward_model(self.path)
            model = model.to(self.device or compute_device()).eval().requires_grad_(False)
            limit = self.max_length or int(getattr(model.config, "max_position_embeddings", 0) or 2048)
            self._loaded = (model, prompter_for(model, tokenizer, self.prompt_cfg), _pad_id(tokenizer), limit)
        return self._loaded

    @property
    def model(self) -> Any:
        """The loaded reward model (loads it)."""
        return self._load()[0]

    def encode(self, completion: str, row: Mapping[str, Any]) -> list[int]:
        """The token ids scored for ``completion`` of ``row``, cut from the left to the length limit."""
        _, prompter, _, limit = self._load()
        ids = prompter.prompt_ids(row["prompt"]) + prompter.target_ids(completion)
        return ids[-limit:]

    def __call__(self, completions: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> list[float]:
        """The reward model's raw score of each completion after its row's prompt."""
        import torch

        if len(completions) != len(rows):
            raise ValueError(f"{len(completions)} completions but {len(rows)} rows")
        model, _, pad_id, _ = self._load()
        seqs = [self.encode(c, r) for c, r in zip(completions, rows)]
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
        scores = [0.0] * len(seqs)
        from grpoflow.models.device import model_device, on

        device = model_device(model)
        with torch.inference_mode():
            for lo in range(0, len(order), self.batch_size):
                idx = order[lo : lo + self.batch_size]
                inputs = collate_sequences([seqs[i] for i in idx], pad_id)
                out = model(**on(inputs, device), use_cache=False).logits[:, 0]
                for i, s in zip(idx, out.float().tolist()):
                    scores[i] = s
        return scores
