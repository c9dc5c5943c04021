"""A page as a person sees it: Debian's headless Chromium loads it, and a script added to a copy
reports what rendered (each image's load, the headline's text and size)."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

# Without the background-networking flags, Chromium tries Google's hosts at every start, and this
# machine's closed network refuses them; --no-sandbox because tests may run as root.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PROBE = """<script>
addEventListener("load", () => {
  const images = [...document.images].map(i => ({alt: i.alt, loaded: i.complete && i.naturalWidth > 0}));
  const head = document.querySelector(".headline");
  const links = [...document.links].map(a => ({text: a.innerText, href: a.href}));
  const shown = Object.fromEntries([...document.querySelectorAll("[id]")]
    .filter(e => e.getBoundingClientRect().height > 0).map(e => [e.id, e.innerText]));
  const headings = [...document.querySelectorAll("h2")].map(h => h.innerText);
  const out = document.createElement("pre"); out.id = "grpoflow-probe";
  out.textContent = JSON.stringify({images, headline: head ? head.innerText : null,
                                    headline_height: head ? head.getBoundingClientRect().height : 0,
                                    links, shown, headings});
  document.body.appendChild(out);
});
</script>"""


def chromium() -> str:
    """Chromium's path: found, or installed from Debian's packages; the test is skipped, saying
    why, only where neither works."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        pytest.skip("headless Chromium is needed: install Debian's `chromium` package (no apt-get as root here)")
    out = subprocess.run(
        ["apt-get", "install", "-y", "-q", "chromium"],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )
    found = shutil.which("chromium")
    if not found:
        pytest.skip(f"headless Chromium is needed and `apt-get install chromium` failed: {out.stderr[-500:]}")
    return found


def rendered(page: Path) -> dict:
    """What Chromium rendered of ``page``: ``images`` (alt, loaded), ``headline`` (its visible
    text), ``headline_height`` (pixels), ``links`` (text, href), ``shown`` (the visible text of
    each element with an id, by id) and ``headings`` (each section's title)."""
    with tempfile.TemporaryDirectory() as tmp:
        probed = Path(tmp) / page.name
        probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
        out = subprocess.run(
            [
                chromium(),
                *FLAGS,
                f"--user-data-dir={tmp}/profile",
                "--virtual-time-budget=10000",
                "--dump-dom",
                probed.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    found = re.search(r'<pre id="grpoflow-probe">(.*?)</pre>', out.stdout, re.S)
    assert found, f"Chromium rendered no probe result (exit {out.returncode}): {out.stderr[-1000:]}"
    return json.loads(html.unescape(found.group(1)))


def screenshot(url: str, out: Path, width: int = 1400, height: int = 1000, wait_ms: int = 15000) -> Path:
    """A PNG of ``url`` as Chromium draws it at ``width`` x ``height``, after ``wait_ms`` of the
    page's own time (a single-page app fetches and renders in it)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [
                chromium(),
                *FLAGS,
                f"--user-data-dir={tmp}/profile",
                f"--window-size={width},{height}",
                f"--virtual-time-budget={wait_ms}",
                "--hide-scrollbars",
                f"--screenshot={out}",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert out.is_file(), f"Chromium took no screenshot of {url} (exit {done.returncode}): {done.stderr[-1000:]}"
    return out


def _text_of(dom: str) -> str:
    """The words of a dumped DOM: styles, scripts and drawings left out, whitespace collapsed."""
    dom = re.sub(r"<(style|script|svg)\b.*?</\1>", " ", dom, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", dom))).strip()


def visible_text(url: str, until: list[str], wait_ms: int = 20000, tries: int = 4, height: int | None = None) -> str:
    """The text of ``url`` (a single-page app) once Chromium has rendered it for ``wait_ms`` of
    the page's own time: a fetch in flight holds that clock, so a slow server only makes it take
    longer. Rendered again, up to ``tries`` times, each with four times the page's time, while any of
    ``until`` is missing; the last text either way. A busy CPU spends the page's time faster than the
    page renders: Chromium moves that clock on when tasks queue too long, so the MLflow UI's charts,
    drawn after 20 s of its time on an idle machine, needed 60 to 120 s of it with 8 busy processes
    on 2 cores (2026-12-06), in 6 to 8 s of real time either way. A window ``height``
    pixels tall (None: Chromium's own): what an app draws only once scrolled into view is drawn in a taller one."""
    text = ""
    for attempt in range(tries):
        with tempfile.TemporaryDirectory() as tmp:
            out = subprocess.run(
                [
                    chromium(),
                    *FLAGS,
                    f"--user-data-dir={tmp}/profile",
                    f"--virtual-time-budget={wait_ms * 4**attempt}",
                    *([f"--window-size=1280,{height}"] if height else []),
                    "--dump-dom",
                    url,
                ],
                capture_output=True,
                text=True,
                timeout=300,
            )
        text = _text_of(out.stdout)
        if all(s in text for s in until):
            break
    return text


@contextmanager
def mlflow_ui(store: Path, port: int) -> Iterator[str]:
    """The MLflow UI over the SQLite ``store``, as `make ui` serves it (flows.ui), on ``port``;
    its base URL. Stopped on leaving."""
    from flows.ui import ui_command

    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
    # A session of its own: stopping it stops the server process `mlflow ui` starts, too.
    proc = subprocess.Popen(
        ui_command(port, store.resolve()),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300  # a start on a loaded machine: generous, and no assertion on it
        while True:
            try:
                urllib.request.urlopen(f"{base}/health", timeout=5)
                # Answered by this server, not by another one on the port (whose bind ours then lost).
                if proc.poll() is not None:
                    raise RuntimeError(f"the MLflow UI exited (exit {proc.poll()}): port {port} is another's")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the MLflow UI did not start (exit {proc.poll()})") from None
                time.sleep(0.5)
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
