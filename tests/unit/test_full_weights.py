"""The weights a rollout engine's sync gets under ZeRO-3, on 2 CPU ranks (gloo): each module's shards
gathered in turn give the model's full weights (LoRA merged), before and after an optimizer step;
they equal the export's gather of the whole model; and no gather holds more than one module."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from grpoflow.config import EngineConfig, LoraConfig
from grpoflow.models.full_weights import full_state_dict
from grpoflow.models.lora import add_adapters, is_zero3, merged_state_dict
from grpoflow.models.modeling import load_pretrained
from grpoflow.ports import free_port
from tests.chat_model import build_chat_model
from tests.distributed import become_rank

ZERO3 = EngineConfig(zero_stage=3, micro_batch_size=2, lr=0.01)


def _policy(model_dir: Path, lora: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    model, _ = load_pretrained(model_dir)
    if lora:
        # Adapters on two projections only: the other linear layers stay plain modules of the gather.
        model = add_adapters(model, LoraConfig(rank=4, alpha=8, target_modules=["q_proj", "v_proj"]))
        with torch.no_grad():  # B starts at zero (a no-op merge): make the adapters matter
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.5)
    return model


class GatherLog:
    """Wraps DeepSpeed's GatheredParameters to record the elements each gather makes whole."""

    def __init__(self, real):
        self.real, self.sizes = real, []

    def __call__(self, params, *args, **kwargs):
        params = list(params)
        if kwargs.get("enabled", True):
            self.sizes.append(sum(getattr(p, "ds_numel", p.numel()) for p in params))
        return self.real(params, *args, **kwargs)


def _one_rank(model_dir: Path) -> dict:
    from grpoflow.models.engine import build_engine, import_deepspeed

    model = _policy(model_dir, lora=True)
    want = {k: v.clone() for k, v in merged_state_dict(model).items()}
    from peft.tuners.lora import Linear as LoraLinear

    # A gather's unit: a module's own parameters, a LoRA layer's with its base layer and adapters.
    largest = max(sum(p.numel() for p in m.parameters(recurse=isinstance(m, LoraLinear))) for m in model.modules())
    engine = build_engine(model, ZERO3, batch_size=2 * int(os.environ["WORLD_SIZE"]))
    zero = import_deepspeed().zero
    log = GatherLog(zero.GatheredParameters)
    zero.GatheredParameters = log
    try:
        before = full_state_dict(engine.module)
    finally:
        zero.GatheredParameters = log.real
    ids = torch.randint(0, 50, (2, 10), generator=torch.Generator().manual_seed(int(os.environ["RANK"])))
    engine.backward(engine(input_ids=ids, labels=ids).loss)
    engine.step()
    after = full_state_dict(engine.module)
    with zero.GatheredParameters(list(engine.module.parameters()), modifier_rank=None):  # as the export gathers
        export = {k: v.detach().clone() for k, v in merged_state_dict(engine.module).items()}
    total = sum(p.ds_numel for p in engine.module.parameters())
    return {
        "zero3": is_zero3(engine.module),
        "want": want,
        "before": before,
        "after": after,
        "export": export,
        "largest_gather": max(log.sizes),
        "largest_module": largest,
        "total": total,
    }


def _worker(rank: int, world: int, port: int, model_dir: str, out_dir: str) -> None:
    become_rank(rank, world, port)
    out = _one_rank(Path(model_dir))
    torch.save(out, Path(out_dir) / f"rank{rank}.pt")
    from grpoflow.models.engine import leave_distributed

    leave_distributed()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    root = tmp_path_factory.mktemp("zero3")
    model_dir = build_chat_model(root / "model")
    mp.spawn(_worker, args=(2, free_port(), str(model_dir), str(root)), nprocs=2, join=True)
    return [torch.load(root / f"rank{r}.pt", weights_only=False) for r in range(2)]


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_zero3_shards_gathered_module_by_module_are_the_full_weights(ranks):
    # A LoRA policy has both kinds of unit: LoRA layers (base and adapters gathered together, merged)
    # and plain modules (the embedding, the norms, the linear layers LoRA does not target).
    for got in ranks:
        assert got["zero3"]
        assert _equal(got["before"], got["want"])  # at the start: the model as loaded, LoRA merged
        assert _equal(got["after"], got["export"])  # after a step: what the export's whole gather gives
        assert not _equal(got["after"], got["before"])  # and the step moved them
        # One module at a time: no gather made more than the largest module whole, and far less than the model.
        assert got["largest_gather"] <= got["largest_module"] < got["total"]
    assert _equal(ranks[0]["after"], ranks[1]["after"])  # every rank syncs the same weights


def test_without_zero3_the_weights_are_the_models_own(tmp_path):
    model_dir = build_chat_model(tmp_path / "model")
    for lora in (False, True):
        model = _policy(model_dir, lora)
        assert not is_zero3(model)
        assert _equal(full_state_dict(model), merged_state_dict(copy.deepcopy(model)))
