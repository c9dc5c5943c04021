"""End-to-end fixtures: a throwaway copy of this checkout, its own git repo, DVC, MLflow store
and Prefect home, so that the real tools run exactly as a user's clone would run them."""

from __future__ import annotations

import atexit
import fcntl
import functools
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from contextlib import closing
from pathlib import Path

import pytest

from flows.rehearse import OP_CACHE
from grpoflow.provenance import copy_checkout

REPO = Path(__file__).resolve().parents[2]


GIT = ["git", "-c", "user.email=ci@grpoflow.local", "-c", "user.name=ci"]


def new_project(dest: Path) -> Path:
    """A fresh clone-like copy of the working tree at ``dest``, committed in a git repo of its own."""
    copy_checkout(REPO, dest)
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    subprocess.run(["git", "add", "-A"], cwd=dest, check=True)
    subprocess.run([*GIT, "commit", "-qm", "copy"], cwd=dest, check=True)
    return dest


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A fresh clone-like copy of the working tree (tracked and untracked, ignored files left out)."""
    return new_project(tmp_path / "project")


# A launcher's variables: a test that built an engine in this process set them for its own group
# (grpoflow.models.engine.init_distributed), and every stage started with them would bind that port.
LAUNCHER_VARS = {"MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"}
# What no tool of a test inherits: the launcher's variables, and PYTHONDONTWRITEBYTECODE, so that Python
# writes its bytecode caches beside the code as on a user's machine (set where this suite was built,
# the variable hid those caches from DVC's hashes of the code folders: .dvcignore).
NOT_INHERITED = LAUNCHER_VARS | {"PYTHONDONTWRITEBYTECODE"}


@functools.cache
def migrated_prefect_db() -> Path:
    """An empty Prefect database with every migration applied, made once per test process by a
    temporary server: a new home's first server spends 8-9 s of a core migrating its database."""
    scratch = Path(tempfile.mkdtemp(prefix="grpoflow-prefect-db-"))
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    prefect_query(scratch, tool_env(scratch, migrated=False), "return len(await c.read_flow_runs())")
    template = scratch / "migrated.db"
    # SQLite's backup folds in what the server left in its write-ahead log: prefect.db alone lacks it.
    with closing(sqlite3.connect(scratch / "prefect-home" / "prefect.db")) as src:
        with closing(sqlite3.connect(template)) as dst:
            src.backup(dst)
    return template


def tool_env(home: Path, migrated: bool = True) -> dict[str, str]:
    """This process's environment for the real tools, with Prefect's home under ``home`` and no
    tracking server, Prefect API, run or process group of the caller's leaking in (:data:`NOT_INHERITED`).
    ``migrated``: the home starts with a copy of :func:`migrated_prefect_db` (a user's first run
    migrates its own: the smoke tests' rehearsal homes do)."""
    prefect_home = home / "prefect-home"
    if migrated and not (prefect_home / "prefect.db").exists():
        prefect_home.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(migrated_prefect_db(), prefect_home / "prefect.db")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MLFLOW_TRACKING", "PREFECT_API", "GRPOFLOW_", "TORCHELASTIC_")) and k not in NOT_INHERITED
    }
    env.update(
        PREFECT_HOME=str(prefect_home),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        MLFLOW_DISABLE_TELEMETRY="true",
        DVC_NO_ANALYTICS="1",
        HF_HUB_OFFLINE="1",
        # prefect_query's ephemeral servers: Prefect's 20 s default is not enough on a loaded 2-core machine
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="300",
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
    )
    # Every project copy shares this checkout's DeepSpeed op build, as under `make test` (the Makefile
    # sets it): left to its default, each copy's stages compile the op again (a minute of both cores).
    env.setdefault("TORCH_EXTENSIONS_DIR", str(OP_CACHE))
    return env


@pytest.fixture
def run_env(tmp_path: Path) -> dict[str, str]:
    return tool_env(tmp_path)


class Ran(subprocess.CompletedProcess):
    """A finished command whose repr (what pytest shows for a failed assert on it) is its output's tail."""

    def tail(self, lines: int = 60) -> str:
        """The last ``lines`` lines of stdout, then of stderr."""
        out = "\n".join((self.stdout or "").splitlines()[-lines:])
        err = "\n".join((self.stderr or "").splitlines()[-lines:])
        return f"$ {' '.join(map(str, self.args))}\n(exit {self.returncode})\n--- stdout\n{out}\n--- stderr\n{err}"

    def __repr__(self) -> str:
        return f"Ran(\n{self.tail()}\n)"


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 600) -> Ran:
    """Run ``cmd`` to the end; its output's tail goes to pytest's captured stdout, which a failing
    test shows whatever failed (an assert, or a file the command should have written)."""
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    ran = Ran(out.args, out.returncode, out.stdout, out.stderr)
    print(ran.tail(), flush=True)
    return ran


def prefect_query(project: Path, env: dict[str, str], body: str, timeout: int = 400):
    """The JSON value that ``body`` (async Python, a Prefect client as ``c``, returning it) gives
    against the Prefect API that ``env`` points at, within ``timeout`` seconds (the default is above
    run_env's 300 s server start)."""
    code = (
        "import asyncio, json\nfrom prefect.client.orchestration import get_client\n"
        "async def main():\n    async with get_client() as c:\n"
        + "\n".join("        " + line for line in body.strip().splitlines())
        + "\nprint(json.dumps(asyncio.run(main()), default=str))"
    )
    out = run([sys.executable, "-c", code], project, env, timeout=timeout)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


# The tiny default, shrunk to seconds: same stages, same code paths, few steps.
SMOKE_OVERRIDES = {
    "data.synthetic.num_examples": 400,
    "verifier_gate.max_examples": 50,
    "sft.epochs": 0.5,
    "sft.eval_examples": 16,
    "rl.steps": 4,
    "rl.prompts_per_step": 4,
    "rl.num_generations": 4,
    "rl.engine.micro_batch_size": 8,
    "rl.checkpoint_every": 2,
    "rl.eval_every": 4,
    "ppo.critic_warmup_steps": 1,  # a set's tuned warm-up would take every step of four
    "evaluate.max_examples": 16,
    "evaluate.n_samples": 4,
    "evaluate.k": 2,
    # The smoke SFT is too short to promise a learning signal; the preflight gate has its own tests.
    "rl.preflight.prompts": 4,
    "rl.preflight.stop_on_none": False,
}


def write_params(project: Path, name: str, overrides: dict, base: str = "default") -> str:
    """params/<name>.yaml = params/<base>.yaml with ``overrides`` (dotted keys), validated by the schema."""
    import yaml

    from grpoflow.config import set_dotted, validate_params

    raw = yaml.safe_load((project / "params" / f"{base}.yaml").read_text())
    for key, value in overrides.items():
        set_dotted(raw, key, value)
    validate_params(raw, source=name)
    rel = f"params/{name}.yaml"
    (project / rel).write_text(yaml.safe_dump(raw, sort_keys=False))
    return rel


def use_params(project: Path, rel: str) -> None:
    """Point dvc.yaml's stages (and so the flow) at another parameter set."""
    dvc_yaml = project / "dvc.yaml"
    dvc_yaml.write_text(dvc_yaml.read_text().replace("params_file: params/default.yaml", f"params_file: {rel}"))


def smoke_project(project: Path) -> tuple[Path, str]:
    """``project`` on the smoke params (dvc.yaml pointed at them), committed."""
    rel = write_params(project, "smoke", SMOKE_OVERRIDES)
    use_params(project, rel)
    subprocess.run([*GIT, "commit", "-qam", "smoke"], cwd=project, check=True)
    return project, rel


@pytest.fixture
def smoke(project: Path) -> tuple[Path, str]:
    return smoke_project(project)


# The stages :func:`smoke_sft_built` reproduces with their deps: validate_verifiers is no dep of sft,
# but of every training stage after it.
SFT_BUILT = ("base_model", "prepare", "validate_verifiers", "sft")


def build_smoke_sft(root: Path) -> tuple[Path, str]:
    """A smoke project at ``root/project`` with :data:`SFT_BUILT` reproduced by DVC."""
    project, rel = smoke_project(new_project(root / "project"))
    out = run([sys.executable, "-m", "dvc", "repro", *SFT_BUILT], project, tool_env(root))
    assert out.returncode == 0, out
    return project, rel


@pytest.fixture(scope="session")
def smoke_sft_built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One smoke project with the stages every training stage starts from (base_model, prepare,
    validate_verifiers, sft) reproduced by DVC, built once per session: the tests that start from
    a finished SFT each get a copy (:func:`smoke_sft`). Under xdist the first worker to ask builds it
    in the run's shared temporary folder and the others wait for it (a build is a minute of a core)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # xdist: each worker's basetemp is in it
    root = shared / "smoke-sft"
    with open(f"{root}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if the build fails
        done = root / "built"
        if not done.is_file():
            shutil.rmtree(root, ignore_errors=True)  # a failed build of another worker's
            done.parent.mkdir(parents=True)
            done.write_text(build_smoke_sft(root)[1])
        return root / "project", done.read_text()


def copy_project(built: Path, dest: Path) -> Path:
    """A copy of the project ``built`` at ``dest``: its files, git repo, outputs, DVC cache and lock,
    as a run left them, without MLflow's store or DVC's state."""
    # MLflow's store names its artifact folders by absolute path (a copy would log into the built
    # project's), and .dvc/tmp holds DVC's state of the built project (inodes, locks): the copy's
    # stages and DVC make their own.
    left_out = {built: {"mlflow.db", "mlruns", "mlartifacts"}, built / ".dvc": {"tmp"}}

    def ignore(directory: str, names: list[str]) -> set[str]:
        return left_out.get(Path(directory), set()) & set(names)

    return shutil.copytree(built, dest, symlinks=True, ignore=ignore)


@pytest.fixture
def smoke_sft(smoke_sft_built: tuple[Path, str], tmp_path: Path) -> tuple[Path, str]:
    """A copy of :func:`smoke_sft_built` of this test's own: the smoke project, its data, gate and
    SFT reference as DVC left them."""
    built, rel = smoke_sft_built
    return copy_project(built, tmp_path / "project"), rel
