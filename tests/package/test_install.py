"""The package a Django team installs (issue 46): the sdist and the wheel, and docs/install.md
done exactly as it says, in a fresh project.

``python -m build`` (requirements-dev.txt's) builds the sdist and, from it, the wheel out of a
copy of the repository's tracked files; ``twine check`` passes on both, and their metadata is
true. Then the wheel goes into a fresh virtualenv, ``django-admin startproject`` makes a
project, and every block of docs/install.md marked ``docs-test: fresh-project`` is done in
page order, read from the page: a python block headed ``# <file>, at the end`` is appended to
that file, one headed ``# <file>`` is the file, one headed ``# python manage.py shell`` runs
in ``manage.py shell``; an sh block's commands run in the project (``pip install
"schemaless-store[...]"`` installs the wheel with those extras). The page's first block is the
one pasted under ``settings.py``: it migrates, a note is written and found through its index.
Last, what the page says the admin and the API show is asked of them.

Slow: a build, a virtualenv and a dozen ``manage.py`` runs (~40 s on a quiet machine, 2 min on
a busy one). It runs once, in the SQLite pass: the page's project is the embedded SQLite
default whatever this run's backend.
"""

from __future__ import annotations

import re
import shlex
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from django.conf import settings

import schemaless_store
from tests.support.package import ROOT, build_dists, code_blocks, fresh_venv, pyproject, run

pytestmark = pytest.mark.slow

PAGE = "docs/install.md"


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(sdist, wheel), built once for the module, in the SQLite pass only: what is built does
    not depend on the backend of the run."""
    if settings.BACKEND != "sqlite":
        pytest.skip("the package is built and installed once, in the SQLite pass")
    out = tmp_path_factory.mktemp("dist")
    return build_dists(out, tmp_path_factory.mktemp("source"))


def test_build_makes_an_sdist_and_a_wheel_that_twine_check_passes(dists):
    sdist, wheel = dists
    output = run([sys.executable, "-m", "twine", "check", "--strict", sdist, wheel], cwd=ROOT)
    assert output.count("PASSED") == 2, output
    version = schemaless_store.__version__
    assert wheel.name == f"schemaless_store-{version}-py3-none-any.whl"
    assert sdist.name == f"schemaless_store-{version}.tar.gz"


def test_the_wheel_carries_the_app_and_true_metadata(dists):
    sdist, wheel = dists
    with zipfile.ZipFile(wheel) as archive:
        files = set(archive.namelist())
        metadata = Parser().parsestr(
            archive.read(
                f"schemaless_store-{schemaless_store.__version__}.dist-info/METADATA"
            ).decode()
        )
    # What a project needs at run time: migrations, templates, the typing marker.
    assert "schemaless_store/migrations/0001_initial.py" in files
    assert "schemaless_store/templates/schemaless_store/503.html" in files
    assert "schemaless_store/py.typed" in files
    assert not any(name.startswith(("tests/", "project/", "bench/")) for name in files)
    with tarfile.open(sdist) as archive:
        assert any(name.endswith("/LICENSE") for name in archive.getnames())

    assert metadata["Version"] == schemaless_store.__version__ == "0.1.0"
    assert metadata["License-Expression"] == "MIT"
    assert "MySQL" not in metadata["Summary"] and "MariaDB" in metadata["Summary"]
    assert metadata["Requires-Python"] == ">=3.11"
    classifiers = metadata.get_all("Classifier")
    from trove_classifiers import classifiers as known

    assert set(classifiers) <= known, set(classifiers) - known
    # The versions CI runs (scripts/test.sh): Django 5.2 on 3.11, Django 6.1 on 3.12.
    for wanted in ("Framework :: Django :: 5.2", "Framework :: Django :: 6.1"):
        assert wanted in classifiers
    for wanted in ("Programming Language :: Python :: 3.11", "3.12"):
        assert any(c.endswith(wanted) for c in classifiers), wanted
    extras = set(metadata.get_all("Provides-Extra"))
    assert extras == set(pyproject()["project"]["optional-dependencies"])
    assert extras >= {"rest", "cache", "serve", "load"}


def test_install_page_in_a_fresh_project(dists, tmp_path):
    _, wheel = dists  # the page's project is the embedded SQLite default, whatever the backend
    python = fresh_venv(tmp_path / "venv")
    bin_dir = python.parent
    run([python, "-m", "pip", "install", "-q", wheel], cwd=tmp_path)
    project = tmp_path / "mysite"  # the page's django-admin startproject makes it

    blocks = [b for b in code_blocks(PAGE, ("python", "sh")) if b.marker == "fresh-project"]
    first_python = next(b for b in code_blocks(PAGE, ("python",)))
    assert first_python.marker == "fresh-project", "the page's first python block is pasted"
    outputs: list[str] = []
    cwd = tmp_path
    for block in blocks:
        if block.lang == "sh":
            cwd = _run_sh(block.code, cwd, bin_dir, wheel, outputs)
        else:
            _do_python(block.code, cwd, python, outputs)
    assert cwd == project, "the page's commands run in the project's directory"

    # The first python block configured the embedded default: two shard files and metadata.
    assert sorted(p.name for p in (project / "var").glob("*.sqlite3")) == [
        "meta.sqlite3",
        "shard_0.sqlite3",
        "shard_1.sqlite3",
    ]
    # The first query's block printed what it found through the index.
    found = [line for out in outputs for line in out.splitlines() if "Hello, store" in line]
    assert found, "\n".join(outputs)
    note_id, shard, _ = found[0].split(" ", 2)
    assert shard in {"shard_0", "shard_1"}

    # The admin and the API the page describes show the note, to a superuser.
    check = f"""
from django.contrib.auth.models import User
from django.db import connections
from django.test import Client
from notes.models import Note
from schemaless_store.models import Entity

user = User.objects.create_superuser("admin", "admin@example.com", "pw")
client = Client(HTTP_HOST="localhost")
client.force_login(user)
page = client.get("/admin/notes/note/")
assert page.status_code == 200 and b"{note_id}" in page.content, page.status_code
api = client.get("/api/notes/", {{"author": "ada"}})
assert api.status_code == 200, (api.status_code, api.content[:300])
assert [n["text"] for n in api.json()["results"]] == ["Hello, store"], api.json()
assert client.get("/api/notes/", {{"author": "bob"}}).json()["results"] == []
# The note is on the shard its id names, as the block printed; its one index row is stored.
assert Entity.objects.get(id="{note_id}").shard == "{shard}"
rows = 0
for alias in ("shard_0", "shard_1"):
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM index_note_author")
        rows += cursor.fetchone()[0]
assert rows == 1, rows
assert Note.objects.filter_index(author="ada").count() == 1
print("checked")
"""
    output = run([python, "manage.py", "shell", "-c", check], cwd=project)
    assert "checked" in output


def _run_sh(code: str, cwd: Path, bin_dir: Path, wheel: Path, outputs: list[str]) -> Path:
    """The block's commands, one a line (comments dropped), in the fresh virtualenv."""
    for line in code.splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if words[0] == "cd":
            cwd = cwd / words[1]
            continue
        if words[:2] == ["pip", "install"]:
            words = [re.sub(r"^schemaless-store(\[[\w,]+\])?$", rf"{wheel}\1", w) for w in words]
            assert str(wheel) in " ".join(words), f"{line!r} installs something else"
        assert words[0] in {"python", "pip", "django-admin"}, f"{line!r}: not a step the test knows"
        words[0] = str(bin_dir / words[0])
        outputs.append(run(words, cwd=cwd))
    return cwd


def _do_python(code: str, cwd: Path, python: Path, outputs: list[str]) -> None:
    header = code.splitlines()[0]
    if header.startswith("# python manage.py shell"):
        outputs.append(run([python, "manage.py", "shell", "-c", code], cwd=cwd))
        return
    match = re.match(r"#\s*([\w/]+\.py)(,\s*at the end)?", header)
    assert match, f"a fresh-project block names its file or the shell first: {header!r}"
    path = cwd / match.group(1)
    if match.group(2):
        assert path.exists(), f"{path} should exist to be appended to"
        path.write_text(path.read_text() + "\n\n" + code)
    else:
        path.write_text(code)
