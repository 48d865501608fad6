"""The production image (issue 46): the Dockerfile's final stage holds the app, its runtime
requirements and gunicorn, and no test kit; it runs as a user other than root and serves the
demo with ``project.production``; docker-compose.yml runs it.

There is no docker engine here, so the Dockerfile is read: its stages, what the final stage
copies (from the build context, and from which stage), and every ``pip install`` of the stages
it copies from, with the requirements files they name. The slow test asks pip what those
installs would bring, every dependency resolved (``--dry-run``: nothing is installed).
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from dataclasses import dataclass, field

import pytest
from django.conf import settings
from packaging.utils import canonicalize_name

from tests.support.package import ROOT, RequirementsFile, run, tracked_copy

# What the test kit is: requirements-dev.txt's own lines (it includes requirements.txt).
DEV = {canonicalize_name(r.name) for r in RequirementsFile.read("requirements-dev.txt").lines}
# Brought by those (django-stubs[compatible-mypy] brings mypy), and the load test's locust.
DEV_TOO = {"mypy", "django-stubs-ext", "locust", "pyproject-hooks", "iniconfig", "pluggy"}
RUNTIME = {"django", "mysqlclient", "gunicorn", "uvicorn", "whitenoise", "djangorestframework"}
LEAVE_OUT = ("tests", "bench", "load", "docs", "requirements-dev.txt", "requirements-load.txt")


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def stages() -> list[Stage]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    found: list[Stage] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = args.split()
            name = words[2] if len(words) > 2 and words[1].upper() == "AS" else None
            found.append(Stage(words[0], name))
        else:
            found[-1].instructions.append((keyword, args.strip()))
    return found


def copied_from(stage: Stage) -> list[str]:
    return [
        m.group(1) for args in stage.all("COPY") for m in [re.search(r"--from=(\S+)", args)] if m
    ]


def installs(stage: Stage) -> tuple[set[str], set[str]]:
    """(requirements files named, packages named) by the stage's RUN commands that install."""
    files: set[str] = set()
    packages: set[str] = set()
    for command in stage.all("RUN"):
        for part in re.split(r"&&|;|\|\|", command):
            words = shlex.split(part)
            files |= {
                w.rsplit("/", 1)[-1] for w in words if re.search(r"requirements[\w-]*\.txt$", w)
            }
            if "install" not in words or not any(w.endswith("pip") or w == "pip" for w in words):
                continue
            after = words[words.index("install") + 1 :]
            skip_next = False
            for word in after:
                if skip_next:
                    skip_next = False
                elif word in {"-r", "-c", "--requirement", "--constraint"}:
                    skip_next = True
                elif not word.startswith("-"):
                    packages.add(word)
    return files, packages


def final_installs() -> tuple[set[str], set[str]]:
    """(requirements files, packages) that the final stage installs, itself or in the stages
    it copies from."""
    all_stages = stages()
    assert len(all_stages) >= 2, "a multi-stage build: the final stage copies what was built"
    final = all_stages[-1]
    by_name = {s.name: s for s in all_stages if s.name}
    sources = [by_name[name] for name in copied_from(final)]
    assert sources, "the final stage copies the built virtualenv from the build stage"
    files, packages = installs(final)
    for stage in sources:
        more_files, more_packages = installs(stage)
        files |= more_files
        packages |= more_packages
    return files, packages


def test_the_final_stage_installs_no_dev_requirement():
    final = stages()[-1]
    files, packages = final_installs()
    assert files == {"requirements.txt"}, f"installs from {sorted(files)}"
    assert not packages, f"named directly, not through requirements.txt: {sorted(packages)}"
    installed = RequirementsFile.read("requirements.txt").closure()
    assert not installed & (DEV | DEV_TOO), sorted(installed & (DEV | DEV_TOO))
    assert installed >= RUNTIME, sorted(RUNTIME - installed)
    # From the build context, the final stage takes the demo project, not tests or the test kit.
    for args in final.all("COPY") + final.all("ADD"):
        if "--from=" in args:
            continue
        sources_here = args.split()[:-1]
        assert "." not in sources_here, "the whole build context copied"
        for source in sources_here:
            assert not source.rstrip("/").startswith(LEAVE_OUT), f"COPY {args}"


def test_the_final_stage_serves_the_demo_with_production_settings_as_a_user_not_root():
    final = stages()[-1]
    users = final.all("USER")
    assert users and users[-1].split(":")[0] not in {"root", "0"}, users
    # USER comes before what the image runs.
    keywords = [kw for kw, _ in final.instructions]
    assert keywords.index("USER") < keywords.index("CMD")
    env = " ".join(final.all("ENV"))
    assert "DJANGO_SETTINGS_MODULE=project.production" in env
    cmd = json.loads(final.all("CMD")[-1])
    assert cmd == ["bash", "scripts/serve.sh"], cmd
    serve = (ROOT / "scripts" / "serve.sh").read_text()
    assert "-m gunicorn" in serve and "${PYTHON:-" in serve
    assert "PYTHON=/opt/venv/bin/python" in env


def test_docker_compose_runs_the_image():
    compose = (ROOT / "docker-compose.yml").read_text()
    services = re.split(r"^  (\w+):\n", compose, flags=re.M)
    by_name = dict(zip(services[1::2], services[2::2], strict=True))
    for name in ("web", "cleaner"):
        body = by_name[name]
        assert "build: ." in body, name
        assert ".venv" not in body, f"{name} runs the image's /opt/venv, not a .venv"
    assert 'command: ["bash", "scripts/demo.sh"]' in by_name["web"]
    assert "DEMO_SERVER: gunicorn" in by_name["web"]
    # demo.sh uses the image's interpreter, without setting up a .venv (setup.sh would install
    # requirements-dev.txt).
    demo = (ROOT / "scripts" / "demo.sh").read_text()
    assert re.search(r'if \[ -n "\$\{PYTHON:-\}" \]; then\n\s+py=\$PYTHON', demo)


@pytest.mark.slow
def test_what_pip_would_install_in_the_final_stage_holds_no_test_kit(tmp_path):
    """The build stage's install, resolved by pip (``--dry-run --ignore-installed``): every
    distribution it brings, dependencies of dependencies included, and none of the test kit."""
    if settings.BACKEND != "sqlite":
        pytest.skip("resolved once, in the SQLite pass")
    files, packages = final_installs()
    assert files == {"requirements.txt"} and not packages, (files, packages)
    source = tracked_copy(tmp_path / "src")  # the build context, nothing written in the tree
    requirements = tmp_path / "requirements.txt"
    # As the build stage runs it: `-e .[...]` without -e, from the source tree's root.
    requirements.write_text(re.sub(r"(?m)^-e ", "", (ROOT / "requirements.txt").read_text()))
    report = tmp_path / "report.json"
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "-q",
            "--report",
            report,
            "-r",
            requirements,
        ],
        cwd=source,
    )
    resolved = {
        canonicalize_name(item["metadata"]["name"])
        for item in json.loads(report.read_text())["install"]
    }
    assert RUNTIME | {"schemaless-store", "redis", "factory-boy"} <= resolved, sorted(resolved)
    assert not resolved & (DEV | DEV_TOO | {"pytest", "ruff", "playwright"}), sorted(
        resolved & (DEV | DEV_TOO)
    )
