"""This side of one sandbox (:mod:`verifiers.sandbox`): the payload goes into its pipes, the verdicts and
the code's output come out of them, and :class:`Result` is what one check found."""

from __future__ import annotations

import logging
import os
import select
import time
from dataclasses import dataclass, field

from verifiers.limits import Limits
from verifiers.sandbox_runtime import TAIL_BYTES, write_payload

log = logging.getLogger("verifiers.sandbox")  # the sandbox's own logger, as before the split


@dataclass
class Result:
    """The outcome of one check: a verdict per test, and what went wrong if anything did."""

    passed: list[bool]
    timed_out: bool = False  # killed at the wall-clock limit; the CPU rlimit ends the code's process instead
    exit_code: int | None = None  # the judge's: 0 when it finished, -9 when killed at the wall limit
    sandboxed: bool = True
    stderr_tail: str = ""  # the end of the code's stdout and stderr together
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)  # milliseconds per phase

    @property
    def fraction(self) -> float:
        """Share of tests passed."""
        return sum(self.passed) / len(self.passed) if self.passed else 0.0


class _Pipes:
    """This side of one sandbox: the payload goes in, verdicts and the code's output come out.

    Each payload is length-prefixed, and the judge and the candidate read exactly that much: closing the write
    ends is not what ends their input, so a child that this (multi-threaded) process forks while it holds them
    (``fork`` keeps close-on-exec descriptors) cannot stall a check. The output is read as it comes (so the
    code never blocks on a full pipe) and only up to the cap: beyond it the pipe is closed, and the code's
    further writes fail instead of filling anyone's memory.
    """

    def __init__(self, fds: list[int]) -> None:
        self.tests_w, self.code_w, self.verdict_r, self.out_r = fds
        self.verdicts = b""
        self.output = b""
        self.output_seen = 0
        self.truncated = False
        self.notes: list[str] = []

    def feed(self, tests: bytes, code: bytes) -> None:
        """The tests to the judge first (it never runs completion code), then the code to the candidate."""
        for attr, data in (("tests_w", tests), ("code_w", code)):
            try:
                write_payload(getattr(self, attr), data)
            except BrokenPipeError:
                self.notes.append("sandbox: a sandboxed process died before reading its input")
            finally:
                self._close(attr)

    def collect(self, deadline: float, cap: int) -> bool:
        """Read verdicts until the judge's pipe closes, and the output as it comes; False at the deadline."""
        poller = select.poll()
        poller.register(self.verdict_r, select.POLLIN)
        poller.register(self.out_r, select.POLLIN)
        while (left := deadline - time.monotonic()) > 0:
            for fd, _ in poller.poll(left * 1000):
                if fd == self.verdict_r:
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        return True
                    self.verdicts += chunk
                elif not self._take_output(os.read(fd, 65536), cap):
                    poller.unregister(fd)
        return False

    def drain(self, cap: int) -> None:
        """Whatever is left in the pipes once the judge is reaped, without waiting for more (without a PID
        namespace an escaped process may still hold the output open)."""
        for attr in ("verdict_r", "out_r"):
            fd = getattr(self, attr)
            if fd < 0:
                continue
            os.set_blocking(fd, False)
            try:
                while chunk := os.read(fd, 65536):
                    if attr == "verdict_r":
                        self.verdicts += chunk
                    elif not self._take_output(chunk, cap):
                        break
            except BlockingIOError:
                pass

    def _take_output(self, chunk: bytes, cap: int) -> bool:
        """Keep the tail of the output; False (and the pipe closed) at EOF or past the cap."""
        self.output_seen += len(chunk)
        self.output = (self.output + chunk)[-TAIL_BYTES:]
        if chunk and self.output_seen <= cap:
            return True
        self.truncated = self.truncated or bool(chunk)
        self._close("out_r")
        return False

    def result(
        self, n_tests: int, outcome: dict, isolate: bool, limits: Limits, stamps: tuple[float, float, float]
    ) -> Result:
        """The verdict lines (``P i``, ``F i Type``, notes, timings, ``D`` when done) and the supervisor's outcome."""
        passed = [False] * n_tests
        notes, error, finished = list(self.notes), "", False
        timings = dict(outcome.get("timings", {}))
        for line in self.verdicts.decode("utf-8", "replace").splitlines():
            kind, _, rest = line.partition(" ")
            index = rest.split(" ")[0]
            if kind in ("P", "F") and index.isdigit() and int(index) < n_tests:
                passed[int(index)] = kind == "P"
            elif kind == "N" and len(notes) < 20:
                notes.append(rest)
            elif kind == "E":
                error = rest
            elif kind == "T" and rest.count(" ") == 1:
                timings[index] = float(rest.split(" ")[1])
            finished = finished or kind == "D"
        if self.truncated:
            notes.append(f"output beyond {limits.max_output_kb} KiB was not read (the stream was closed)")
        if not finished and not outcome["timed_out"]:
            notes.append("the judge did not finish (killed or crashed)")
        if error:
            log.warning("sandbox: %s", error)
            notes.insert(0, f"sandbox error: {error}")
        return Result(
            passed,
            bool(outcome["timed_out"]),
            outcome["exit_code"],
            isolate,
            self.output.decode("utf-8", "replace"),
            notes,
            _phases(timings, *stamps),
        )

    def _close(self, attr: str) -> None:
        fd = getattr(self, attr)
        if fd >= 0:
            os.close(fd)
            setattr(self, attr, -1)

    def close(self) -> None:
        for attr in ("tests_w", "code_w", "verdict_r", "out_r"):
            self._close(attr)


def _phases(t: dict[str, float], created: float, sent: float, finished: float) -> dict[str, float]:
    """Milliseconds per phase from the processes' CLOCK_MONOTONIC stamps (one clock for the whole machine).

    Set-up phases (the judge's fork, its namespaces, the candidate) may come before this check was even
    asked for: in a batch the supervisor sets up the next sandbox while the current one runs. ``waiting`` is
    how long this side waited for a ready sandbox, and ``latency`` counts from the payload's start (``sent``).
    """
    marks = [
        ("fork_judge", t.get("started"), t.get("forked")),
        ("namespaces", t.get("forked"), t.get("namespaces")),
        ("candidate", t.get("namespaces", t.get("forked")), t.get("ready")),
        ("waiting", created, sent),
        ("load", max(sent, t.get("ready", sent)), t.get("loaded")),
        ("tests", t.get("loaded"), t.get("tests")),
        ("teardown", t.get("tests"), t.get("reaped")),
        ("reply", t.get("reaped"), finished),
        ("latency", sent, finished),
    ]
    return {name: round((b - a) * 1000, 3) for name, a, b in marks if a is not None and b is not None}
