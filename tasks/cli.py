"""What every stage CLI shares: the argument parser and clear exits on bad configuration."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable

from grpoflow.config import ConfigError, Params, load_params
from grpoflow.guard import InputError, check_params_file
from grpoflow.numerics import pin_cpu_kernels
from tasks import events
from tasks.command import command_parser  # here too: the flows and stages build on it from tasks.cli
from tasks.stages import stage as declaration

# Exit codes the flow reads: neither is worth a retry, the same inputs give the same answer.
EXIT_BAD_INPUT = 2  # the configuration or data is wrong: fix it
EXIT_VERDICT = 3  # a gate said no (leakage, verifier gate), or training stopped with a diagnosis
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT): 128 + the signal's number, as a shell reports it


def add_overrides(parser: argparse.ArgumentParser, example: str = "rl.steps=20") -> None:
    """The flows' ``--set KEY=VALUE ...``: a run's overrides, validated against the schema later."""
    parser.add_argument(
        "--set",
        dest="overrides",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help=f"override a parameter for this run (validated), e.g. {example}",
    )


def stage_parser(stage: str, description: str, declared=None, module: str | None = None) -> argparse.ArgumentParser:
    """The stage's parser: ``--params`` and one option per path its declaration in tasks/stages.py
    names (``declared``, default the stage named ``stage``), with that path as the default (so
    dvc.yaml, the CLI and the flow agree). ``module``: the command's module, where it is not
    ``tasks.<stage>`` (the generic training CLI's)."""
    parser = command_parser(module or f"tasks.{stage}", description)
    parser.add_argument("--params", default="params/default.yaml", help="the parameter set (params/*.yaml)")
    for io in (declared or declaration(stage)).io:
        if io.flag is None:
            continue
        what = io.help.replace("%", "%%")  # argparse formats help strings with %
        if isinstance(io.path, str):
            parser.add_argument(f"--{io.flag}", default=io.path, help=f"{what} (default: {io.path})")
        else:
            parser.add_argument(
                f"--{io.flag}",
                nargs="+",
                default=list(io.path),
                metavar="NAME=PATH",
                help=f"{what} (default: {' '.join(io.path)})",
            )
    return parser


# A Ctrl-C that lands while a finalizer runs (a weakref callback, a __del__) raises its
# KeyboardInterrupt there, where Python prints it as "Exception ignored" with a traceback and goes on.
# So the signal is also recorded, and every stage's training loop (sft, reward_model, grpo and ppo)
# calls check_interrupted() at each step.
_INTERRUPTED = threading.Event()


def _on_sigint(signum, frame) -> None:
    _INTERRUPTED.set()
    raise KeyboardInterrupt


def _unraisable(unraisable) -> None:
    if isinstance(unraisable.exc_value, KeyboardInterrupt):  # swallowed; check_interrupted() raises it again
        return
    sys.__unraisablehook__(unraisable)


def catch_interrupts() -> None:
    """Record every Ctrl-C, also one a finalizer swallows, and keep that one off the console."""
    _INTERRUPTED.clear()
    signal.signal(signal.SIGINT, _on_sigint)
    sys.unraisablehook = _unraisable


def check_interrupted() -> None:
    """Raise KeyboardInterrupt if a Ctrl-C arrived, also one swallowed where it landed."""
    if _INTERRUPTED.is_set():
        raise KeyboardInterrupt


def run_stage_cli(parser: argparse.ArgumentParser, body: Callable[[argparse.Namespace, Params], None]) -> None:
    """Parse, validate params, run ``body``; a configuration error exits 2 and a Ctrl-C 130, each
    with one line (the flow shows the stage's output: a traceback there would bury the reason)."""
    args = parser.parse_args()
    try:
        check_params_file(args.params)  # DVC runs this command through a shell: a safe name, in the checkout
        params = load_params(args.params)
    except (ConfigError, InputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT) from None
    pin_cpu_kernels(params.experiment.cpu_kernels)  # before the stage imports torch (grpoflow/numerics.py)
    stage = parser.prog.rsplit(".", 1)[-1]
    events.emit(events.START, stage)
    code: int | str | None = 1
    catch_interrupts()
    try:
        body(args, params)
        code = 0
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut this short
        print(
            f"{parser.prog}: interrupted; stopped before the end (checkpoints already written are kept and "
            "resumed from)",
            file=sys.stderr,
            flush=True,
        )
        code = EXIT_INTERRUPTED
        raise SystemExit(EXIT_INTERRUPTED) from None
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
        raise
    finally:
        # A verdict may be one process's own (out of memory in its update): the flow hears it from any.
        events.emit(events.EXIT, stage, code=code, every_rank=code in (EXIT_BAD_INPUT, EXIT_VERDICT))


# A gated stage's report on the console: the flow streams a stage's output into its log, so a
# verdict must fit a screen; the whole report (every confusion, every leak) is in report.md.
MAX_REPORT_LINES = 24  # with the flow's few lines around it, a failed gate stays within about 30


def clipped_report(report: str, path: object, max_lines: int = MAX_REPORT_LINES) -> str:
    """``report`` without blank lines, cut to ``max_lines`` lines, the last saying where the rest is."""
    lines = [line for line in report.splitlines() if line.strip()]
    if len(lines) <= max_lines:
        return "\n".join(lines)
    kept = lines[: max_lines - 1]
    return "\n".join([*kept, f"… {len(lines) - len(kept)} more lines in {path}"])


def print_verdict(stage: str, report: str, path: object, passed: bool) -> None:
    """Print a gated stage's report once, clipped; when the gate failed, one line naming the full
    report (``path``), then exit with :data:`EXIT_VERDICT`."""
    print(clipped_report(report, path), flush=True)
    if not passed:
        print(f"{stage}: the gate failed; full report: {path}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_VERDICT)
