"""Checkpoints against damaged or hostile manifests, runs of other inputs sharing a directory,
processes that must agree on the step, and RNG files that must not run code. A small stand-in
writes and reads real files where a DeepSpeed engine would (the e2e suite uses the real one)."""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from grpoflow.io import sha256_file
from grpoflow.models import checkpoint, checkpoint_layout
from grpoflow.rl import loop_state
from grpoflow.rl.loop_state import LoopState

ROOT = Path(__file__).resolve().parents[2]
F, G = "f00000000000000f", "9000000000000009"


class FakeEngine:
    """Stands in for a DeepSpeed engine: its weight and optimizer state live in real files."""

    def __init__(self, weight: float = 0.0):
        self.weight = weight
        self.module = torch.nn.Linear(1, 1)  # every weight trains, as in a full fine-tune

    def save_checkpoint(self, save_dir, tag, client_state=None, save_latest=False, exclude_frozen_parameters=False):
        folder = Path(save_dir) / tag
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "mp_rank_00_model_states.pt").write_text(json.dumps({"weight": self.weight, "client": client_state}))
        (folder / "zero_pp_rank_0_mp_rank_00_optim_states.pt").write_text(f"optimizer of {self.weight}")

    def load_checkpoint(self, load_dir, tag, load_module_strict=True):
        states = Path(load_dir) / tag / "mp_rank_00_model_states.pt"
        if not states.is_file():
            return None, None
        data = json.loads(states.read_text())
        self.weight = data["weight"]
        return str(states.parent), data["client"] or {}


def save(directory: Path, fingerprint: str, *steps: int, keep: int = 2, **kw) -> None:
    """Checkpoints of ``steps`` as a run of ``fingerprint`` makes them; the weight is the step."""
    for step in steps:
        loop_state.save(
            FakeEngine(float(step)),
            directory,
            LoopState(step=step, beta=0.1),
            fingerprint,
            keep=keep,
            extra={"note": f"step {step}"},
            **kw,
        )


def resume(directory: Path, fingerprint: str, **kw) -> tuple[int | None, list[str]]:
    """The step a run of ``fingerprint`` resumes from (checked against the weight loaded), and what it skipped."""
    engine = FakeEngine(-1.0)
    resumed, skipped = loop_state.load(engine, directory, fingerprint, **kw)
    if resumed is None:
        assert engine.weight == -1.0
        return None, skipped
    assert engine.weight == resumed.state.step
    return resumed.state.step, skipped


def manifest_of(directory: Path, step: int) -> Path:
    return directory / f"step_{step:06d}" / "manifest.json"


def assert_latest_is_sound(directory: Path) -> None:
    """``latest`` is absent or names a checkpoint that exists, with its manifest."""
    step = checkpoint.latest_step(directory)
    assert (directory / "latest").exists() == (step is not None)
    if step is not None:
        assert manifest_of(directory, step).is_file()


@pytest.fixture
def ckpt(tmp_path) -> Path:
    return tmp_path / "ckpt"


def test_a_resumed_run_gets_back_its_loop_state_rng_and_extra(ckpt):
    random.seed(7)
    torch.manual_seed(7)
    save(ckpt, F, 2)
    expected_python, expected_torch = random.getstate(), torch.get_rng_state()
    engine = FakeEngine()
    resumed, skipped = loop_state.load(engine, ckpt, F)
    assert skipped == [] and engine.weight == 2.0
    assert (resumed.state.step, resumed.state.beta, resumed.extra) == (2, 0.1, {"note": "step 2"})
    assert resumed.state.rng["python"] == expected_python and torch.equal(resumed.state.rng["torch"], expected_torch)
    assert checkpoint.verify(ckpt, 2) is None


# ---------------------------------------------------------------- manifests


@pytest.mark.parametrize(
    "content, reason",
    [
        (b'{"step": 4}', "field 'files' is missing"),
        (b"[]", "expected a JSON object, found a list"),
        (b'{"step": 4, "files": []}', "field 'files' is missing or not an object"),
        (b"\xff\xfe{\x00", "is not UTF-8 text"),
        (b'{"step": 4, "fi', "is not valid JSON"),
        (b"[" * 100_000, "cannot be read (RecursionError)"),
        (b'{"step": 4, "files": {}}', "the manifest does not list step_000004/fingerprint.json"),
        (b'{"step": "4", "files": {}}', "field 'step' is '4', expected 4"),
        (b'{"step": 4, "files": {"step_000004/fingerprint.json": 5}}', "is not a sha256 hex digest"),
    ],
)
def test_a_damaged_manifest_falls_back_to_the_previous_checkpoint(ckpt, content, reason):
    save(ckpt, F, 2, 4)
    manifest_of(ckpt, 4).write_bytes(content)
    step, skipped = resume(ckpt, F)
    assert step == 2
    assert len(skipped) == 1 and skipped[0].startswith("step_000004: ") and reason in skipped[0]


def test_a_manifest_of_another_step_does_not_vouch_for_this_one(ckpt):
    save(ckpt, F, 2, 4)
    manifest_of(ckpt, 4).write_bytes(manifest_of(ckpt, 2).read_bytes())  # self-consistent, about step 2's files
    assert resume(ckpt, F) == (2, ["step_000004: " + f"{manifest_of(ckpt, 4)}: field 'step' is 2, expected 4"])


def test_a_manifest_must_list_every_file_and_the_model_states_of_each_engine(ckpt):
    save(ckpt, F, 4, extra_engines={"critic": FakeEngine(4.0)})
    finder = ckpt / "step_000004" / ".DS_Store"  # a Finder window on the folder is no damage
    finder.write_bytes(b"\x00")
    assert checkpoint.verify(ckpt, 4, engines=["critic"]) is None
    older = json.loads(manifest_of(ckpt, 4).read_text())  # nor is one an older save listed, since rewritten
    older["files"]["step_000004/.DS_Store"] = "0" * 64
    manifest_of(ckpt, 4).write_text(json.dumps(older))
    assert checkpoint.verify(ckpt, 4, engines=["critic"]) is None
    data = json.loads(manifest_of(ckpt, 4).read_text())
    optimizer = "step_000004/zero_pp_rank_0_mp_rank_00_optim_states.pt"
    del data["files"][optimizer]
    manifest_of(ckpt, 4).write_text(json.dumps(data))
    assert checkpoint.verify(ckpt, 4) == f"{optimizer} is not in the manifest"  # it would be loaded unverified
    for rel in [r for r in data["files"] if r.startswith("critic/")]:
        del data["files"][rel]
    manifest_of(ckpt, 4).write_text(json.dumps(data))
    problem = checkpoint.verify(ckpt, 4, engines=["critic"])
    assert problem == "the manifest lists no model states under critic/step_000004/"


def add_entry(ckpt: Path, step: int, rel: str, target: Path) -> None:
    """List ``rel`` in the manifest with the true digest of ``target``: consistent, but hostile."""
    data = json.loads(manifest_of(ckpt, step).read_text())
    data["files"][rel] = sha256_file(target)
    manifest_of(ckpt, step).write_text(json.dumps(data))


@pytest.mark.parametrize(
    "rel, reason",
    [
        ("../outside.txt", "is not a plain relative path"),
        ("step_000004/../../outside.txt", "is not a plain relative path"),
        ("/OUTSIDE", "is not a plain relative path"),
        ("step_000004/../../outside.pyc", "is not a plain relative path"),  # a name tools write is checked too
        ("step_000002/.DS_Store", "is outside checkpoint step_000004"),
        ("step_000002/mp_rank_00_model_states.pt", "is outside checkpoint step_000004"),
        ("notes.txt", "is outside checkpoint step_000004"),
    ],
)
def test_manifest_entries_must_stay_inside_the_checkpoint(ckpt, monkeypatch, rel, reason):
    save(ckpt, F, 2, 4)
    outside = ckpt.parent / "outside.txt"
    outside.write_text("not part of any checkpoint")
    (ckpt / "notes.txt").write_text("x")
    rel = rel.replace("/OUTSIDE", str(outside))
    target = (ckpt / rel) if not rel.startswith("/") else Path(rel)
    if not target.exists():  # the tool-written names: a file there, as a hostile manifest would have it
        target.write_text("x")
    add_entry(ckpt, 4, rel, target)
    hashed: list[Path] = []
    monkeypatch.setattr(checkpoint_layout, "sha256_file", lambda p: hashed.append(Path(p)) or sha256_file(p))
    step, skipped = resume(ckpt, F)
    assert step == 2 and reason in skipped[0] and repr(rel) in skipped[0]
    assert all(p.resolve() != outside.resolve() for p in hashed)


def test_a_symbolic_link_out_of_the_checkpoint_is_refused(ckpt):
    save(ckpt, F, 2, 4)
    outside = ckpt.parent / "outside.txt"
    outside.write_text("secret")
    (ckpt / "step_000004" / "link.pt").symlink_to(outside)
    add_entry(ckpt, 4, "step_000004/link.pt", outside)
    step, skipped = resume(ckpt, F)
    assert step == 2 and "'step_000004/link.pt' leads outside" in skipped[0]


# ---------------------------------------------------------------- other inputs in the same directory


def test_a_short_run_of_other_inputs_keeps_its_checkpoint_and_the_long_runs(ckpt):
    save(ckpt, G, 148, 150)  # the long run
    assert resume(ckpt, F) == (None, [])  # other params: starts over, as rl_stage does (load, then save)
    assert_latest_is_sound(ckpt)
    save(ckpt, F, 5)
    assert checkpoint.saved_steps(ckpt) == [5] and checkpoint.latest_step(ckpt) == 5
    assert checkpoint.saved_steps(ckpt / checkpoint.OTHER / G) == [150, 148]
    assert resume(ckpt, F) == (5, [])  # after Ctrl-C the re-run resumes its own step
    # Params changed back: the long run's checkpoints are resumable again, the short run's parked.
    assert resume(ckpt, G) == (150, [])
    assert checkpoint.saved_steps(ckpt) == [150, 148] and checkpoint.latest_step(ckpt) == 150
    assert checkpoint.saved_steps(ckpt / checkpoint.OTHER / F) == [5]
    assert checkpoint.verify(ckpt, 150) is None


def test_a_save_without_a_load_first_parks_the_other_inputs_too(ckpt):
    save(ckpt, G, 148, 150)
    save(ckpt, F, 5, keep=1)
    assert checkpoint.saved_steps(ckpt) == [5] and checkpoint.latest_step(ckpt) == 5
    assert checkpoint.saved_steps(ckpt / checkpoint.OTHER / G) == [150, 148]


def test_a_directory_mixing_inputs_resumes_the_newest_of_these_inputs(ckpt, tmp_path):
    save(ckpt, F, 4, 5)
    save(tmp_path / "g", G, 150)
    os.replace(tmp_path / "g" / "step_000150", ckpt / "step_000150")  # as older versions left it
    assert checkpoint.resume_point(ckpt, F) == (5, [])  # the decision alone: G's newer checkpoint passed over
    assert resume(ckpt, F) == (5, [])
    assert checkpoint.saved_steps(ckpt / checkpoint.OTHER / G) == [150]
    assert_latest_is_sound(ckpt)


def test_parked_sets_are_bounded_and_dropped_with_a_message(ckpt, caplog):
    caplog.set_level(logging.WARNING, logger="grpoflow.models.checkpoint")
    for i, fp in enumerate(["a1", "b2", "c3", "d4"]):
        save(ckpt, fp, 10 * i + 1, 10 * i + 2, 10 * i + 3, keep=2)
    other = ckpt / checkpoint.OTHER
    assert sorted(p.name for p in other.iterdir()) == ["b2", "c3"]
    assert checkpoint.saved_steps(ckpt) == [33, 32]
    all_steps = [p for p in ckpt.rglob("step_*") if p.is_dir()]
    assert len(all_steps) == (1 + checkpoint.KEEP_FINGERPRINTS) * 2
    assert any("deleted the checkpoints of fingerprint a1 (steps 2, 3)" in r.getMessage() for r in caplog.records)


def test_with_no_parked_sets_other_inputs_are_dropped_with_a_message(ckpt, caplog):
    caplog.set_level(logging.WARNING, logger="grpoflow.models.checkpoint")
    save(ckpt, G, 1, 2)
    save(ckpt, F, 1, keep_fingerprints=0)
    assert not (ckpt / checkpoint.OTHER).exists() and checkpoint.saved_steps(ckpt) == [1]
    assert any(f"fingerprint {G} (steps 1, 2)" in r.getMessage() for r in caplog.records)


def test_a_hostile_fingerprint_never_names_a_folder(ckpt, tmp_path):
    save(ckpt, F, 2, 4)
    (ckpt / "step_000004" / "fingerprint.json").write_text(json.dumps({"fingerprint": "../../escaped"}))
    step, skipped = resume(ckpt, F)
    assert step == 2 and "step_000004/fingerprint.json does not match its checksum" in skipped[0]
    assert not (tmp_path / "escaped").exists() and not (ckpt / checkpoint.OTHER).exists()


def test_resuming_past_a_damaged_checkpoint_replaces_it_and_latest_follows(ckpt):
    save(ckpt, F, 4, 6)
    states = ckpt / "step_000006" / "mp_rank_00_model_states.pt"
    states.write_text(states.read_text()[:10])
    step, skipped = resume(ckpt, F)
    assert step == 4 and skipped == ["step_000006: step_000006/mp_rank_00_model_states.pt does not match its checksum"]
    save(ckpt, F, 5)  # the damaged newer step belongs to the abandoned run: gone, not kept instead of step 4
    assert checkpoint.saved_steps(ckpt) == [5, 4] and checkpoint.latest_step(ckpt) == 5
    save(ckpt, F, 6)
    assert checkpoint.verify(ckpt, 6) is None and checkpoint.saved_steps(ckpt) == [6, 5]


def test_interrupted_saves_of_unknown_inputs_never_push_out_a_real_checkpoint(ckpt):
    for step in (1, 999):
        (ckpt / f"step_{step:06d}").mkdir(parents=True)
        (ckpt / f"step_{step:06d}" / "mp_rank_00_model_states.pt").write_text("half")
    save(ckpt, F, 2, 3, keep=1)
    assert checkpoint.saved_steps(ckpt) == [999, 3]  # the older debris is deleted, the newer is not ours to judge
    assert checkpoint.latest_step(ckpt) == 3
    assert resume(ckpt, F) == (3, ["step_000999: no manifest (the save was interrupted)"])


def test_latest_is_read_defensively(ckpt):
    ckpt.mkdir()
    for text in (b"step_abc", b"\xff", b"../step_000001", b"step_1"):
        (ckpt / "latest").write_bytes(text)
        assert checkpoint.latest_step(ckpt) is None


# ---------------------------------------------------------------- RNG files


class RunsCode:
    def __reduce__(self):
        return (Path.touch, (Path(os.environ["GRPOFLOW_TEST_MARKER"]),))


def test_an_rng_file_cannot_run_code(ckpt, tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    monkeypatch.setenv("GRPOFLOW_TEST_MARKER", str(marker))
    save(ckpt, F, 2)
    rng = ckpt / "step_000002" / "rng_rank0.pt"
    torch.save({"python": RunsCode(), "torch": torch.get_rng_state()}, rng)
    data = json.loads(manifest_of(ckpt, 2).read_text())
    data["files"]["step_000002/rng_rank0.pt"] = sha256_file(rng)  # consistent: only the content is hostile
    manifest_of(ckpt, 2).write_text(json.dumps(data))
    with pytest.raises(checkpoint.CheckpointError, match="rng_rank0.pt is not a plain RNG state"):
        loop_state.load(FakeEngine(), ckpt, F)
    assert not marker.exists()


def test_an_rng_file_of_the_wrong_shape_is_an_error_naming_it(ckpt):
    save(ckpt, F, 2)
    rng = ckpt / "step_000002" / "rng_rank0.pt"
    torch.save({"python": (3, (1, 2), None), "torch": torch.zeros(3, dtype=torch.uint8)}, rng)
    data = json.loads(manifest_of(ckpt, 2).read_text())
    data["files"]["step_000002/rng_rank0.pt"] = sha256_file(rng)
    manifest_of(ckpt, 2).write_text(json.dumps(data))
    with pytest.raises(checkpoint.CheckpointError, match=r"rng_rank0.pt: 'python' is not a random.getstate\(\) value"):
        loop_state.load(FakeEngine(), ckpt, F)


# ---------------------------------------------------------------- ranks agree


def test_on_one_process_agree_is_the_decision_itself():
    assert checkpoint.agree(lambda: (4, ["x"])) == (4, ["x"])


TWO_RANKS = """
import json, sys
from pathlib import Path
import torch.distributed as dist
sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
from test_checkpoint import FakeEngine, F
from grpoflow.models import checkpoint
from grpoflow.rl import loop_state
rank, tmp = int(sys.argv[1]), Path(sys.argv[2])
dist.init_process_group("gloo", init_method=f"file://{{tmp}}/rendezvous", rank=rank, world_size=2)
own = tmp / f"rank{{rank}}"  # each rank's own view of the disk: rank 1's step 4 is damaged
out = {{"choice": checkpoint.agree(lambda: checkpoint.resume_point(own, F))}}
engine = FakeEngine(-1.0)
try:
    resumed, _ = loop_state.load(engine, own, F)
    out["loaded"] = resumed.state.step
except checkpoint.CheckpointError as exc:
    out["error"] = str(exc)
shared, _ = loop_state.load(engine, tmp / "rank0", F)
out["shared"] = [shared.state.step, engine.weight]
(tmp / f"out{{rank}}.json").write_text(json.dumps(out))
dist.destroy_process_group()
"""


def test_two_gloo_processes_resume_the_step_rank_0_chose(tmp_path):
    for rank in (0, 1):
        save(tmp_path / f"rank{rank}", F, 2, 4)
    (tmp_path / "rank1" / "step_000004" / "mp_rank_00_model_states.pt").unlink()
    script = TWO_RANKS.format(root=str(ROOT), tests=str(Path(__file__).parent))
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), str(r), str(tmp_path)]) for r in (0, 1)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    outs = [json.loads((tmp_path / f"out{r}.json").read_text()) for r in (0, 1)]
    assert [o["choice"][0] for o in outs] == [4, 4]  # rank 1 alone would have chosen step 2
    assert "loaded" not in outs[0] and "loaded" not in outs[1]  # no rank resumes while another cannot
    assert all("rank 1: DeepSpeed could not load" in o["error"] for o in outs)
    assert [o["shared"] for o in outs] == [[4, 4.0], [4, 4.0]]


# ---------------------------------------------------------------- DeepSpeed's own files, with a real engine


def real_engine(zero_stage: int, weight: float, features: tuple[int, int] = (2, 1)):
    """A one-layer DeepSpeed engine on CPU after one optimizer step (ZeRO >= 1 writes optimizer files).
    ``features``: the layer's (in, out); ZeRO-3 partitions only parameters of 100,000 elements or
    more (DeepSpeed keeps smaller ones whole on every rank)."""
    from grpoflow.config import validate_params
    from grpoflow.models.engine import build_engine

    model = torch.nn.Linear(*features, bias=False)
    with torch.no_grad():
        model.weight.fill_(weight)
    cfg = validate_params({}).rl.engine.model_copy(update={"micro_batch_size": 1, "zero_stage": zero_stage})
    engine = build_engine(model, cfg, batch_size=1)
    step(engine)
    return engine


def step(engine) -> None:
    """One optimizer step on a batch of ones."""
    engine.backward(engine(torch.ones(1, engine.module.in_features)).sum())
    engine.step()


def rewrite_manifest(directory: Path, step: int, rel: str) -> None:
    """Record ``rel``'s new checksum: the manifest stays consistent, only the content is hostile."""
    data = json.loads(manifest_of(directory, step).read_text())
    data["files"][rel] = sha256_file(directory / rel)
    manifest_of(directory, step).write_text(json.dumps(data))


@pytest.mark.parametrize("zero_stage", [0, 1])
def test_a_real_deepspeed_checkpoint_resumes_with_every_file_read_weights_only(tmp_path, monkeypatch, zero_stage):
    saved = real_engine(zero_stage, 0.5)
    loop_state.save(saved, tmp_path, LoopState(step=1, beta=0.1), F)
    calls: list[object] = []
    real_load = torch.load

    def recording_load(*args, **kwargs):
        calls.append(kwargs.get("weights_only"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", recording_load)
    fresh = real_engine(zero_stage, -3.0)
    resumed, skipped = loop_state.load(fresh, tmp_path, F)
    assert resumed is not None and resumed.state.step == 1 and skipped == []
    assert torch.equal(fresh.module.weight, saved.module.weight)
    assert len(calls) >= 2 and all(flag is True for flag in calls)  # model states and RNG, optimizer at ZeRO 1
    assert not isinstance(fresh.checkpoint_engine, checkpoint.WeightsOnlyLoads)  # put back after the load


def test_a_planted_model_states_pickle_with_a_valid_manifest_is_refused_and_never_runs(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    monkeypatch.setenv("GRPOFLOW_TEST_MARKER", str(marker))
    ckpt = tmp_path / "ckpt"
    saved = real_engine(0, 0.5)
    loop_state.save(saved, ckpt, LoopState(step=1, beta=0.1), F)
    rel = "step_000001/mp_rank_00_model_states.pt"
    states = torch.load(ckpt / rel, weights_only=True)
    torch.save({**states, "planted": RunsCode()}, ckpt / rel)
    rewrite_manifest(ckpt, 1, rel)
    assert checkpoint.verify(ckpt, 1) is None  # every check of the files passes
    with pytest.raises(checkpoint.CheckpointError, match="passed its checks but cannot be resumed"):
        loop_state.load(real_engine(0, -3.0), ckpt, F)
    assert not marker.exists()


ZERO3_LAYER = (512, 256)  # 131,072 elements: partitioned


def test_a_zero3_checkpoint_resumes_bit_identically_weights_and_optimizer(tmp_path):
    from grpoflow.models.full_weights import full_state_dict

    saved = real_engine(3, 0.5, ZERO3_LAYER)
    loop_state.save(saved, tmp_path, LoopState(step=1, beta=0.1), F)
    fresh = real_engine(3, -3.0, ZERO3_LAYER)
    assert fresh.module.weight.numel() == 0  # partitioned: only the gathered weights say anything
    resumed, skipped = loop_state.load(fresh, tmp_path, F)
    assert resumed is not None and resumed.state.step == 1 and skipped == []
    want = full_state_dict(saved.module)["weight"]
    assert want.shape == (256, 512) and torch.equal(full_state_dict(fresh.module)["weight"], want)
    for engine in (saved, fresh):  # one more step each: Adam's moments came back too, not only the weights
        step(engine)
    after = full_state_dict(saved.module)["weight"]
    assert torch.equal(full_state_dict(fresh.module)["weight"], after) and not torch.equal(after, want)
