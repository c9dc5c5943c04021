"""Every cross-reference resolves, and the stage tables name the paths the stages write.

A reference is ``see <doc>, "<Section>"`` (or ``README "<Section>"``, several sections joined by
``/``) in the README, docs/, params/, flows/ and tasks/, or a markdown link with an ``#anchor``; it
must name an existing file and one of its headings.
"""

import re
from pathlib import Path

import pytest

from flows.run_report import STAGE_LOGS
from tasks.stages import STAGES

REPO = Path(__file__).resolve().parents[2]
SOURCES = [
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    *sorted((REPO / "params").glob("*.yaml")),
    *sorted((REPO / "flows").glob("*.py")),
    *sorted((REPO / "tasks").glob("*.py")),
]
DOC = r"(?:the )?(README(?:\.md)?|(?:docs/)?[\w-]+\.md)"
QUOTED = r"[\"“]([^\"”]+)[\"”]"
REFERENCE = re.compile(rf"{DOC},? ({QUOTED}(?:\s*/\s*{QUOTED})*)")


def _flat(text: str) -> str:
    """The text with line breaks and comment markers (``#`` in YAML and Python) read as spaces."""
    return re.sub(r"\s*\n\s*(?:#(?!#)\s*)?", " ", text)


def _heading_text(line: str) -> str:
    return re.sub(r"[`*_]", "", line.lstrip("#").strip())


def headings(doc: Path) -> list[str]:
    """The headings of a markdown file, as plain text (code fences skipped)."""
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
    return [_heading_text(line) for line in text.splitlines() if re.match(r"#{1,6} ", line)]


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def _target(source: Path, name: str) -> Path:
    name = "README.md" if name.startswith("README") else name
    for base in (source.parent, REPO, REPO / "docs"):
        if (base / name).is_file():
            return base / name
    raise AssertionError(f"{source.relative_to(REPO)} refers to {name}, which does not exist")


def references(source: Path) -> list[tuple[str, str]]:
    """The (document, section) pairs ``source`` refers to."""
    found = []
    for match in REFERENCE.finditer(_flat(source.read_text())):
        found += [(match.group(1), s) for s in re.findall(QUOTED, match.group(2))]
    return found


def test_the_reference_pattern_reads_the_forms_in_use():
    text = 'a (see README, "Scheduled runs" / "On GPUs").\n# see docs/stages.md,\n# "prepare: x" and README "A b"'
    path = REPO / "tests" / "reference_probe.md"
    try:
        path.write_text(text)
        assert references(path) == [
            ("README", "Scheduled runs"),
            ("README", "On GPUs"),
            ("docs/stages.md", "prepare: x"),
            ("README", "A b"),
        ]
    finally:
        path.unlink()


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_section_reference_names_an_existing_section(source):
    for name, section in references(source):
        target = _target(source, name)
        assert section in headings(target), f'{source.relative_to(REPO)}: "{section}" is no heading of {target.name}'


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_docs_path_named_exists(source):
    for name in re.findall(r"\bdocs/[\w-]+\.md\b", source.read_text()):
        assert (REPO / name).is_file(), f"{source.relative_to(REPO)} names {name}, which does not exist"


@pytest.mark.parametrize("doc", [REPO / "README.md", *(REPO / "docs").glob("*.md")], ids=lambda p: p.name)
def test_every_link_anchor_is_a_heading_of_its_target(doc):
    for target, fragment in re.findall(r"\]\(([^)#:\s]*)#([^)\s]+)\)", doc.read_text()):
        path = (doc.parent / target) if target else doc
        assert path.is_file(), f"{doc.name} links to {target}, which does not exist"
        assert fragment in {anchor(h) for h in headings(path)}, f"{doc.name}: no heading #{fragment} in {path.name}"


def _stage_table(doc: Path) -> dict[str, str]:
    rows = re.findall(r"^\| `(\w+)` \| [^|]* \| ([^|]*) \|$", doc.read_text(), flags=re.M)
    return dict(rows)


def _expand(path: str) -> list[str]:
    """``a/{b,c}.jsonl`` as ``a/b.jsonl`` and ``a/c.jsonl``."""
    m = re.search(r"\{([^}]*)\}", path)
    return [path[: m.start()] + part + path[m.end() :] for part in m.group(1).split(",")] if m else [path]


@pytest.mark.parametrize("doc", [REPO / "README.md", REPO / "docs" / "stages.md"], ids=lambda p: p.name)
def test_the_stage_table_lists_every_stage_and_the_paths_it_writes(doc):
    table = _stage_table(doc)
    assert list(table) == [s.name for s in STAGES]
    for s in STAGES:
        outputs = re.sub(r"\([^)]*\)", "", table[s.name])  # notes in brackets name files inside an output
        for named in re.findall(r"`([^`]+)`", outputs):
            for path in _expand(named):
                assert any(path == out or path.startswith(out.rstrip("/") + "/") for out in s.outs), (
                    f"{doc.name}: {s.name} writes no {path} (its outputs: {s.outs})"
                )


# Written outside the stages: the input folder, the flow's run record, page and stage logs, `make bench`'s and
# `make gpu-check`'s outputs, `make tune`'s report.
NOT_A_STAGE_OUTPUT = [
    "data/raw",
    "metrics/run.json",
    "reports/run.html",
    "metrics/bench.json",
    "metrics/gpu_check.json",
    "metrics/gpu_check_logs",
    str(STAGE_LOGS),
    "reports/tune.md",
]


@pytest.mark.parametrize("doc", [REPO / "README.md", *(REPO / "docs").glob("*.md")], ids=lambda p: p.name)
def test_every_output_path_the_docs_name_is_one_a_stage_writes(doc):
    from tasks.stages import ablation_stages

    written = [o for s in STAGES + ablation_stages(["ARM"], [0]) for o in s.outs] + NOT_A_STAGE_OUTPUT
    arms = [re.sub(r"ARM-s0", "<arm>-s<seed>", o) for o in written]
    for named in re.findall(r"`((?:data|models|metrics|reports|checkpoints)/[^`\s]*)`", doc.read_text()):
        for path in _expand(named):
            bare = path.rstrip("/")
            assert any(bare == o or bare.startswith(o + "/") or o.startswith(bare + "/") for o in written + arms), (
                f"{doc.name} names {path}, which no stage writes"
            )
