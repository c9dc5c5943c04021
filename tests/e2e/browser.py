"""A page as a person sees it: Debian's headless Chromium loads it, and a script added to a copy
reports what rendered (each image's load, the headline's text and size)."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import tempfile
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
  const out = document.createElement("pre"); out.id = "grpoflow-probe";
  out.textContent = JSON.stringify({images, headline: head ? head.innerText : null,
                                    headline_height: head ? head.getBoundingClientRect().height : 0});
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
    text) and ``headline_height`` (pixels)."""
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
