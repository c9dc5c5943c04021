"""Bring up scheduled runs on one machine: a Prefect server on 127.0.0.1, the work pool named in
params, the ``gpu`` global concurrency limit, the deployments of ``prefect.yaml``, and a worker
that runs their flow runs in this checkout. ``make serve`` runs it; Ctrl-C stops all of it.

    python -m flows.serve --params params/default.yaml [--port 4200] [--gpu-slots 1]

On a cluster the same steps apply against the cluster's Prefect server, with
``--pool-type kubernetes`` (the pool then takes ``deploy/k8s/base-job-template.json``) and the
worker started where it can reach the cluster (see the README, "Scheduled runs").
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from grpoflow.config import ConfigError, load_params

K8S_TEMPLATE = Path("deploy/k8s/base-job-template.json")
STATE_DIR = Path(".grpoflow")


def prefect(*args: str, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "prefect", "--no-prompt", *args], env=env, capture_output=True, text=True)
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


def configure(env: dict[str, str], pool: str, pool_type: str, gpu_limit: str | None, gpu_slots: int) -> None:
    """Create (or update) the pool and the concurrency limit, then register prefect.yaml's deployments."""
    template = ["--base-job-template", str(K8S_TEMPLATE)] if pool_type == "kubernetes" else []
    prefect("work-pool", "create", pool, "--type", pool_type, "--overwrite", *template, env=env)
    if gpu_limit:
        if prefect("gcl", "inspect", gpu_limit, env=env, check=False).returncode == 0:
            prefect("gcl", "update", gpu_limit, "--limit", str(gpu_slots), env=env)
        else:
            prefect("gcl", "create", gpu_limit, "--limit", str(gpu_slots), env=env)
    out = prefect("deploy", "--all", env=env)
    print(out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "deployments registered", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.serve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params", default="params/default.yaml", help="the parameter set whose orchestration section names the pool")
    parser.add_argument("--port", type=int, default=4200)
    parser.add_argument("--pool-type", default="process", choices=["process", "kubernetes"])
    parser.add_argument("--gpu-slots", type=int, default=1, help="slots of the gpu concurrency limit (GPUs, or nodes, to share)")
    parser.add_argument("--no-worker", action="store_true", help="set up only; start workers elsewhere")
    args = parser.parse_args(argv)
    try:
        orch = load_params(args.params).orchestration
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    api_url = f"http://127.0.0.1:{args.port}/api"
    env = {**os.environ, "PREFECT_API_URL": api_url, "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "GRPOFLOW_WORK_POOL": orch.work_pool, "GRPOFLOW_WORKSPACE": str(Path.cwd()),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
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
    with open(STATE_DIR / "server.log", "a") as server_log:
        children.append(subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                                          "--port", str(args.port)], env=env, stdout=server_log, stderr=subprocess.STDOUT))
    try:
        wait_healthy(api_url, children[0])
        configure(env, orch.work_pool, args.pool_type, orch.gpu_concurrency_limit, args.gpu_slots)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        stop(code=1)
    print(f"Prefect UI: http://127.0.0.1:{args.port}  (PREFECT_API_URL={api_url})", flush=True)
    if args.no_worker:
        print("set up; the server keeps running until Ctrl-C", flush=True)
    else:
        children.append(subprocess.Popen([sys.executable, "-m", "prefect", "worker", "start", "--pool", orch.work_pool,
                                          "--type", args.pool_type], env=env))
        print(f"worker started on pool {orch.work_pool}; trigger a run with:\n"
              f"  PREFECT_API_URL={api_url} prefect deployment run grpoflow-pipeline/scheduled "
              f"-p 'overrides={{\"grpo.steps\": 20}}'", flush=True)
    while all(child.poll() is None for child in children):
        time.sleep(1)
    print("a served process exited; stopping", file=sys.stderr)
    stop(code=1)
    return 1


if __name__ == "__main__":
    sys.exit(main())
