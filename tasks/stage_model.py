"""What a pipeline stage is: :class:`Stage`, its module, the paths it reads and writes (:class:`Io`,
which are also its command-line options) and the params keys it depends on, and how its code
dependencies are found from the import graph of its module (:meth:`Stage.code`). The stages
themselves are declared in :mod:`tasks.stages`."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from grpoflow.io import files_in
from grpoflow.provenance import PROJECT_PACKAGES, module_files
from verifiers.catalog import BUILTIN

Kind = Literal["dep", "out", "persist", "report", "metric", "history"]
# dep: read; out: written and cached by DVC; persist: kept across runs, not a DVC output (checkpoints);
# report: written, uncached (small files git or an experiment can carry); metric: a metrics JSON;
# history: a per-step CSV, uncached, plotted.
ROOT = Path(__file__).resolve().parents[1]  # the checkout this code runs from: its import graph is the deps
PARAMS_VAR = "${params_file}"
# The modules that build verifiers by name (verifiers.create). The registry imports a built-in
# verifier's module only when it is asked for, which the import graph cannot see: a stage that
# imports one of these depends on the built-in verifiers it builds (Stage.builds) as well: for a set,
# those its params name (grpoflow.config.judges.built_verifiers); with no set, every one.
BUILDS_VERIFIERS = ("grpoflow/rl/rewards.py", "tasks/validate_verifiers.py")
Builds = Literal["judges", "rewards"]  # the judges of correctness only, or the reward's verifiers with them


@dataclass(frozen=True)
class Io:
    """A path a stage reads or writes. With a ``flag`` it is also a command-line option, whose
    default is ``path`` (a list of ``name=path`` items for a list option)."""

    flag: str | None
    path: str | tuple[str, ...]
    kind: Kind
    help: str = ""

    @property
    def paths(self) -> list[str]:
        """The file-system paths (the part after ``=`` of ``name=path`` items)."""
        items = [self.path] if isinstance(self.path, str) else list(self.path)
        return [item.partition("=")[2] or item for item in items]


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: ``python -m <module> --params <set> --<flag> <path> ...``."""

    name: str
    module: str
    io: tuple[Io, ...]
    params: tuple[str, ...] = ()
    plot: dict = field(default_factory=dict)  # for a history: the curves (column names) to plot
    args: tuple[str, ...] = ()  # fixed arguments after the paths (an arm's name and seed)
    opt_in: bool = False  # left out of a set that does not ask for it (see :func:`stage_names`)
    builds: Builds = "rewards"  # which of the set's verifiers it builds, where it builds any (BUILDS_VERIFIERS)
    loads: tuple[str, ...] = ()  # modules its code imports by name at run time (an algorithm's, the catalog's)

    def option(self, flag: str) -> Io:
        """The :class:`Io` of command-line option ``--<flag>``."""
        return next(i for i in self.io if i.flag == flag)

    def file(self, flag: str) -> str:
        """The one path of option ``--<flag>``; a list option has several, and raises here."""
        path = self.option(flag).path
        if not isinstance(path, str):
            raise TypeError(f"stage {self.name}: --{flag} is a list option; read its paths instead")
        return path

    def paths(self, *kinds: Kind) -> list[str]:
        """Every path of the given kinds."""
        return [p for i in self.io if i.kind in kinds for p in i.paths]

    @property
    def outs(self) -> list[str]:
        """Everything the stage writes."""
        return self.paths("out", "persist", "report", "metric", "history")

    @property
    def metrics(self) -> list[str]:
        """Its metrics JSON files."""
        return self.paths("metric")

    def command(self, launcher: list[str] | None = None) -> str:
        """The shell command dvc.yaml runs, every interpolated word quoted: DVC hands it to a shell
        after putting the params file's name in place of ``${params_file}``, inside the quotes. (Only a
        quote in the name could end them: every entry point refuses names beyond ``[A-Za-z0-9._/-]``.)
        ``launcher`` (torchrun and its options, :func:`launchers`) stands in for ``python``."""
        words = [*(launcher or ["python"]), "-m", self.module, "--params", PARAMS_VAR]
        for i in self.io:
            if i.flag:
                words += [f"--{i.flag}", *([i.path] if isinstance(i.path, str) else i.path)]
        return " ".join(shlex.quote(word) for word in [*words, *self.args])

    def code(self, built: Mapping[str, Sequence[str]] | None = None) -> list[str]:
        """The project source the stage's module imports, a package directory where all of it is; with the
        verifiers it builds (``built[self.builds]``, their names; None: every built-in one)."""
        files = module_files(self.module, *self.loads, root=ROOT)
        if any(f in files for f in BUILDS_VERIFIERS):
            names = built[self.builds] if built is not None else list(BUILTIN)
            files = sorted({*files, *module_files(*(BUILTIN[n] for n in names if n in BUILTIN), root=ROOT)})
        return collapse(files, root=ROOT)


def collapse(files: list[str], root: Path = Path(".")) -> list[str]:
    """``files`` with each project package directory whose every .py file is listed replaced by
    the directory (shortest directories first)."""
    chosen = set(files)
    dirs = sorted({str(Path(f).parent) for f in files}, key=lambda d: (d.count("/"), d))
    kept: list[str] = []
    for d in dirs:
        if any(d == k or d.startswith(k + "/") for k in kept) or d.split("/")[0] not in PROJECT_PACKAGES:
            continue
        in_dir = {p.relative_to(root).as_posix() for p in files_in(root / d, "*.py")}
        if in_dir and in_dir <= chosen:
            kept.append(d)
    loose = [f for f in files if not any(f.startswith(k + "/") for k in kept)]
    return sorted(kept + loose)


def _io(flag: str | None, path: str | tuple[str, ...], kind: Kind, help: str) -> Io:
    return Io(flag, path, kind, help)
