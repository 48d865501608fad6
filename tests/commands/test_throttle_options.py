"""``--sleep``, ``--duty`` and ``--max-latency``, declared once
(``management.arguments.add_throttle_arguments``) for the three commands that work in batches:
the same values refused with the same message everywhere, each command's help naming what it
throttles, and the milliseconds handed over as seconds. Nothing runs past the parser."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command, get_commands, load_command_class
from django.core.management.base import CommandError

from schemaless_store.management.arguments import throttle_options

# Each command with the positional arguments it needs to get past its parser.
COMMANDS = {
    "runcleaner": [],
    "movebuckets": [],
    "mapentities": ["tests.support.mapfuncs.noop"],
}
REFUSED = [
    ("--sleep=-1", "--sleep: must be a number of seconds (0 or more), not '-1'"),
    ("--sleep=soon", "--sleep: must be a number of seconds (0 or more), not 'soon'"),
    ("--duty=0", "--duty: must be a share above 0 and at most 1, not '0'"),
    ("--duty=1.5", "--duty: must be a share above 0 and at most 1, not '1.5'"),
    ("--duty=nan", "--duty: must be a share above 0 and at most 1, not 'nan'"),
    ("--max-latency=0", "--max-latency: must be a number of milliseconds above 0, not '0'"),
    ("--max-latency=-5", "--max-latency: must be a number of milliseconds above 0, not '-5'"),
]


@pytest.mark.parametrize(("option", "message"), REFUSED)
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_refuses_a_bad_value_alike(name, option, message):
    with pytest.raises(CommandError) as raised:
        call_command(name, *COMMANDS[name], option, stdout=io.StringIO(), stderr=io.StringIO())
    assert message in str(raised.value)


def help_of(name: str) -> str:
    parser = load_command_class(get_commands()[name], name).create_parser("manage.py", name)
    return " ".join(parser.format_help().split())


@pytest.mark.parametrize(
    ("name", "worker", "batch", "probed"),
    [
        ("runcleaner", "the cleaner", "each batch", "the shard servers"),
        ("movebuckets", "the copy", "each copy or delete batch", "the sources and the target"),
        ("mapentities", "the run", "each batch", "the shard servers"),
    ],
)
def test_each_help_says_what_it_throttles(name, worker, batch, probed):
    shown = help_of(name)
    sleep = f"--sleep SLEEP Seconds to pause after {batch}, to throttle the load (default 0)."
    assert sleep in shown
    assert f"--duty DUTY Most share of wall time {worker} works, e.g. 0.5" in shown
    assert (
        f"--max-latency MAX_LATENCY Milliseconds: after {batch}, hold while a probe of {probed} "
        "(SELECT 1) takes longer than this, so writers go first (default: no probe)."
    ) in shown


def test_the_options_are_handed_over_in_seconds():
    assert throttle_options({"sleep": 0.5, "duty": 0.25, "max_latency": 40.0}) == {
        "sleep": 0.5,
        "duty": 0.25,
        "max_latency": 0.04,
    }
    assert throttle_options({"sleep": 0.0, "duty": 1.0, "max_latency": None})["max_latency"] is None
