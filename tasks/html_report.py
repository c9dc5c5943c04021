"""Self-contained HTML reports: one file, plots embedded as data URIs, no script and no external
asset, so that it renders the same in a browser, in MLflow's artifact viewer and from a copy."""

from __future__ import annotations

import base64
import html
from collections.abc import Iterable
from pathlib import Path
from typing import Any

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1100px; color: #1d2330; }
h1 { margin-bottom: .2rem; } h2 { margin-top: 2rem; border-bottom: 1px solid #dde; padding-bottom: .2rem; }
table { border-collapse: collapse; margin: .5rem 0; } td, th { border: 1px solid #ccd; padding: .25rem .6rem; }
th { background: #f2f4f8; text-align: left; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.headline { font-size: 1.15rem; background: #eef6ee; border-left: 4px solid #3a7; padding: .6rem 1rem; }
.bad { color: #b22; font-weight: 600; } .good { color: #272; font-weight: 600; } .muted { color: #667; }
img { max-width: 100%; }
"""


class Num(str):
    """A number already written out ("50.0% ± 6.2"): a table right-aligns it like a number."""


def percent(value: float | None, se: float | None = None) -> Num | None:
    """A share as a person reads it, with its standard error in points: "18.8% ± 1.2"."""
    if value is None:
        return None
    return Num(f"{value:.1%}" + (f" ± {100 * se:.1f}" if se is not None else ""))


def esc(value: Any) -> str:
    """``value`` as HTML text."""
    return html.escape(str(value))


def fmt(value: Any) -> str:
    """A number to four significant digits; anything else as it is (None as a dash)."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def table(rows: list[dict[str, Any]], columns: list[str] | None = None) -> str:
    """An HTML table of ``rows`` (dicts), numbers right-aligned."""
    columns = columns or (list(rows[0]) if rows else [])
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{esc(fmt(r.get(c)))}</td>'
            if isinstance(r.get(c), (int, float, Num)) and not isinstance(r.get(c), bool)
            else f"<td>{esc(fmt(r.get(c)))}</td>"
            for c in columns
        )
        + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def image(png: Path, alt: str) -> str:
    """``png`` embedded in the page."""
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{data}">'


def page(title: str, sections: Iterable[str]) -> str:
    """The whole document: ``title`` and the ``sections`` (HTML fragments) in order."""
    body = "\n".join(sections)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
        f"<style>{STYLE}</style></head>\n<body>\n<h1>{esc(title)}</h1>\n{body}\n</body></html>\n"
    )
