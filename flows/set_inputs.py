"""What a parameter set needs from outside the code, looked for before any stage starts: its model
(there, with a chat template where its prompt needs one) and its data files. A stage would find out
only minutes later (the model is first loaded by sft), or after DVC deleted its last outputs (a data
file, read by prepare)."""

from __future__ import annotations

from pathlib import Path

from grpoflow.config import Params
from grpoflow.models.model_source import has_chat_template, model_unavailable


def model_problem(params: Params) -> str | None:
    """Why the set's model cannot serve it, where that is known without loading it: a missing model
    or GGUF file, a chat prompt for a tokenizer without a chat template."""
    name = params.model.name_or_path
    if name and (problem := model_unavailable(name)):
        return f"model.name_or_path: {problem}"
    if params.prompt.style == "chat" and (name is None or has_chat_template(name) is False):
        return (
            "prompt.style is 'chat' but the model's tokenizer has no chat template "
            f"({name or 'the tiny model trained here'}): use prompt.style: plain"
        )
    return None


def missing_inputs(params: Params, params_file: str) -> list[str]:
    """Each data file the set names (sources, pairs and benchmarks of kind ``file``) that is not there."""
    from grpoflow.data.prepare import source_path

    problems = []
    data = params.data
    for key, sources in (
        ("data.sources", data.sources),
        ("data.pairs", data.pairs),
        ("data.benchmarks", data.benchmarks),
    ):
        for index, source in enumerate(sources):
            if source.kind != "file":
                continue
            try:
                found = source_path(source, Path.cwd()).is_file()
            except FileNotFoundError as exc:  # a package that is not installed, or lacks the file
                problems.append(f"{params_file}: {key}[{index}].path: {exc}")
                continue
            if not found:
                problems.append(
                    f"{params_file}: {key}[{index}].path: data file {source.path!r} does not exist "
                    f"(relative paths are read from {Path.cwd()})"
                )
    return problems
