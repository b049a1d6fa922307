"""The Python examples (examples/python/*.py) run as a user runs them: each script, as a
subprocess of this interpreter, twice in a row against one daemon. Both runs must succeed and
the second must print the same answers as the first (each script starts its table afresh);
the first run takes the endpoint as its argument, the second from SHOAL_ENDPOINT. Also:
examples/python/requirements.txt names every package the scripts import, at the versions of
requirements-test.txt (the file CI installs)."""

import ast
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

EXAMPLES = REPO / "examples" / "python"
SCRIPTS = ["quickstart.py", "one_call.py", "keyed.py", "flight_sql.py"]
# The pip package of each third-party module the examples import.
PACKAGES = {"pyarrow": "pyarrow", "adbc_driver_flightsql": "adbc-driver-flightsql", "adbc_driver_manager": "adbc-driver-manager"}


def run(script: str, *args: str, env: dict | None = None) -> str:
    """The standard output of one run of `script`, which must exit 0."""
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})},
    )
    assert out.returncode == 0, f"{script} {' '.join(args)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def run_twice(script: str, daemon) -> tuple[str, str]:
    first = run(script, daemon.location)
    second = run(script, env={"SHOAL_ENDPOINT": daemon.location})
    return first, second


def dropped(table: str) -> str:
    """The line a script prints when it drops the table an earlier run left."""
    return str({"dropped": True, "name": table}) + "\n"


def test_all_examples_are_tested():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(SCRIPTS)


def test_quickstart_runs_twice(daemon):
    first, second = run_twice("quickstart.py", daemon)
    lines = first.splitlines()
    assert lines[0] == str({"created": True, "name": "quickstart"}), first
    acks = [ast.literal_eval(line.removeprefix("ack: ")) for line in lines if line.startswith("ack: ")]
    assert [(a["records"], a["skipped"]) for a in acks] == [(3, 0), (1, 0)], first
    psf = ast.literal_eval(lines[2])
    assert psf["name"] == "by_type" and psf["safe_register_address"] == acks[0]["end_address"], first
    # The plan: one index scan over the whole table (the backfill covers the records the PSF
    # found), no full scan.
    start = first.index("plan: ") + len("plan: ")
    plan = json.loads(first[start: first.index("\n}\n", start) + 2])
    assert [(s["from"], s["psfs"]) for s in plan["index_scans"]] == [(64, ["by_type"])], first
    assert plan["full_scans"] == [], first
    rows = ast.literal_eval(lines[-1])
    assert sorted((r["id"], r["actor.login"]) for r in rows) == [(1, "alice"), (3, "carol"), (4, "dave")], first
    assert second == dropped("quickstart") + first


def test_one_call_runs_twice(daemon):
    first, second = run_twice("one_call.py", daemon)
    lines = [json.loads(line) for line in first.splitlines() if line.startswith("{")]
    assert len(lines) == 5 and all(r["actor"]["login"] == "user7" and r["note"] == "caf\u00e9" for r in lines), first
    assert "20 rows" in first and "'count(*)': 1000" in first and "'max(id)': 999" in first, first
    assert second == dropped("lookups") + first


def test_keyed_runs_twice(daemon):
    first, second = run_twice("keyed.py", daemon)
    assert "1 {'id': 1, 'status': 'closed'}" in first and "4 {'id': 4, 'status': 'new'}" in first, first
    assert "3 {" not in first, first
    assert "open: [0, 2]" in first and "-> [0, 1, 2, 3, 4]" in first and "live rows 4" in first, first
    assert second == dropped("tickets") + first


def test_flight_sql_runs_twice(daemon):
    first, second = run_twice("flight_sql.py", daemon)
    assert "ingested 4 rows" in first, first
    assert "Oslo: [(1, 34), (3, 45)]" in first and "('Oslo', 2, 39.5)" in first and "older than 40: [3, 4]" in first, first
    assert "'full_scan'" in first and "tables: ['people_sql']" in first, first
    # mode="replace": the second run's ingest replaces the table, so the answers are the same.
    assert second == first


def test_requirements_name_every_import_at_the_tested_versions():
    requirements = [line.strip() for line in (EXAMPLES / "requirements.txt").read_text().splitlines()
                    if line.strip() and not line.startswith("#")]
    tested = {line.strip() for line in (REPO / "requirements-test.txt").read_text().splitlines()}
    assert set(requirements) <= tested, "examples/python/requirements.txt and requirements-test.txt disagree"
    named = {r.split(">")[0].split("=")[0].split("<")[0] for r in requirements}
    for script in SCRIPTS:
        tree = ast.parse((EXAMPLES / script).read_text())
        modules = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        modules |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        for module in modules - set(sys.stdlib_module_names):
            assert PACKAGES.get(module) in named, f"{script} imports {module}: not in examples/python/requirements.txt"
