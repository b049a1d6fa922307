"""PSF backfill through the daemon: PSFs registered over a table that holds GitHub events come
to cover the whole table (docs/protocol.md, register_psf's "backfill"); answers equal a Python
oracle while the backfill runs, with records ingested meanwhile, after a SIGKILL in the middle
of it (the restarted daemon resumes it), and through `shoal psf add --wait`."""

import json
import signal
import subprocess
import time

from conftest import Daemon, action, dig, github_events, put, query, query_ids, shoal_binary

# 16 KiB pages: a run indexes 16 pages (256 KiB of log), dozens of runs for these events.
# Acknowledged = durable, so that the SIGKILL loses no record the oracle counts.
TABLE = {"name": "ev", "page_size_bits": 14, "durability": "group_commit"}
PSFS = [
    {"name": "type", "kind": "projection", "field": "type"},
    {"name": "opened", "kind": "predicate", "expr": "type = 'IssuesEvent' AND payload.action = 'opened'"},
    {"name": "size", "kind": "range", "field": "payload.size", "boundaries": [1, 2, 5]},
]


def oracle(records, text):
    tests = {
        "type = 'WatchEvent'": lambda r: r["type"] == "WatchEvent",
        "type = 'IssuesEvent' AND payload.action = 'opened'": lambda r: r["type"] == "IssuesEvent" and dig(r, "payload.action") == "opened",
        "payload.size >= 2": lambda r: isinstance(dig(r, "payload.size"), (int, float)) and dig(r, "payload.size") >= 2,
        "type IN ('ForkEvent', 'CreateEvent')": lambda r: r["type"] in ("ForkEvent", "CreateEvent"),
    }
    if text.startswith("actor.login = "):
        login = text.split("'")[1]
        return sorted(r["id"] for r in records if r["actor"]["login"] == login)
    return sorted(r["id"] for r in records if tests[text](r))


def check(client, records, logins=()):
    """Every filter answers as the oracle; returns the plans."""
    plans = {}
    for text in ["type = 'WatchEvent'", "type = 'IssuesEvent' AND payload.action = 'opened'", "payload.size >= 2",
                 "type IN ('ForkEvent', 'CreateEvent')", *(f"actor.login = '{l}'" for l in logins)]:
        ids, meta = query_ids(client, "ev", text)
        assert ids == oracle(records, text), (text, sorted(set(oracle(records, text)) - set(ids)), meta["plan"], backfills(client))
        plans[text] = meta["plan"]
    return plans


def backfills(client):
    return {p["name"]: p for p in action(client, "list_psfs", {"table": "ev"}) if p["active"]}


def test_a_backfill_covers_the_table_through_a_sigkill_and_psf_add_waits_for_it(tmp_path):
    events = [e for e in github_events(6000) if len(e) < 15_000][:5000]
    records = [json.loads(e) for e in events]
    data = tmp_path / "data"
    runs_dir = data / "tables" / "ev" / "backfill"
    first = Daemon(data)
    try:
        client = first.client()
        action(client, "create_table", TABLE)
        put(client, "ev", events[:4000])
        for psf in PSFS:
            registered = action(client, "register_psf", {"table": "ev", **psf})
            assert registered["coverage"]["to"] == "tail" and registered["backfill"]["target"] == 64, registered
        # SIGKILL while the backfills run (the last one has just started).
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(30)
    finally:
        if first.alive():
            first.stop()
    made_before = {p.name for p in runs_dir.glob("*.run")}

    second = Daemon(data)
    try:
        client = second.client()
        # Resumed at open; records ingested while it runs; answers exact meanwhile.
        pending = action(client, "stats", {"table": "ev"})["backfills"]
        assert all(b["remaining_bytes"] > 0 and b["target"] == 64 for b in pending), pending
        put(client, "ev", events[4000:4500])
        check(client, records[:4500])
        # `shoal psf add --wait`: a new PSF, backfilled before the command returns.
        out = subprocess.run([str(shoal_binary()), "psf", "add", "ev", "--name", "login", "--projection", "actor.login", "--wait",
                              "--endpoint", f"127.0.0.1:{second.port}"], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        login = json.loads(out.stdout)
        assert login["backfill"]["done"] is True and login["coverage"]["from"] == 64, login
        deadline = time.monotonic() + 120
        while not all(p["backfill"]["done"] for p in backfills(client).values()):
            assert time.monotonic() < deadline, backfills(client)
            time.sleep(0.05)
        for psf in backfills(client).values():
            assert psf["coverage"]["from"] == 64 and psf["backfill"]["runs"] > 10, psf
        assert action(client, "stats", {"table": "ev"})["backfills"] == []
        # The runs made before the kill were kept, not made again.
        assert made_before <= {p.name for p in runs_dir.glob("*.run")}, made_before
        logins = [records[i]["actor"]["login"] for i in (5, 1500, 3900)]
        plans = check(client, records[:4500], logins)
        # The index covers the whole table: a selective filter is one index scan, nothing else.
        for text in [f"actor.login = '{l}'" for l in logins] + ["type = 'IssuesEvent' AND payload.action = 'opened'"]:
            plan = plans[text]
            assert [s["from"] for s in plan["index_scans"]] == [64] and plan["full_scans"] == [], (text, plan)
        assert "columnar_scans" not in plans[f"actor.login = '{logins[0]}'"]
        # A forward-only PSF, and a deregistered one's coverage back to its chains.
        forward = action(client, "register_psf", {"table": "ev", "name": "repo", "kind": "projection", "field": "repo.name", "backfill": False})
        assert forward["backfill"] is None and forward["coverage"]["from"] == forward["safe_register_address"], forward
        dropped = action(client, "deregister_psf", {"table": "ev", "name": "login"})
        assert dropped["backfill"] is None and dropped["coverage"]["from"] == dropped["safe_register_address"], dropped
        assert not list(runs_dir.glob(f"psf-{login['id']}-*"))
        assert second.alive()
    finally:
        second.stop()
