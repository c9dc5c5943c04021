"""The Makefile's set-up picks torch's package index as documented (a dry run: nothing installs)."""

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _torch_line(tmp_path: Path, pip_conf: str | None, env: dict[str, str], *make_args: str) -> str:
    """The set-up's torch install line, as ``make -n`` prints it, with ``pip_conf`` pip's only
    configuration file (``None``: none) and no PIP_* variable but ``env``."""
    conf = tmp_path / "pip.conf"
    if pip_conf is not None:
        conf.write_text(pip_conf)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    clean |= {"PIP_CONFIG_FILE": str(conf) if pip_conf is not None else os.devnull, **env}
    out = subprocess.run(
        ["make", "-n", "-B", "-C", str(REPO), "setup", *make_args], env=clean, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return next(line for line in out.stdout.splitlines() if re.search(r"pip install -q torch==", line))


def test_a_stock_machine_gets_the_cpu_wheel_index(tmp_path):
    assert _torch_line(tmp_path, None, {}).endswith(f"torch==2.13.0 --index-url {CPU_INDEX}")


@pytest.mark.parametrize(
    "pip_conf, env",
    [
        ("[global]\nindex-url = https://mirror.example/simple\n", {}),
        ("[global]\nextra-index-url = file:///opt/pypi/simple\nfind-links = /opt/wheels\n", {}),
        ("[install]\nfind-links = /opt/wheels\n", {}),
        (None, {"PIP_INDEX_URL": "https://mirror.example/simple"}),
        (None, {"PIP_FIND_LINKS": "/opt/wheels"}),
    ],
)
def test_a_configured_index_is_left_to_choose(tmp_path, pip_conf, env):
    assert _torch_line(tmp_path, pip_conf, env).endswith("torch==2.13.0")


def test_settings_that_name_no_index_do_not_count(tmp_path):
    line = _torch_line(tmp_path, "[global]\ntimeout = 60\ncert = /etc/ssl/certs/ca.crt\n", {})
    assert line.endswith(f"--index-url {CPU_INDEX}")


def test_the_variable_overrides_the_detection(tmp_path):
    assert _torch_line(tmp_path, None, {}, "TORCH_INDEX=https://my.index/whl").endswith(
        "--index-url https://my.index/whl"
    )
    assert _torch_line(tmp_path, None, {}, "TORCH_INDEX=").endswith("torch==2.13.0")
