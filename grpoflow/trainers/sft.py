"""Supervised fine-tuning of the reference policy: next-token loss on completion tokens only."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from grpoflow.config import Params
from grpoflow.models.device import on
from grpoflow.models.engine import optimizer_step
from grpoflow.models.prompting import Prompter

Example = tuple[list[int], list[int]]  # (input_ids, labels with -100 on prompt tokens)


def build_examples(rows: Sequence[dict], prompter: Prompter, max_length: int) -> list[Example]:
    """Prompt + solution + end of turn, labels masked on the prompt; rows too long are skipped."""
    examples = []
    for r in rows:
        prompt, target = prompter.prompt_ids(r["prompt"]), prompter.target_ids(r["solution"])
        if len(prompt) + len(target) <= max_length:
            examples.append((prompt + target, [-100] * len(prompt) + target))
    return examples


def collate(batch: Sequence[Example], pad_id: int) -> dict[str, torch.Tensor]:
    """Pad ``examples`` (ids, labels) into a batch: pad id on the right, labels -100 there."""
    width = max(len(ids) for ids, _ in batch)
    ids = torch.full((len(batch), width), pad_id)
    labels = torch.full((len(batch), width), -100)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, (x, y) in enumerate(batch):
        ids[i, : len(x)], labels[i, : len(y)], mask[i, : len(x)] = torch.tensor(x), torch.tensor(y), 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def batch_indices(n: int, batch_size: int, steps: int, seed: int) -> Iterator[list[int]]:
    """``steps`` batches of ``batch_size`` indices into ``n`` items: seeded passes, each over a fresh
    shuffle, carried across batch boundaries (every item is seen once per pass)."""
    rng = random.Random(seed)
    order: list[int] = []
    for _ in range(steps):
        while len(order) < batch_size:
            epoch = list(range(n))
            rng.shuffle(epoch)
            order += epoch
        batch, order = order[:batch_size], order[batch_size:]
        yield batch


def train_sft(
    engine,
    examples: list[Example],
    *,
    epochs: float,
    batch_size: int,
    pad_id: int,
    seed: int,
    on_step: Callable[[int, dict], None] | None = None,
) -> list[float]:
    """Train for ``epochs`` passes in optimizer steps of ``batch_size`` sequences; returns the losses."""
    micro = engine.train_micro_batch_size_per_gpu()
    steps = max(1, math.ceil(len(examples) * epochs / batch_size))
    losses = []
    engine.train()
    for step, indices in enumerate(batch_indices(len(examples), batch_size, steps, seed)):
        batch = [examples[i] for i in indices]
        step_loss = 0.0
        for lo in range(0, batch_size, micro):
            inputs = on(collate(batch[lo : lo + micro], pad_id), engine.device)
            loss = engine(**inputs).loss
            engine.backward(loss)
            optimizer_step(engine)
            step_loss += loss.item() * micro / batch_size
        losses.append(step_loss)
        if on_step:
            on_step(step, {"loss": step_loss, "lr": engine.get_lr()[0], "steps": steps})
    return losses


def tiny_from_scratch(params: Params, train: Sequence[dict]) -> tuple[Any, Any]:
    """``(model, tokenizer)``: the tiny model of ``params.model``, its tokenizer trained on ``train``'s
    prompts and solutions as the plain template renders them (the default set's starting model)."""
    from grpoflow.models.modeling import build_tiny_model, train_tokenizer
    from grpoflow.models.prompting import PLAIN_TEMPLATE

    texts = [PLAIN_TEMPLATE.format(question=r["prompt"].strip()) + r["solution"].strip() for r in train]
    tokenizer = train_tokenizer(texts, params.model.vocab_size)
    return build_tiny_model(params.model, tokenizer, seed=params.experiment.seed), tokenizer


def fine_tune(
    params: Params,
    model: torch.nn.Module,
    tokenizer: Any,
    prompter: Prompter,
    train: Sequence[dict],
    on_step: Callable[[int, dict], None] | None = None,
) -> torch.nn.Module:
    """``model`` trained on ``train``'s worked solutions as ``params.sft`` says, on its own DeepSpeed
    engine (:func:`train_sft`); the trained module."""
    from grpoflow.models.engine import build_engine

    cfg = params.sft
    engine = build_engine(model, cfg.engine, cfg.batch_size)
    train_sft(
        engine,
        build_examples(train, prompter, params.model.max_length),
        epochs=cfg.epochs,
        batch_size=cfg.batch_size,
        pad_id=tokenizer.pad_token_id,
        seed=params.experiment.seed,
        on_step=on_step,
    )
    return engine.module
