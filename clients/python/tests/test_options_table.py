"""clients/OPTIONS.md against both clients' code: every worker option of the
Python and the Node client is in the table under its name, and each
SQLSTATE's class is the one that client maps it to. Reads files only (no
server)."""
from __future__ import annotations

import inspect
import os
import re
from typing import Dict, List, Set

import pg_claim
from pg_claim._loop import WorkerBase
from pg_claim.errors import error_class

CLIENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DOC = os.path.join(CLIENTS, "OPTIONS.md")
NODE = os.path.join(CLIENTS, "node")


def _table(title: str) -> List[List[str]]:
    text = open(DOC, encoding="utf-8").read()
    section = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows[2:]]


def _name(cell: str) -> str:
    m = re.match(r"`([A-Za-z_]+)`", cell)
    return m.group(1) if m else ""


def _names(cell: str) -> Set[str]:
    return set(re.findall(r"`([A-Za-z_]+)`", cell.split(" (")[0]))


def test_every_python_option_is_in_the_table() -> None:
    documented = {_name(r[1]) for r in _table("Worker options")} - {""}
    params = set(inspect.signature(WorkerBase.__init__).parameters) - {"self"}
    assert params - documented == set(), "Python options missing from OPTIONS.md"
    assert documented - params == set(), "OPTIONS.md names Python options that do not exist"


def test_every_node_option_is_in_the_table() -> None:
    documented: Set[str] = set()
    for r in _table("Worker options"):
        documented |= _names(r[3])
    code = open(os.path.join(NODE, "lib", "worker.js"), encoding="utf-8").read()
    used: Set[str] = set(re.findall(r"options\.([A-Za-z]+)", code))
    for name in re.findall(r"duration\('([A-Za-z]+)'\)", code):   # name and nameMs
        used |= {name, name + "Ms"}
    used |= set(re.findall(r"const \{ ([a-z, ]+) \} = options", code)[0].replace(" ", "").split(","))
    used -= {"max"}   # pg.Pool's own, from poolConfig
    used |= {"connectionString", "pool", "poolConfig"}   # read by makePool (lib/util.js)
    util = open(os.path.join(NODE, "lib", "util.js"), encoding="utf-8").read()
    for opt in ("connectionString", "pool", "poolConfig"):
        assert f"options.{opt}" in util
    assert used - documented == set(), "Node options missing from OPTIONS.md"
    assert documented - used == set(), "OPTIONS.md names Node options that the worker does not read"
    types = open(os.path.join(NODE, "index.d.ts"), encoding="utf-8").read()
    for opt in documented - {"queue", "handler"}:
        assert re.search(rf"\n\s+{opt}\?:", types), f"index.d.ts does not declare {opt}"


def test_units_are_in_the_names() -> None:
    """One meaning for every duration: a Node option that takes a plain
    number of milliseconds says so in its name (...Ms), its short name takes
    an interval, and the Python option of the same row reads a plain number
    as seconds."""
    rows = [r for r in _table("Worker options") if "milliseconds" in r[4]]
    assert len(rows) >= 4
    for r in rows:
        node = _names(r[3])
        ms = {n for n in node if n.endswith("Ms")}
        assert ms, f"{r[0]}: no Node name says milliseconds"
        assert {n[:-2] for n in ms} <= node, f"{r[0]}: the short name is missing"
        assert "interval" in r[4] and f"milliseconds under `{ms.pop()}`" in r[4], r[0]
        if _name(r[1]):
            assert "seconds" in r[2], f"{r[0]}: the Python unit is not seconds"
    # Python's durations take a plain number as seconds, and intervals.
    from pg_claim._loop import interval_seconds
    assert interval_seconds(30) == 30.0 and interval_seconds("500 ms") == 0.5
    assert interval_seconds("2 min") == 120.0


def test_error_classes_match_both_clients() -> None:
    node = open(os.path.join(NODE, "lib", "errors.js"), encoding="utf-8").read()
    by_code: Dict[str, str] = dict(re.findall(r"'?([0-9A-Z]{5})'?: ([A-Za-z]+Error),", node))
    transient = re.search(r"TRANSIENT_CODES = new Set\(\[([^\]]*)\]\)", node)
    assert transient is not None
    for state, _meaning, py, js in _table("Errors"):
        py, js = py.strip("`"), js.strip("`")
        assert error_class(state).__name__ == py, state
        assert hasattr(pg_claim, py) or hasattr(pg_claim.errors, py)
        if state in by_code:
            assert by_code[state] == js, state
        else:
            assert f"'{state}'" in transient.group(1) and js == "TransientError", state
