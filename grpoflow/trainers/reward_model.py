"""A Bradley-Terry reward model: one scalar score head on the SFT policy, trained on preference pairs.

The model is ``P(chosen > rejected) = sigmoid(r(x, y_c) - r(x, y_r))`` (Bradley & Terry 1952), fitted
by the loss of the InstructGPT reward model (Ouyang et al. 2022, eq. 1) over pairs of completions of
one prompt. ``r`` is a Hugging Face ``*ForSequenceClassification`` with ``num_labels=1`` whose backbone
starts from the SFT policy's weights; it reads the score at the last token that is not padding.

Pairs come from a preference file or from the policy's own samples ranked by the verifiers
(:func:`pairs_from_samples`). A trained model scores rollouts through :class:`RewardModelScorer`,
and :class:`RunningNorm` rescales those scores, which have no fixed scale.

Torch and transformers are imported inside the functions that need them, so that importing this
module (for :class:`Pair` or the pair builders) stays cheap.
"""

from __future__ import annotations

import copy
import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpoflow.config import PromptConfig
from grpoflow.data.text import normalize_text

if TYPE_CHECKING:
    import torch

    from grpoflow.models.prompting import Prompter

EncodedPair = tuple[list[int], list[int]]  # (prompt + chosen ids, prompt + rejected ids)

SOURCE_SELF = "self"  # a pair of two of the policy's samples, ranked by the verifiers
SOURCE_GOLD = "gold"  # the row's gold solution over the policy's worst sample
_SPLIT_SALT = b"grpoflow-rm-split-v1\0"


@dataclass(frozen=True)
class Pair:
    """Two completions of one prompt, the first preferred."""

    prompt: str
    chosen: str
    rejected: str
    id: str
    source: str


# --------------------------------------------------------------------------------------------- loss


def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """``mean(-log sigmoid(r_c - r_r))``: the negative log-likelihood of the observed preferences
    under Bradley-Terry (InstructGPT RM loss, Ouyang et al. 2022, eq. 1, one pair per comparison).

    ``logsigmoid`` is evaluated stably for any margin: ``-log(1 + exp(-m))`` never overflows, and a
    large negative margin gives a loss of about ``-m`` instead of ``inf``.
    """
    import torch
    import torch.nn.functional as F

    if chosen.shape != rejected.shape:
        raise ValueError(
            f"chosen and rejected scores differ in shape: {tuple(chosen.shape)} vs {tuple(rejected.shape)}"
        )
    dtype = torch.promote_types(chosen.dtype, torch.float32)  # never in bf16/fp16; float64 stays
    return -F.logsigmoid(chosen.to(dtype) - rejected.to(dtype)).mean()


# -------------------------------------------------------------------------------------------- pairs


def _first_argmax(values: Sequence[float]) -> int:
    return max(range(len(values)), key=lambda i: (values[i], -i))


def _first_argmin(values: Sequence[float]) -> int:
    return min(range(len(values)), key=lambda i: (values[i], i))


def pairs_from_samples(
    rows: Sequence[Mapping[str, Any]],
    samples: Sequence[Sequence[str]],
    scores: Sequence[Sequence[float]],
    *,
    gold: bool,
) -> list[Pair]:
    """Preference pairs from the policy's samples of each row, ranked by their verifier scores.

    Per row, with ``best`` and ``worst`` the first sample of highest and of lowest score:

    - ``{id}:best-worst`` (source ``self``): best over worst, when their scores differ. A group whose
      samples all score the same says nothing about which is better and gives no pair.
    - ``{id}:gold-worst`` (source ``gold``, only with ``gold``): the row's solution over the worst
      sample, when the row has a solution and the worst sample is *wrong*: its score is below the
      best in its group or below 1 (a verifier's full marks), i.e. below ``max(1, best)``. When every
      sample is right the pair would only teach the gold solution's style over a correct answer, so
      it is left out; when every sample is equally wrong it is the row's only signal.

    A pair whose two texts are the same (the policy reproduced the solution) is skipped.
    """
    if not len(rows) == len(samples) == len(scores):
        raise ValueError(f"rows, samples and scores differ in length: {len(rows)}, {len(samples)}, {len(scores)}")
    pairs: list[Pair] = []
    for row, texts, values in zip(rows, samples, scores):
        if len(texts) != len(values):
            raise ValueError(f"row {row['id']}: {len(texts)} samples but {len(values)} scores")
        if not texts:
            continue
        best, worst = _first_argmax(values), _first_argmin(values)
        candidates = []
        if values[best] > values[worst]:
            candidates.append(Pair(row["prompt"], texts[best], texts[worst], f"{row['id']}:best-worst", SOURCE_SELF))
        solution = (row.get("solution") or "").strip()
        if gold and solution and values[worst] < max(1.0, values[best]):
            candidates.append(Pair(row["prompt"], solution, texts[worst], f"{row['id']}:gold-worst", SOURCE_GOLD))
        pairs += [p for p in candidates if p.chosen.strip() != p.rejected.strip()]
    return pairs


def heldout_unit(prompt: str, seed: int) -> float:
    """A uniform-looking number in [0, 1) fixed by the normalised prompt and ``seed``."""
    digest = hashlib.sha256(_SPLIT_SALT + f"{seed}\0".encode() + normalize_text(prompt).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def split_pairs(pairs: Sequence[Pair], heldout_share: float, seed: int) -> tuple[list[Pair], list[Pair]]:
    """``(train, heldout)`` by a stable hash of each pair's normalised prompt (as the data split):
    every pair of one prompt lands on the same side, whatever the order or the other pairs, so a
    held-out prompt's completions are never trained on. Each side keeps the input order."""
    train: list[Pair] = []
    heldout: list[Pair] = []
    for p in pairs:
        (heldout if heldout_unit(p.prompt, seed) < heldout_share else train).append(p)
    return train, heldout


# ----------------------------------------------------------------------------------------- encoding


def encode_pair(pair: Pair, prompter: Prompter, max_length: int) -> EncodedPair | None:
    """``(prompt + chosen, prompt + rejected)`` token ids, each completion followed by the end-of-turn
    token as in SFT (:meth:`Prompter.target_ids`); None when either is longer than ``max_length``
    (truncating would cut off the ending that the preference is often about)."""
    prompt = prompter.prompt_ids(pair.prompt)
    chosen, rejected = prompt + prompter.target_ids(pair.chosen), prompt + prompter.target_ids(pair.rejected)
    if max(len(chosen), len(rejected)) > max_length:
        return None
    return chosen, rejected


def encode_pairs(pairs: Sequence[Pair], prompter: Prompter, max_length: int) -> tuple[list[EncodedPair], int]:
    """The pairs that fit in ``max_length`` tokens, encoded, and how many did not."""
    encoded = [encode_pair(p, prompter, max_length) for p in pairs]
    kept = [e for e in encoded if e is not None]
    return kept, len(encoded) - len(kept)


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


def _pair_scores(model: Any, batch: Sequence[EncodedPair], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(r_chosen, r_rejected)`` of ``batch`` in one forward pass of its 2 x len(batch) sequences."""
    from grpoflow.models.device import model_device, on

    inputs = collate_sequences([c for c, _ in batch] + [r for _, r in batch], pad_id)
    scores = model(**on(inputs, model_device(model)), use_cache=False).logits[:, 0].float()
    return scores[: len(batch)], scores[len(batch) :]


# ------------------------------------------------------------------------------------------ models


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


# ---------------------------------------------------------------------------------------- training


def _rank_and_world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def train_reward_model(
    engine: Any,
    train_encoded: Sequence[EncodedPair],
    *,
    epochs: float,
    batch_size: int,
    pad_id: int,
    seed: int,
    on_step: Callable[[int, dict], None] | None = None,
) -> list[float]:
    """Fit the Bradley-Terry loss for ``epochs`` passes in optimizer steps of ``batch_size`` pairs;
    returns each step's loss.

    The engine is :func:`grpoflow.models.engine.build_engine` ``(model, cfg, batch_size)``: its batch and
    micro-batch count *pairs*, and each micro-batch's chosen and rejected sequences go through one
    forward pass (2 x micro sequences). Every process draws the same seeded order and trains on its
    own slice of each step's pairs; the logged loss and accuracy (share of pairs with ``r_c > r_r``,
    before the step) are this process's.
    """
    from grpoflow.models.engine import optimizer_step
    from grpoflow.trainers.sft import batch_indices

    if not train_encoded:
        raise ValueError("no training pairs: every pair was skipped or held out")
    rank, world = _rank_and_world()
    per_rank, micro = batch_size // world, engine.train_micro_batch_size_per_gpu()
    steps = max(1, math.ceil(len(train_encoded) * epochs / batch_size))
    losses = []
    engine.train()
    for step, chosen in enumerate(batch_indices(len(train_encoded), batch_size, steps, seed)):
        mine = [train_encoded[i] for i in chosen[rank * per_rank : (rank + 1) * per_rank]]
        step_loss, wins = 0.0, 0
        for lo in range(0, per_rank, micro):
            batch = mine[lo : lo + micro]
            r_c, r_r = _pair_scores(engine, batch, pad_id)
            loss = bradley_terry_loss(r_c, r_r)
            engine.backward(loss)
            optimizer_step(engine)
            step_loss += loss.item() * len(batch) / per_rank
            wins += int((r_c > r_r).sum())
        losses.append(step_loss)
        if on_step:
            stats = {"loss": step_loss, "accuracy": wins / per_rank, "lr": engine.get_lr()[0], "steps": steps}
            on_step(step, stats)
    return losses


# -------------------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class PairwiseEval:
    """Held-out pairwise results: ``summary`` for metrics, ``margins`` (``r_c - r_r`` per pair) for plots."""

    summary: dict[str, float]
    margins: list[float] = field(repr=False)


def margin_summary(margins: Sequence[float]) -> dict[str, float]:
    """Accuracy (share of margins > 0; a tie counts as wrong), mean, population std and the 10th,
    50th and 90th percentiles (linear interpolation) of the margins; NaN statistics when there are none."""
    import torch

    n = len(margins)
    if not n:
        nan = float("nan")
        return {"pairs": 0, "accuracy": nan, "margin_mean": nan, "margin_std": nan, "p10": nan, "p50": nan, "p90": nan}
    m = torch.tensor(list(margins), dtype=torch.float64)
    q = torch.quantile(m, torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)).tolist()
    return {
        "pairs": n,
        "accuracy": float((m > 0).double().mean()),
        "margin_mean": float(m.mean()),
        "margin_std": float(m.std(correction=0)),
        "p10": q[0],
        "p50": q[1],
        "p90": q[2],
    }


def pairwise_eval(model: Any, encoded: Sequence[EncodedPair], pad_id: int, batch_size: int = 32) -> PairwiseEval:
    """Score held-out pairs (``batch_size`` pairs a forward pass) without gradients; the model's
    train/eval mode is restored after."""
    import torch

    was_training = model.training
    model.eval()
    margins: list[float] = []
    try:
        with torch.inference_mode():
            for lo in range(0, len(encoded), batch_size):
                r_c, r_r = _pair_scores(model, encoded[lo : lo + batch_size], pad_id)
                margins += (r_c - r_r).tolist()
    finally:
        model.train(was_training)
    return PairwiseEval(margin_summary(margins), margins)


# ----------------------------------------------------------------------------------------- scoring


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


# ------------------------------------------------------------------------------------ normalisation


class RunningNorm:
    """Scores minus their running mean, over their running standard deviation, over every score so far.

    The statistics are merged batch by batch with the parallel update of Chan, Golub & LeVeque
    (1979): for counts ``n_a, n_b``, means ``m_a, m_b`` and sums of squared deviations ``M_a, M_b``,
    ``d = m_b - m_a``, ``m = m_a + d n_b / n``, ``M = M_a + M_b + d^2 n_a n_b / n`` (Welford's update
    when ``n_b = 1``); numerically stable, unlike running sums of ``x`` and ``x^2``. The std is the
    population one, ``sqrt(M / n)``. A batch is normalised with statistics that include it, so the
    first batch is already centred and scaled.
    """

    def __init__(self, eps: float = 1e-6):
        self.eps = eps
        self.count, self.mean, self.m2 = 0, 0.0, 0.0

    @property
    def std(self) -> float:
        """The population standard deviation of every score so far (0 before any)."""
        return math.sqrt(self.m2 / self.count) if self.count else 0.0

    def update(self, x: torch.Tensor) -> None:
        """Merge the values of ``x`` into the running statistics."""
        values = x.detach().double().flatten()
        n_b = values.numel()
        if not n_b:
            return
        mean_b = float(values.mean())
        m2_b = float(((values - mean_b) ** 2).sum())
        n = self.count + n_b
        delta = mean_b - self.mean
        self.mean += delta * n_b / n
        self.m2 += m2_b + delta * delta * self.count * n_b / n
        self.count = n

    def update_and_normalize(self, x: torch.Tensor) -> torch.Tensor:
        """``(x - mean) / (std + eps)`` with the statistics updated by ``x`` first; same dtype as ``x``."""
        self.update(x)
        return ((x.double() - self.mean) / (self.std + self.eps)).to(x.dtype)

    def state_dict(self) -> dict[str, float]:
        """The statistics, as plain numbers (JSON-friendly), for a checkpoint."""
        return {"count": self.count, "mean": self.mean, "m2": self.m2}

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        """Continue from a :meth:`state_dict`."""
        self.count, self.mean, self.m2 = int(state["count"]), float(state["mean"]), float(state["m2"])
