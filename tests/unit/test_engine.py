"""The training loop's parts, on hand-made inputs."""

import os
import shutil
from pathlib import Path

import pytest

from grpoflow.config import validate_params
from grpoflow.models.engine import cpu_has_native_bf16, deepspeed_config


def test_deepspeed_batch_arithmetic():
    cfg = validate_params({}).rl.engine.model_copy(update={"micro_batch_size": 8})
    ds = deepspeed_config(cfg, batch_size=64, world_size=2)
    assert ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * 2 == 64
    with pytest.raises(ValueError, match="does not split"):
        deepspeed_config(cfg, batch_size=60, world_size=8)


def test_a_cpu_multiplies_bf16_natively_with_amx_or_avx512_bf16_in_its_flags(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_tile amx_bf16\n\nprocessor\t: 1\n")
    assert cpu_has_native_bf16(info) is True
    info.write_text("flags\t\t: fpu avx2 avx512f avx512_bf16\n")
    assert cpu_has_native_bf16(info) is True
    info.write_text("flags\t\t: fpu avx2 avx512f amx_tile\nmodel name\t: amx_bf16 in a name is no flag\n")
    assert cpu_has_native_bf16(info) is False
    assert cpu_has_native_bf16(tmp_path / "absent") is None


@pytest.mark.parametrize("micro_steps", [1, 2])
def test_the_global_gradient_norm_is_kept_before_clipping_at_the_accumulation_boundary(micro_steps):
    import torch

    from grpoflow.models.engine import build_engine, optimizer_step

    model = torch.nn.Linear(2, 1, bias=False)
    cfg = validate_params({}).rl.engine.model_copy(update={"micro_batch_size": 1, "gradient_clipping": 1.0})
    engine = build_engine(model, cfg, batch_size=micro_steps)
    x = torch.tensor([[3.0, 4.0]])
    for micro in range(micro_steps):
        assert micro == 0 or engine.get_global_grad_norm() is None  # not before the boundary
        engine.backward(engine(x).sum())  # d/dw of w.x is x; DeepSpeed averages the micro-steps
        optimizer_step(engine)
    # |(3, 4)| = 5 by hand, though the step itself clipped the gradient to norm 1.
    assert engine.get_global_grad_norm() == pytest.approx(5.0)


def test_a_reference_refresh_mixes_the_policy_in_by_hand():
    import torch

    from grpoflow.models.engine import build_engine
    from grpoflow.rl.reference_sync import refresh_reference

    policy, ref = torch.nn.Linear(2, 1, bias=False), torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        policy.weight.fill_(1.0)
        ref.weight.fill_(0.0)
    engine = build_engine(policy, validate_params({}).rl.engine, batch_size=1)
    refresh_reference(ref, engine, alpha=0.6)
    assert ref.weight.tolist() == [[pytest.approx(0.6), pytest.approx(0.6)]]
    refresh_reference(ref, engine, alpha=0.6)  # 0.6 * 1 + 0.4 * 0.6
    assert ref.weight.tolist() == [[pytest.approx(0.84), pytest.approx(0.84)]]


def test_an_engine_builds_after_the_group_was_destroyed_behind_deepspeeds_back():
    # vLLM's shutdown destroys the default group with torch.distributed itself; DeepSpeed kept its
    # groups of the old one, and the next engine's broadcast failed ("Group ... is not registered").
    import torch
    import torch.distributed as dist

    from grpoflow.models.engine import build_engine

    cfg = validate_params({}).rl.engine.model_copy(update={"micro_batch_size": 1})
    build_engine(torch.nn.Linear(2, 1), cfg, batch_size=1)
    dist.destroy_process_group()
    engine = build_engine(torch.nn.Linear(2, 1), cfg, batch_size=1)
    engine.backward(engine(torch.ones(1, 2)).sum())
    engine.step()
    assert dist.is_initialized() and engine.global_steps == 1


def _leave_with_a_release_that_destroys_the_group(rank: int, port: int, seen) -> None:
    import torch
    import torch.distributed as dist

    from grpoflow.models.engine import leave_distributed
    from tests.distributed import become_rank

    become_rank(rank, 2, port)
    dist.init_process_group("gloo")

    def release() -> None:  # as vLLM's engine-core shutdown does: a collective, then the group goes
        total = torch.ones(1)
        dist.all_reduce(total)
        seen.put((rank, float(total)))
        dist.destroy_process_group()

    leave_distributed(release=release)
    seen.put((rank, dist.is_initialized()))


def test_leaving_runs_the_release_on_every_rank_while_the_group_lives_and_tolerates_it_destroying_the_group():
    # vLLM on each rank tears down its groups and torch's default one at shutdown: it must run after
    # the last barrier and before the trainer destroys the group (else "Invalid process group").
    import torch.multiprocessing as mp

    from grpoflow.ports import free_port

    ctx = mp.get_context("spawn")
    seen = ctx.Queue()
    mp.start_processes(
        _leave_with_a_release_that_destroys_the_group,
        args=(free_port(), seen),
        nprocs=2,
        start_method="spawn",
    )
    got = [seen.get(timeout=60) for _ in range(4)]
    assert sorted(got, key=repr) == sorted([(0, 2.0), (1, 2.0), (0, False), (1, False)], key=repr)


def _ninja(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ninja").write_text("#!/bin/sh\n")
    (folder / "ninja").chmod(0o755)
    return folder / "ninja"


@pytest.mark.parametrize("first_on_path", ["another", "none", "own"])
def test_the_environments_own_ninja_builds_the_ops_whatever_path_the_process_got(tmp_path, monkeypatch, first_on_path):
    from grpoflow.models import engine

    own = _ninja(tmp_path / "venv" / "bin")
    another = _ninja(tmp_path / "usr" / "bin")
    monkeypatch.setattr(engine.sys, "executable", str(own.parent / "python"))
    path = {"another": [another.parent], "none": [tmp_path], "own": [own.parent, another.parent]}[first_on_path]
    monkeypatch.setenv("PATH", os.pathsep.join(map(str, path)))
    engine.use_own_ninja()
    assert shutil.which("ninja") == str(own)
    assert os.environ["PATH"].split(os.pathsep) == [str(own.parent)] + [str(p) for p in path if p != own.parent]


def test_without_a_ninja_beside_the_interpreter_path_is_left_as_it_is(tmp_path, monkeypatch):
    from grpoflow.models import engine

    another = _ninja(tmp_path / "usr" / "bin")
    monkeypatch.setattr(engine.sys, "executable", str(tmp_path / "python3"))
    monkeypatch.setenv("PATH", str(another.parent))
    engine.use_own_ninja()
    assert os.environ["PATH"] == str(another.parent) and shutil.which("ninja") == str(another)


def test_an_unset_path_keeps_the_systems_default_after_the_own_ninja(tmp_path, monkeypatch):
    from grpoflow.models import engine

    own = _ninja(tmp_path / "venv" / "bin")
    monkeypatch.setattr(engine.sys, "executable", str(own.parent / "python"))
    monkeypatch.delenv("PATH")
    engine.use_own_ninja()
    assert os.environ["PATH"] == os.pathsep.join([str(own.parent), os.defpath])


def test_an_interpreter_of_unknown_place_changes_nothing(tmp_path, monkeypatch):
    from grpoflow.models import engine

    _ninja(tmp_path)
    monkeypatch.chdir(tmp_path)  # a relative "ninja" would be this folder's
    monkeypatch.setattr(engine.sys, "executable", "")
    monkeypatch.setenv("PATH", "/nonexistent")
    engine.use_own_ninja()
    assert os.environ["PATH"] == "/nonexistent"
