"""Bring up scheduled runs on one machine: a Prefect server on 127.0.0.1, the work pool named in
params, the ``gpu`` global concurrency limit, the deployments of ``prefect.yaml``, and a worker
that runs their flow runs in this checkout. ``make serve`` runs it; Ctrl-C stops all of it. A
scheduled run whose time passed while it was stopped is cancelled at the next start, not run late
(flows.missed_runs).

    python -m flows.serve --params params/default.yaml [--port 4200] [--gpu-slots 1]

On a cluster the same steps apply against the cluster's Prefect server, with
``--pool-type kubernetes`` (the pool then takes ``deploy/k8s/base-job-template.json``) and the
worker started where it can reach the cluster (see docs/operations.md, "Scheduled runs").

The flow CLIs (``python -m flows.pipeline``, ``flows.ablation``) without ``PREFECT_API_URL`` get a
temporary server from :func:`prefect_api` instead of Prefect's own ephemeral one: see there why.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from flows.missed_runs import cancel_missed
from grpoflow.config import ConfigError, load_params
from grpoflow.guard import InputError, check_params_file
from grpoflow.ports import free_port, port_taken

K8S_TEMPLATE = Path("deploy/k8s/base-job-template.json")
STATE_DIR = Path(".grpoflow")
# Prefect's own knob for how long to wait for a temporary server; ours honours it. Its default (20 s)
# is less than a cold start takes on a loaded 2-core machine (12 s idle, over 35 s beside 3 busy loops).
STARTUP_TIMEOUT_ENV = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
DEFAULT_STARTUP_TIMEOUT_S = 300.0
PARENT_ENV = "GRPOFLOW_TEMPORARY_SERVER_PARENT"
SQLITE_CONTENTION = (
    "on SQLite, Prefect's background tasks (run after every worker poll) write concurrently and one of them is "
    "retried; harmless here. A production server should use PostgreSQL (PREFECT_API_DATABASE_CONNECTION_URL)"
)


def prefect(*args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [sys.executable, "-m", "prefect", "--no-prompt", *args], env=env, capture_output=True, text=True
    )
    if check and out.returncode != 0:
        raise RuntimeError(f"prefect {' '.join(args)} failed (exit {out.returncode}):\n{out.stdout}{out.stderr}")
    return out


def wait_healthy(api_url: str, server: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the Prefect server exited with {server.returncode}; see {STATE_DIR / 'server.log'}")
        try:
            with urllib.request.urlopen(f"{api_url}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the Prefect server at {api_url} did not answer within {timeout_s:.0f} s")


def startup_timeout_s() -> float:
    """How long a temporary server may take to answer: Prefect's setting when the user set it."""
    return float(os.environ.get(STARTUP_TIMEOUT_ENV) or DEFAULT_STARTUP_TIMEOUT_S)


def _exit_with_parent(parent: int, poll_s: float = 1.0) -> None:
    """SIGTERM this process once ``parent`` is gone: a temporary server runs in its own session, so a
    SIGKILL of the flow's process group does not reach it, and it must not outlive its flow."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def temporary_app():
    """Uvicorn factory of the temporary server: Prefect's API as its ephemeral mode builds it (no UI,
    only the services one run needs), exiting with the process that started it."""
    from prefect.server.api.server import create_app

    if os.environ.get(PARENT_ENV):
        _exit_with_parent(int(os.environ[PARENT_ENV]))
    return create_app(ephemeral=True, final=True)


def _start_temporary(port: int) -> subprocess.Popen:
    env = {**os.environ, "PREFECT_UI_ENABLED": "false", PARENT_ENV: str(os.getpid())}
    env.pop("PREFECT_API_URL", None)
    cmd = [
        sys.executable,
        "-m",
        "uvicorn",
        "--app-dir",
        str(Path(__file__).resolve().parents[1]),
        "--factory",
        "flows.serve:temporary_app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "error",
        "--lifespan",
        "on",
    ]
    # Its own session: the terminal's Ctrl-C goes to the foreground process group, and the server must
    # outlive it long enough for the flow to record the crash (Prefect's ephemeral server dies with it,
    # and the flow then spends minutes retrying a server that is gone).
    return subprocess.Popen(cmd, env=env, start_new_session=True)


def _stop(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def temporary_server(timeout_s: float | None = None, attempts: int = 3) -> Iterator[str]:
    """A Prefect API server for this process alone, on a free local port; yields its API URL and
    stops it on exit. Uses the database of ``PREFECT_HOME``, as Prefect's ephemeral server does."""
    timeout_s = timeout_s or startup_timeout_s()
    print(
        f"starting Prefect's temporary API server (up to {timeout_s:.0f} s; set PREFECT_API_URL to use a running "
        "one)...",
        flush=True,
    )
    for attempt in range(1, attempts + 1):
        port = free_port()
        proc = _start_temporary(port)
        try:
            wait_healthy(f"http://127.0.0.1:{port}/api", proc, timeout_s)
            break
        except RuntimeError:
            exited = proc.poll() is not None  # e.g. another process took the port first: try another
            _stop(proc)
            if not exited or attempt == attempts:
                raise
        except BaseException:
            _stop(proc)
            raise
    try:
        yield f"http://127.0.0.1:{port}/api"
    finally:
        _stop(proc)


def _drain_prefect_clients(timeout_s: float = 10.0) -> None:
    """Send the logs and events this process still holds before its server goes away."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=timeout_s)
    EventsWorker.drain_all(timeout=timeout_s)


@contextlib.contextmanager
def prefect_api() -> Iterator[None]:
    """The Prefect API for a flow CLI: ``PREFECT_API_URL`` when set, else :func:`temporary_server`."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    if PREFECT_API_URL.value():
        yield
        return
    with temporary_server() as url, temporary_settings(updates={PREFECT_API_URL: url}):
        _TEMPORARY_URLS.add(url)
        try:
            yield
        finally:
            _drain_prefect_clients()
            _TEMPORARY_URLS.discard(url)


_TEMPORARY_URLS: set[str] = set()


def on_temporary_server() -> bool:
    """Whether this process talks to a temporary server of its own (:func:`prefect_api`): no other
    flow run shares it, so there is no GPU to share through it either."""
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value() in _TEMPORARY_URLS


class ServerLogWatch:
    """Server-side errors for the serve console: each distinct ERROR line and exception of the Prefect
    server's log once (the server logs the same failure on every cycle; all of it stays in the log)."""

    ERROR = re.compile(r"\|\s*(ERROR|CRITICAL)\s*\|\s*(.*)")

    def __init__(self, path: Path):
        self.path = path
        self.offset = path.stat().st_size if path.is_file() else 0
        self.partial = ""
        self.in_traceback = False
        self.seen: set[str] = set()
        self.hinted = False

    def poll(self) -> list[str]:
        """Messages for the lines the server wrote since the last call."""
        if not self.path.is_file():
            return []
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        self.offset += len(data)
        lines = (self.partial + data.decode("utf-8", errors="replace")).split("\n")
        self.partial = lines.pop()
        return self.feed(lines)

    def feed(self, lines: list[str]) -> list[str]:
        """Messages for these log lines (the end of a traceback is its exception line)."""
        out: list[str] = []
        for line in lines:
            message = self._message(line.rstrip())
            # Numbers differ between repeats, and so does their padding: the server right-aligns timings ("[     9ms]").
            key = re.sub(r"\s+", " ", re.sub(r"\d+", "N", message or ""))
            if message and key not in self.seen:
                self.seen.add(key)
                note = f" ({SQLITE_CONTENTION})" if "database is locked" in message else ""
                out.append(f"Prefect server: {message}{note}")
        if out and not self.hinted:
            self.hinted = True
            out.append(f"(each server error is shown once; all of them are in {self.path})")
        return out

    def _message(self, line: str) -> str | None:
        if line.startswith("Traceback (most recent call last)"):
            self.in_traceback = True
            return None
        if self.in_traceback:
            if not line or line[0].isspace():
                return None
            self.in_traceback = False
            return line[:300]
        m = self.ERROR.search(line)
        return f"ERROR {m[2][:300]}" if m else None


def deployment_params_problems(prefect_yaml: str | Path = "prefect.yaml") -> list[str]:
    """Each deployment of ``prefect_yaml`` whose ``params_file`` parameter is not a safe name inside
    the checkout (:func:`grpoflow.guard.check_params_file`): it reaches dvc.yaml's shell commands."""
    import yaml

    if not Path(prefect_yaml).is_file():  # `prefect deploy --all` reads the one here: none, nothing to deploy
        return []
    spec = yaml.safe_load(Path(prefect_yaml).read_text()) or {}  # the checkout's own file: its anchors are fine
    problems = []
    for deployment in spec.get("deployments") or []:
        name = (deployment.get("parameters") or {}).get("params_file")
        if name is None:
            continue
        try:
            check_params_file(str(name))
        except InputError as exc:
            problems.append(f"{prefect_yaml}: deployment {deployment.get('name')!r}: {exc}")
    return problems


def configure(env: dict[str, str], pool: str, pool_type: str, gpu_limit: str | None, gpu_slots: int) -> None:
    """Create (or update) the pool and the concurrency limit, then register prefect.yaml's deployments
    and cancel their scheduled runs missed while nothing served them (flows.missed_runs)."""
    template = ["--base-job-template", str(K8S_TEMPLATE)] if pool_type == "kubernetes" else []
    prefect("work-pool", "create", pool, "--type", pool_type, "--overwrite", *template, env=env)
    if gpu_limit:
        if prefect("gcl", "inspect", gpu_limit, env=env, check=False).returncode == 0:
            prefect("gcl", "update", gpu_limit, "--limit", str(gpu_slots), env=env)
        else:
            prefect("gcl", "create", gpu_limit, "--limit", str(gpu_slots), env=env)
    out = prefect("deploy", "--all", env=env)
    deployments = registered(out.stdout)
    print(f"deployments registered: {', '.join(deployments) or 'none'}", flush=True)
    try:
        missed = cancel_missed(env["PREFECT_API_URL"], deployments)
    except Exception as exc:  # any client error: the worker must not start on a backlog it was to skip
        raise RuntimeError(f"checking for scheduled runs missed while nothing served them failed: {exc!r}") from exc
    for deployment in missed:
        print(deployment.line(), flush=True)


def registered(deploy_output: str) -> list[str]:
    """The ``flow/deployment`` names ``prefect deploy`` registered, read from the run command it suggests
    for each (its boxed lines wrap with the terminal's width; these do not)."""
    return re.findall(r"prefect deployment run '([^']+)'", deploy_output)


def prefect_command() -> str:
    """How a user here runs this environment's ``prefect``: it is on PATH only where the venv is active."""
    cli = Path(sys.executable).parent / "prefect"
    try:
        return str(cli.relative_to(Path.cwd()))
    except ValueError:
        return str(cli)


def _parser() -> argparse.ArgumentParser:
    from tasks.cli import command_parser

    parser = command_parser("flows.serve", __doc__)
    parser.add_argument(
        "--params", default="params/default.yaml", help="the parameter set whose orchestration section names the pool"
    )
    parser.add_argument("--port", type=int, default=4200)
    parser.add_argument("--pool-type", default="process", choices=["process", "kubernetes"])
    parser.add_argument(
        "--gpu-slots", type=int, default=1, help="slots of the gpu concurrency limit (GPUs, or nodes, to share)"
    )
    parser.add_argument("--no-worker", action="store_true", help="set up only; start workers elsewhere")
    return parser


def _served_env(api_url: str, work_pool: str) -> dict[str, str]:
    """The server's and worker's environment: this API, no analytics, the pool and workspace the
    deployments name, and this interpreter's bin dir first on PATH (flow runs say ``python``)."""
    return {
        **os.environ,
        "PREFECT_API_URL": api_url,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "GRPOFLOW_WORK_POOL": work_pool,
        "GRPOFLOW_WORKSPACE": str(Path.cwd()),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }


def _start_worker(env: dict[str, str], pool: str, pool_type: str, api_url: str) -> subprocess.Popen:
    """A Prefect worker on ``pool``, and how to trigger a run for it."""
    cmd = [sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--type", pool_type]
    worker = subprocess.Popen(cmd, env=env)
    print(
        f"worker started on pool {pool}; trigger a run with:\n"
        f"  PREFECT_API_URL={api_url} {prefect_command()} deployment run grpoflow-pipeline/scheduled "
        f"-p 'overrides={{\"rl.steps\": 20}}'",
        flush=True,
    )
    return worker


def taken_port_error(port: int) -> str | None:
    """Why ``port`` cannot be served on, where something listens there already: a second server would exit
    at once, after the set-up had run against the one there. None where it is free."""
    if not port_taken(port):
        return None
    return (
        f"error: port {port} is taken: another `make serve`, or a Prefect server, may be running there "
        f"(http://127.0.0.1:{port}); stop it, or serve on another port: make serve SERVE_PORT={port + 100}"
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        orch = load_params(check_params_file(args.params)).orchestration
        if problems := deployment_params_problems():
            raise ConfigError("\n".join(problems))
    except (ConfigError, InputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if refusal := taken_port_error(args.port):
        print(refusal, file=sys.stderr)
        return 2
    api_url = f"http://127.0.0.1:{args.port}/api"
    env = _served_env(api_url, orch.work_pool)
    STATE_DIR.mkdir(exist_ok=True)
    children: list[subprocess.Popen] = []

    def stop(*_, code: int = 0):
        for child in reversed(children):
            child.terminate()
        for child in reversed(children):
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
        sys.exit(code)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    watch = ServerLogWatch(STATE_DIR / "server.log")
    with open(STATE_DIR / "server.log", "a") as server_log:
        children.append(
            subprocess.Popen(
                [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(args.port)],
                env=env,
                stdout=server_log,
                stderr=subprocess.STDOUT,
            )
        )
    try:
        wait_healthy(api_url, children[0], startup_timeout_s())
        configure(env, orch.work_pool, args.pool_type, orch.gpu_concurrency_limit, args.gpu_slots)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        stop(code=1)
    print(f"Prefect UI: http://127.0.0.1:{args.port}  (PREFECT_API_URL={api_url})", flush=True)
    if args.no_worker:
        print("set up; the server keeps running until Ctrl-C", flush=True)
    else:
        children.append(_start_worker(env, orch.work_pool, args.pool_type, api_url))
    while all(child.poll() is None for child in children):
        for message in watch.poll():
            print(message, file=sys.stderr, flush=True)
        time.sleep(1)
    print("a served process exited; stopping", file=sys.stderr)
    stop(code=1)
    return 1


if __name__ == "__main__":
    sys.exit(main())
