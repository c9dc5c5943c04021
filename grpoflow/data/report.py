"""The prepare stage's human-readable report: gate verdicts, counts, the first quarantined rows, the
worst leaks side by side."""

from __future__ import annotations

from grpoflow.data.prepare import Prepared

QUARANTINE_SHOWN = 5  # quarantined rows shown in the report: enough to see the pattern, short on a terminal


def _cell(text: str, width: int = 160) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= width else text[: width - 1] + "…"


def _code(text: str) -> str:
    """An id as inline code that a ``|`` or backtick in it cannot break out of."""
    return "`" + _cell(text, 80).replace("`", "'") + "`"


def _quarantine_lines(prepared: Prepared) -> list[str]:
    """The first quarantined rows with file, line and reason; all of them are in quarantine.jsonl."""
    if not prepared.quarantine:
        return []
    shown = prepared.quarantine[:QUARANTINE_SHOWN]
    more = len(prepared.quarantine) - len(shown)
    lines = ["", "## Quarantine", "", "| file | line | reason |", "|---|---|---|"]
    lines += [f"| {_code(q.source_file)} | {q.line if q.line is not None else ''} | {_cell(q.reason)} |" for q in shown]
    if more:
        lines += ["", f"… and {more} more; every row with its reason is in quarantine.jsonl."]
    return lines


def prepare_report(prepared: Prepared, examples: int = 10) -> str:
    """The prepare stage's markdown report: counts, gates, quarantine and the worst leaks side by side."""
    s = prepared.summary()
    verdict = "PASSED" if s["passed"] else "FAILED"
    lines = [f"# Data preparation: {verdict}", ""]
    lines += [f"- {f}" for f in s["failures"]]
    rows = s["rows"]
    lines += [
        "",
        f"Rows kept: {rows['kept']} (train {rows['train']}, val {rows['val']}, test {rows['test']}); "
        f"quarantined: {rows['quarantined']} {s['quarantine_reasons'] or ''}",
        f"Sources read: {s['sources']}; benchmarks: {s['benchmarks'] or 'none'}; licences: {s['licenses']}",
        *(
            [f"Preference pairs kept: {s['pairs']['kept']} (read: {s['pairs']['sources']})"]
            if s["pairs"]["sources"]
            else []
        ),
        *([f"Files read from installed packages: {s['resolved_files']}"] if s["resolved_files"] else []),
        *_quarantine_lines(prepared),
        "",
        "## Leakage",
        "",
        f"{s['leakage']['leaking_train_rows']} leaking train rows, {s['leakage']['leaking_pairs']} leaking pairs; "
        f"by kind {s['leakage']['by_kind'] or '{}'}, "
        f"by reference set {s['leakage']['by_reference_set'] or '{}'}.",
    ]
    worst = sorted(prepared.leaks, key=lambda f: ({"exact": 0, "ngram": 1, "near": 2}[f.leak.kind], -f.leak.score))
    if worst and examples:
        lines += ["", "| kind | score | train row | reference row |", "|---|---|---|---|"]
        for f in worst[:examples]:
            lines.append(
                f"| {f.leak.kind} | {f.leak.score:.2f} | {_code(f.train.id)}: {_cell(f.train.prompt)} "
                f"| {f.reference_set} {_code(f.reference.id)}: {_cell(f.reference.prompt)} |"
            )
    return "\n".join(lines) + "\n"
