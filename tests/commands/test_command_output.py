"""What the operators' commands print on a terminal: progress bars in the terminal's normal
colour (not styled as errors), and each message once.

A command writing to a terminal is simulated in-process: its stdout and stderr are streams whose
``isatty()`` is true and the command is built with ``force_color=True``, as ``manage.py`` builds
it on a colour terminal; Django then styles everything written through ``self.stderr`` with
``style.ERROR`` (bold red, ``ESC[31;1m``).
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import logging
import os
import pty
import re
import runpy
import struct
import subprocess
import sys
import termios
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils.module_loading import import_string

from project.feed.management.commands import seed
from schemaless_store.exceptions import ShardUnavailable
from schemaless_store.management.commands import runcleaner
from schemaless_store.topology import shards
from tests.support import STORE
from tests.support.factories import PostFactory
from tests.support.terminal import ESC, on_terminal

pytestmark = STORE

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = "index_cleaner_published"
RED = "\x1b[31"


def bar_segments(text: str, label: str) -> list[str]:
    """The bars tqdm drew in ``text`` (it redraws its line after ``\\r``): ``label: NN%|...``."""
    return [
        piece
        for piece in re.split(r"[\r\n]", text)
        if label in piece and re.search(r": +\d+%\|", piece)
    ]


@pytest.fixture
def posts():
    """Under ``published`` (conftest.py): 60 posts are enough for these bars."""
    return PostFactory.create_batch(60)


def test_the_simulated_terminal_styles_command_errors_red():
    command, _out, err = on_terminal(runcleaner.Command)
    command.stderr.write("a genuine error")
    assert err.getvalue().startswith(RED)  # what the tests below rely on


# --- progress bars in the terminal's normal colour ---------------------------------------------


def test_runcleaner_progress_bars_are_not_styled_as_errors(published):
    command, out, err = on_terminal(runcleaner.Command)
    call_command(command, f"--index={PUBLISHED}", "--once", "--batch-size=20", "--nice=0")

    bars = bar_segments(err.getvalue(), f"backfill {PUBLISHED}")
    for alias in shards.shard_aliases():
        assert any(f"backfill {PUBLISHED} {alias}: 100%" in bar for bar in bars)
    assert not [bar for bar in bars if ESC in bar]
    assert f"index {PUBLISHED} is backfilled on every shard: it is ready" in out.getvalue()


def test_runcleaner_errors_are_still_red_beside_plain_bars(published, monkeypatch):
    broken = shards.shard_aliases()[0]
    from schemaless_store.tables import entities as entity_table

    original = entity_table.newest_first

    def failing(source, alias, bound, limit):
        if alias == broken:
            raise ShardUnavailable(alias, "connection refused")
        return original(source, alias, bound, limit)

    monkeypatch.setattr(entity_table, "newest_first", failing)
    command, _out, err = on_terminal(runcleaner.Command)
    with pytest.raises(CommandError):
        call_command(command, f"--index={PUBLISHED}", "--once", "--nice=0")

    shown = err.getvalue()
    failed = f"on {broken} failed (ShardUnavailable"
    (error,) = [line for line in shown.split("\n") if failed in line]
    assert error.lstrip("\r").startswith(RED)
    bars = bar_segments(shown, f"{PUBLISHED} ")
    assert bars and not [bar for bar in bars if RED in bar]


def test_seed_progress_bar_is_not_styled_as_an_error():
    command, out, err = on_terminal(seed.Command)
    call_command(command, "--users", "3", "--entries", "5", "--seed", "1")

    bars = bar_segments(err.getvalue(), "seed: ")
    assert bars and any("100%" in bar for bar in bars)
    assert not [bar for bar in bars if ESC in bar]
    assert "Seeded " in out.getvalue()


# --- each message once, also with the demo project's LOGGING ------------------------------------


@contextlib.contextmanager
def project_logging(monkeypatch: pytest.MonkeyPatch, data_dir: Path) -> Iterator[None]:
    """The handlers and levels of ``project/settings.py``'s LOGGING, as Django would set them up
    (its console handler prints to this process's stderr: pytest's capture of it, so enter this
    in the test's body, where that capture stays in place). Built from the dict by hand rather
    than with ``dictConfig``, which would shut pytest's own logging handlers down; undone
    after."""
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("SHARD_DATABASE_URLS", raising=False)
    monkeypatch.setenv("SCHEMALESS_DATA_DIR", str(data_dir))
    config = runpy.run_path(str(ROOT / "project" / "settings.py"))["LOGGING"]
    added: list[tuple[logging.Logger, logging.Handler, int]] = []
    try:
        for name, spec in config["loggers"].items():
            logger = logging.getLogger(name)
            previous = logger.level
            for handler_name in spec["handlers"]:
                options = dict(config["handlers"][handler_name])
                assert set(options) == {"class"}, "build the handler as dictConfig would"
                handler = import_string(options["class"])()
                logger.addHandler(handler)
                added.append((logger, handler, previous))
            logger.setLevel(spec["level"])
        yield
    finally:
        for logger, handler, previous in added:
            logger.removeHandler(handler)
            logger.setLevel(previous)


def message_lines(*texts: str) -> list[str]:
    """Lines of output other than progress bars, without colour codes."""
    lines = []
    for text in texts:
        for piece in re.split(r"[\r\n]", re.sub(r"\x1b\[[0-9;]*m", "", text)):
            if piece.strip() and not re.search(r": +\d+%\|", piece):
                lines.append(piece)
    return lines


def test_runcleaner_prints_each_message_once_with_the_projects_logging(
    published, capsys, monkeypatch, tmp_path
):
    command, out, err = on_terminal(runcleaner.Command)
    with project_logging(monkeypatch, tmp_path):
        call_command(command, f"--index={PUBLISHED}", "--once", "--nice=0")

    console = capsys.readouterr().err  # what the project's console handler printed
    lines = message_lines(out.getvalue(), err.getvalue(), console)
    repeated = [line for line, n in Counter(lines).items() if n > 1]
    assert not repeated
    ready = f"index {PUBLISHED} is backfilled on every shard: it is ready"
    assert lines.count(ready) == 1 and ready in out.getvalue()  # the command's own line
    for alias in shards.shard_aliases():
        assert sum(f"backfill of {PUBLISHED} on {alias}: done" in line for line in lines) == 1
    assert lines[-1].startswith("Cleaner finished in ")


@pytest.mark.parametrize(
    ("verbosity", "shown"),
    [
        ("0", []),
        ("1", ["is backfilled on every shard: it is ready"]),
        ("2", ["is backfilled on every shard: it is ready", "sweep of"]),
    ],
)
def test_runcleaner_verbosity_still_decides_what_is_shown(
    published, capsys, monkeypatch, tmp_path, verbosity, shown
):
    command, out, err = on_terminal(runcleaner.Command)
    with project_logging(monkeypatch, tmp_path):
        call_command(command, f"--index={PUBLISHED}", "--once", "--nice=0", "-v", verbosity)

    console = capsys.readouterr().err
    assert console == ""  # the cleaner's records are the command's to print
    lines = message_lines(out.getvalue(), err.getvalue())
    assert len(lines) == len(set(lines))
    if verbosity == "0":
        assert (out.getvalue(), err.getvalue()) == ("", "")
    for text in shown:
        assert any(text in line for line in lines)
    if verbosity == "1":
        # A pass that changed nothing is a debug record: shown from -v 2 on only.
        assert not any(line.startswith(f"sweep of {PUBLISHED}") for line in lines)


def test_other_handlers_still_get_the_cleaners_records_and_consoles_get_them_back(
    published, capsys, monkeypatch, tmp_path
):
    kept = io.StringIO()
    to_a_file = logging.StreamHandler(kept)  # not a console: a file, a log service...
    logger = logging.getLogger("schemaless_store")
    with project_logging(monkeypatch, tmp_path):
        logger.addHandler(to_a_file)
        try:
            call_command(
                "runcleaner", f"--index={PUBLISHED}", "--once", "--nice=0", stdout=io.StringIO()
            )
        finally:
            logger.removeHandler(to_a_file)
        assert f"index {PUBLISHED} is backfilled on every shard: it is ready" in kept.getvalue()
        assert capsys.readouterr().err == ""

        # After the command the project's console prints the cleaner's records again.
        (console,) = logger.handlers
        assert not console.filters
        logging.getLogger("schemaless_store.cleaner").warning("after the command")
        assert "after the command" in capsys.readouterr().err


# --- the demo's manage.py on a real pseudo-terminal ----------------------------------------------

# Variables of this test run that would point the demo project elsewhere than a fresh store.
FOREIGN = (
    "DJANGO_SETTINGS_MODULE",
    "DATABASE_URL",
    "SHARD_DATABASE_URLS",
    "FEED_LIVE_INDEXES",
    "SCHEMALESS_TEST_DATABASES",
    "DJANGO_COLORS",
    "NO_COLOR",
)


def demo_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN}
    env.update(SCHEMALESS_DATA_DIR=str(data_dir), TERM="xterm", PYTHONUNBUFFERED="1", **extra)
    return env


def manage(env: dict[str, str], *args: str) -> str:
    """``manage.py ARGS`` of the demo project, its output captured (not a terminal)."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout


def manage_on_terminal(env: dict[str, str], *args: str) -> str:
    """``manage.py ARGS`` with stdout and stderr on one pseudo-terminal (120 columns), as an
    operator runs it; everything it printed."""
    main, side = pty.openpty()
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=side,
        stderr=side,
    )
    os.close(side)
    shown = bytearray()
    try:
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the terminal's other side is closed, the command is done
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(main)
        returncode = process.wait(timeout=120)
    text = shown.decode()
    assert returncode == 0, text
    return text


@pytest.mark.slow
def test_the_demos_runcleaner_on_a_terminal_prints_plain_bars_and_each_line_once(tmp_path):
    if settings.BACKEND != "sqlite":
        pytest.skip("runs the demo project on its embedded SQLite default: the SQLite pass")
    env = demo_env(tmp_path / "var")
    manage(env, "migrateall", "-v", "0")
    manage(env, "seed", "--users", "4", "--entries", "40", "--seed", "1", "-v", "0")
    live = {**env, "FEED_LIVE_INDEXES": "link"}
    migrated = manage(live, "migrateall")  # index_feed_link is declared: building
    assert re.search(r"\n  index_feed_link +created; building\n", migrated)
    assert "\n  manage.py runcleaner --index=index_feed_link --once\n" in migrated

    shown = manage_on_terminal(live, "runcleaner", "--index=index_feed_link", "--once")

    bars = bar_segments(shown, "index_feed_link shard_")
    assert any("backfill index_feed_link shard_0: 100%" in bar for bar in bars)
    assert not [bar for bar in bars if ESC in bar]
    lines = message_lines(shown)
    assert not [line for line, n in Counter(lines).items() if n > 1]
    assert lines.count("index index_feed_link is backfilled on every shard: it is ready") == 1
    assert "\x1b[32;1mCleaner finished in " in shown  # a terminal: Django styles the summary
