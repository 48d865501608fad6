"""What the package tests (tests/package) share: pyproject.toml and the requirements files as
data, the python blocks of a Markdown page with their markers, a fresh virtualenv, and the
sdist and wheel built from the repository's tracked files."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]

# Variables of this test run that would point a fresh project, or pip, elsewhere.
FOREIGN = (
    "DJANGO_SETTINGS_MODULE",
    "DATABASE_URL",
    "SHARD_DATABASE_URLS",
    "SCHEMALESS_TEST_DATABASES",
    "SCHEMALESS_TEST_DB",
    "PYTHONPATH",
    "VIRTUAL_ENV",
)


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def names(requirements: list[str]) -> set[str]:
    """The canonical distribution names of requirement strings."""
    return {canonicalize_name(Requirement(line).name) for line in requirements}


@dataclass
class RequirementsFile:
    """One requirements file, read as pip reads it (``-r`` followed, ``-e .[extras]`` kept)."""

    path: Path
    lines: list[Requirement]  # the file's own requirements, not those of the files it includes
    project_extras: set[str] | None  # the extras of its ``-e .[...]`` line; None: no such line
    includes: list[str]

    @classmethod
    def read(cls, name: str) -> RequirementsFile:
        path = ROOT / name
        lines: list[Requirement] = []
        extras: set[str] | None = None
        includes: list[str] = []
        for raw in path.read_text().splitlines():
            line = raw.split(" #", 1)[0].strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("-r "):
                includes.append(line[3:].strip())
                continue
            project = re.fullmatch(r"(?:-e\s+)?\.(?:\[([\w,\s-]*)\])?", line)
            if project:
                extras = {e.strip() for e in (project.group(1) or "").split(",") if e.strip()}
                continue
            lines.append(Requirement(line))
        return cls(path, lines, extras, includes)

    def closure(self) -> set[str]:
        """Every distribution name this file installs directly (its lines, the project's
        dependencies and extras it names, and those of the files it includes); not the
        dependencies of those distributions."""
        found = {canonicalize_name(req.name) for req in self.lines}
        if self.project_extras is not None:
            project = pyproject()["project"]
            found |= names(project["dependencies"])
            for extra in self.project_extras:
                found |= names(project["optional-dependencies"][extra])
        for include in self.includes:
            found |= RequirementsFile.read(include).closure()
        return found


# --- the python blocks of a Markdown page ------------------------------------------------------

FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)
# An HTML comment just before a block (blank lines allowed): ``<!-- docs-test: KIND: TEXT -->``.
MARKER = re.compile(r"<!--\s*docs-test:\s*(\w[\w-]*)\s*(?::\s*(.*?))?\s*-->\s*$", re.S)


@dataclass
class Block:
    page: str
    line: int  # the line of its opening fence, 1-based
    code: str
    lang: str = "python"
    marker: str | None = None  # skip, setup, fresh-project
    text: str = ""  # the marker's reason (skip) or code (setup)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def file(self) -> str | None:
        """The file a block is, when its first line names one: ``# myapp/models.py``."""
        first = self.code.lstrip().splitlines()[0] if self.code.strip() else ""
        match = re.match(r"#\s*([\w/]+\.py)\b", first)
        return match.group(1) if match else None


def python_blocks(page: str) -> list[Block]:
    return code_blocks(page, ("python",))


def code_blocks(page: str, langs: tuple[str, ...]) -> list[Block]:
    """The fenced blocks of those languages on a page, in order, each with its marker."""
    text = (ROOT / page).read_text()
    blocks = []
    for match in FENCE.finditer(text):
        if match.group(1) not in langs:
            continue
        before = text[: match.start()].rstrip()
        marker = MARKER.search(before[before.rfind("<!--") :]) if before.endswith("-->") else None
        blocks.append(
            Block(
                page=page,
                line=text.count("\n", 0, match.start()) + 1,
                code=match.group(2),
                lang=match.group(1),
                marker=marker.group(1) if marker else None,
                text=(marker.group(2) or "").strip() if marker else "",
            )
        )
    return blocks


# --- a fresh virtualenv, the sdist and the wheel -----------------------------------------------


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


def run(args: list[str | Path], cwd: Path, timeout: float = 600, **env: str) -> str:
    """Run a command; its output, or a failure that shows it."""
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))} exited {done.returncode}:\n{output}")
    return output


def fresh_venv(where: Path) -> Path:
    """A new virtualenv of this Python; its python."""
    run([sys.executable, "-m", "venv", where], cwd=where.parent)
    return where / "bin" / "python"


def tracked_copy(target: Path) -> Path:
    """The repository's tracked files (what a clone has), copied to ``target``: a build there
    writes nothing into the working tree and sees no untracked file."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def build_dists(out: Path, work: Path) -> tuple[Path, Path]:
    """``python -m build`` (requirements-dev.txt's) of a copy of the tracked files: the sdist,
    then the wheel built from it. Returns (sdist, wheel)."""
    source = tracked_copy(work)
    run([sys.executable, "-m", "build", "--outdir", out, source], cwd=work)
    sdists, wheels = sorted(out.glob("*.tar.gz")), sorted(out.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, sorted(p.name for p in out.iterdir())
    return sdists[0], wheels[0]
