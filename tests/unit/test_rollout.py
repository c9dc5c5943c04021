"""The training loop's parts, on hand-made inputs."""

import copy

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpoflow.rollout import Sampling, completion_mask


def test_completion_mask_includes_eos_and_flags_truncation():
    ids = torch.tensor([[5, 6, 0, 9, 9], [5, 6, 7, 8, 4], [0, 9, 9, 9, 9]])
    mask, truncated = completion_mask(ids, 0)
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]
    assert truncated.tolist() == [False, True, False]


def _rollouts(prompt_width: int, texts: list[str]):
    from grpoflow.rollout import Rollouts

    n = len(texts)
    return Rollouts(
        torch.arange(n * prompt_width).view(n, prompt_width),
        torch.ones(n, prompt_width, dtype=torch.long),
        torch.full((n, 2), 7),
        torch.ones(n, 2, dtype=torch.long),
        texts,
        torch.zeros(n, dtype=torch.bool),
        1.5,
    )


def test_rollouts_of_different_prompt_widths_join_left_padded():
    from grpoflow.rollout import concat_rollouts

    a, b = _rollouts(1, ["a0", "a1"]), _rollouts(3, ["b0"])
    joined = concat_rollouts([a.select([1]), b], pad_id=0)
    assert joined.texts == ["a1", "b0"] and joined.seconds == 3.0
    assert joined.prompt_ids.tolist() == [[0, 0, 1], [0, 1, 2]]
    assert joined.prompt_mask.tolist() == [[0, 0, 1], [1, 1, 1]]
    assert joined.completion_ids.shape == (2, 2) and joined.sampler_logprobs is None


# --- HF rollouts: each prompt prefilled once, its KV cache expanded to its G samples ---------

WORDS = "Ann has 2 cats and 13 dogs . How many pets does she have ? Answer : #### 15".split()


@pytest.fixture(scope="module")
def tiny():
    from grpoflow.config import ModelConfig
    from grpoflow.models.modeling import build_tiny_model, train_tokenizer

    tok = train_tokenizer([" ".join(WORDS)] * 20, 160)
    return build_tiny_model(ModelConfig(), tok, seed=0), tok


def _prompts(lengths: list[int]) -> list[str]:
    return [" ".join(WORDS[i % 5 : i % 5 + k]) for i, k in enumerate(lengths)]


def _both(model, tok, prompts, n, sampling, batch_size=64):
    from grpoflow.rollout.hf import HFRolloutEngine

    old = HFRolloutEngine(model, tok, batch_size, share_prefill=False).generate(prompts, n, sampling, seed=0)
    new = HFRolloutEngine(model, tok, batch_size).generate(prompts, n, sampling, seed=0)
    return old, new


def _assert_same(old, new):
    assert torch.equal(new.prompt_ids, old.prompt_ids) and torch.equal(new.prompt_mask, old.prompt_mask)
    assert torch.equal(new.completion_ids, old.completion_ids)
    assert torch.equal(new.completion_mask, old.completion_mask) and torch.equal(new.truncated, old.truncated)
    assert new.texts == old.texts
    assert torch.allclose(new.sampler_logprobs, old.sampler_logprobs, atol=1e-5, rtol=0)


@pytest.mark.parametrize("n", [1, 3])
def test_shared_prefill_decodes_greedily_as_every_sample_prefilling_its_own_prompt(tiny, n):
    model, tok = tiny
    greedy = Sampling(temperature=0.0, max_new_tokens=12, logprobs=True)
    # prompts of different lengths (left padding), and a batch bound that splits a group
    old, new = _both(model, tok, _prompts([2, 9, 5, 1]), n, greedy, batch_size=5)
    assert new.completion_ids.shape == (4 * n, 12) and new.prompt_ids.shape[0] == 4 * n
    assert new.completion_mask.sum() > 4 * n  # more than a first token: the decode steps are compared too
    _assert_same(old, new)


def test_shared_prefill_runs_each_prompt_once_within_the_batch_bound(tiny):
    from grpoflow.rollout.hf import HFRolloutEngine

    model, tok = tiny
    prompts = _prompts([3, 8, 6])
    seen = []
    hook = model.get_input_embeddings().register_forward_hook(lambda m, args, out: seen.append(tuple(args[0].shape)))
    try:
        HFRolloutEngine(model, tok, batch_size=4).generate(prompts, 2, Sampling(0.0, 1.0, 3), seed=0)
    finally:
        hook.remove()
    width = tok(prompts, padding=True, return_tensors="pt")["input_ids"].shape[1]
    # batches of 4 samples = 2 prompts x 2, then 1 prompt x 2: the prefill once per prompt (which
    # gives the first token), then one token per sample per step for the other two
    assert seen == [(2, width), (4, 1), (4, 1), (1, width), (2, 1), (2, 1)]


def test_vllms_bar_passes_on_finished_samples_and_not_the_prompts_it_renders():
    # vLLM makes two bars of the class it is given: one it iterates over the prompts it renders (tqdm's
    # iteration calls update), one it updates by each finished request's samples (grpoflow.rollout.vllm_engine).
    from grpoflow.rollout.vllm_engine import _progress_bar

    heard: list[int] = []
    bar = _progress_bar(heard.append)
    for _ in bar(range(5), desc="Rendering prompts", mininterval=0, miniters=1):
        pass
    finished = bar(total=2, desc="Processed prompts")
    finished.update(3)
    finished.update(3)
    assert heard == [3, 3] and finished.n == 6


def test_the_engine_tells_its_listener_of_each_batch_of_samples_as_it_finishes(tiny):
    from grpoflow.rollout.hf import HFRolloutEngine

    model, tok = tiny
    engine, heard = HFRolloutEngine(model, tok, batch_size=4), []
    engine.progress = heard.append
    engine.generate(_prompts([3, 8, 6]), 3, Sampling(0.0, 1.0, 3), seed=0)
    assert heard == [4, 4, 1]  # 9 samples in batches of at most 4


def test_sampled_groups_differ_within_and_keep_the_layout(tiny):
    model, tok = tiny
    prompts = _prompts([2, 7])
    from grpoflow.rollout.hf import HFRolloutEngine

    ro = HFRolloutEngine(model, tok).generate(prompts, 3, Sampling(1.0, 1.0, 16, logprobs=True), seed=1)
    enc = tok(prompts, padding=True, padding_side="left", return_tensors="pt")
    assert torch.equal(ro.prompt_ids, enc["input_ids"].repeat_interleave(3, dim=0))
    assert torch.equal(ro.prompt_mask, enc["attention_mask"].repeat_interleave(3, dim=0))
    for g in range(2):
        rows = [ro.completion_ids[3 * g + i].tolist() for i in range(3)]
        assert len({tuple(r) for r in rows}) == 3  # the samples of a group are not one copy
    assert (ro.sampler_logprobs <= 0).all() and (ro.sampler_logprobs[ro.completion_mask == 0] == 0).all()
    again = HFRolloutEngine(model, tok).generate(prompts, 3, Sampling(1.0, 1.0, 16, logprobs=True), seed=1)
    assert torch.equal(again.completion_ids, ro.completion_ids)  # seeded


def test_shared_prefill_with_lora_adapters_matches(tiny):
    from grpoflow.config import LoraConfig
    from grpoflow.models.lora import add_adapters

    model, tok = tiny
    policy = add_adapters(copy.deepcopy(model), LoraConfig(rank=4, alpha=8, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():  # B starts at zero (adapters are a no-op): make them matter
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    old, new = _both(policy, tok, _prompts([4, 10]), 3, Sampling(0.0, 1.0, 8, logprobs=True))
    _assert_same(old, new)


def test_a_cache_that_cannot_be_expanded_falls_back_with_one_log_line(tiny, caplog, monkeypatch):
    from transformers import DynamicCache

    from grpoflow.rollout.hf import HFRolloutEngine

    model, tok = tiny

    def refuse(self, indices):
        raise NotImplementedError("no batch selection here")

    monkeypatch.setattr(DynamicCache, "batch_select_indices", refuse)
    engine = HFRolloutEngine(model, tok)
    greedy = Sampling(0.0, 1.0, 6, logprobs=True)
    with caplog.at_level("WARNING", logger="grpoflow.rollout.hf"):
        new = engine.generate(_prompts([3, 6]), 2, greedy, seed=0)
        engine.generate(_prompts([3, 6]), 2, greedy, seed=0)
    mine = [r.getMessage() for r in caplog.records if r.name == "grpoflow.rollout.hf"]
    assert len(mine) == 1 and "cannot be expanded" in mine[0] and not engine.share_prefill
    monkeypatch.undo()
    old = HFRolloutEngine(model, tok, share_prefill=False).generate(_prompts([3, 6]), 2, greedy, seed=0)
    _assert_same(old, new)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lengths=st.lists(st.integers(1, 12), min_size=1, max_size=4), n=st.integers(1, 4), batch=st.integers(1, 9))
def test_shared_prefill_matches_on_random_shapes(tiny, lengths, n, batch):
    model, tok = tiny
    old, new = _both(model, tok, _prompts(lengths), n, Sampling(0.0, 1.0, 5, logprobs=True), batch_size=batch)
    _assert_same(old, new)
