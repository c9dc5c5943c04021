"""A training stage's console: a live progress bar in a terminal, one line per step in a log (the
flow, DVC, CI), where a bar's redraws would be noise."""

from __future__ import annotations

import sys
from typing import Any


class StepConsole:
    """Progress of ``total`` steps, ``done`` of them already (a resumed run)."""

    def __init__(self, name: str, total: int, done: int = 0, live: bool | None = None):
        live = sys.stdout.isatty() if live is None else live
        self.bar: Any = None
        if live:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=done, desc=name, unit="step", dynamic_ncols=True, file=sys.stdout)

    def step(self, line: str, postfix: dict[str, float]) -> None:
        """One step done: the bar moves and shows ``postfix``, or ``line`` is printed."""
        if self.bar is None:
            print(line, flush=True)
            return
        self.bar.set_postfix({k: f"{v:.3g}" for k, v in postfix.items()}, refresh=False)
        self.bar.update(1)

    def say(self, text: str) -> None:
        """A message (health, checkpoints) that must not break the bar."""
        if self.bar is None:
            print(text, flush=True)
        else:
            self.bar.write(text, file=sys.stdout)

    def close(self) -> None:
        """End the bar, leaving its last state on screen."""
        if self.bar is not None:
            self.bar.close()
