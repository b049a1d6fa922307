"""Acknowledged means kept, at the process level: one daemon, seven tables written at once
(`group_commit` and `fsync`, a keyed table, a table whose columnar tier compacts while it is
written), one pipelined DoPut stream per table, SIGKILL at a random moment, restart on the
same directory — `SHOAL_CRASH_KILLS` times (default 40). After each restart every record
whose batch was acknowledged is there exactly once, nothing that was never sent is, and a
PSF lookup answers what a full scan answers.

Before the commit slots of the log's page footer, a group commit rewrote the whole open page
in place and a SIGKILL in that write cost every acknowledged record on the page (up to 424
per kill with six busy tables); the engine's deterministic counterpart is
`native/shoal-core/tests/crash_consistency.rs`.
"""

import json
import os
import random
import shutil
import signal
import threading
import time

import pyarrow as pa
import pyarrow.flight as flight

from conftest import Daemon, action, query_ids

SCHEMA = pa.schema([("json", pa.string())])
COLUMNAR = {"enabled": True, "file_log_bytes": 1 << 17, "idle_ms": 20, "codec": "lz4"}
TABLES = {
    "gc_a": {"durability": "group_commit", "group_commit_ms": 2},
    "gc_b": {"durability": "group_commit", "group_commit_ms": 5},
    "gc_c": {"durability": "group_commit"},
    "fs_a": {"durability": "fsync"},
    "fs_b": {"durability": "fsync"},
    "keyed": {"durability": "group_commit", "primary_key": "id"},
    "columnar": {"durability": "group_commit", "group_commit_ms": 2, "columnar": COLUMNAR},
}
BATCH = 8
IN_FLIGHT = 4


def record(table: str, n: int) -> str:
    pad = "x" * ((n * 37) % 400)
    return json.dumps({"id": f"{table}-{n:07d}", "type": f"T{n % 3}", "n": n, "pad": pad})


def write(location: str, table: str, first: int, sent: list[int], acknowledged: list[int], stop: threading.Event):
    """Sends batches of BATCH records from `first` on, at most IN_FLIGHT unacknowledged,
    until the daemon dies or `stop`; records in `sent` how far it sent and in
    `acknowledged` how far the daemon acknowledged (batches are acknowledged in order)."""
    n = first
    pending: list[int] = []
    try:
        client = flight.FlightClient(location)
        writer, reader = client.do_put(flight.FlightDescriptor.for_path(table), SCHEMA)
        while not stop.is_set():
            records = [record(table, i) for i in range(n, n + BATCH)]
            writer.write_batch(pa.record_batch([pa.array(records, pa.string())], schema=SCHEMA))
            n += BATCH
            sent[0] = n
            pending.append(n)
            if len(pending) >= IN_FLIGHT:
                ack = reader.read()
                if ack is None:
                    return  # the stream ended: the daemon is gone
                result = json.loads(ack.to_pybytes())
                assert result["durable_address"] >= result["end_address"], f"{table}: acknowledged before durable: {result}"
                acknowledged[0] = pending.pop(0)
    except (flight.FlightError, pa.ArrowException, OSError):
        pass  # the daemon was killed: what was acknowledged is recorded


def ids_of(client, table: str) -> list[int]:
    try:
        got, _ = query_ids(client, table)
    except pa.ArrowInvalid as e:
        assert "no record seen so far" in str(e), e
        return []  # the table has no record yet
    return [int(i.rsplit("-", 1)[1]) for i in got]


def write_until_killed(daemon, tables, present: dict, seconds: float):
    """One writer per table (from record `present[t]` on) into `daemon`, SIGKILLed after
    `seconds`; returns how far each table's writer sent and was acknowledged."""
    sent = {t: [present[t]] for t in tables}
    acknowledged = {t: [present[t]] for t in tables}
    stop = threading.Event()
    writers = [
        threading.Thread(target=write, args=(daemon.location, t, present[t], sent[t], acknowledged[t], stop), daemon=True)
        for t in tables
    ]
    for w in writers:
        w.start()
    time.sleep(seconds)
    daemon.process.send_signal(signal.SIGKILL)
    daemon.process.wait(30)
    stop.set()
    for w in writers:
        w.join(30)
    return sent, acknowledged


def check_after_restart(client, tables, sent: dict, acknowledged: dict, label: str) -> dict:
    """After a restart: every acknowledged record of each table is there exactly once and
    nothing that was never sent is; returns where each table's next round starts (after the
    highest id present: batches after the last acknowledged one may be partly there)."""
    present = {}
    for t in tables:
        got = ids_of(client, t)
        context = f"{label}, table {t}: sent up to {sent[t][0]}, acknowledged up to {acknowledged[t][0]}, {len(got)} present"
        assert len(got) == len(set(got)), f"records twice; {context}"
        have = set(got)
        missing = [i for i in range(acknowledged[t][0]) if i not in have]
        assert not missing, f"{len(missing)} acknowledged records lost (first {missing[:5]}); {context}"
        assert all(i < sent[t][0] for i in got), f"records that were never sent; {context}"
        present[t] = max(got, default=-1) + 1
    return present


def fresh_tables(data):
    """A daemon on an empty `data` directory with the tables of TABLES and their PSF."""
    shutil.rmtree(data, ignore_errors=True)
    daemon = Daemon(data)
    client = daemon.client()
    for name, options in TABLES.items():
        action(client, "create_table", {"name": name, "page_size_bits": 14, **options})
        action(client, "register_psf", {"table": name, "name": "by_type", "kind": "projection", "field": "type"})
    return daemon, client


def test_sigkill_during_concurrent_puts_into_many_tables_keeps_every_acknowledged_record(tmp_path):
    kills = int(os.environ.get("SHOAL_CRASH_KILLS", "40"))
    rng = random.Random(int(os.environ.get("SHOAL_CRASH_SEED", "50")))
    # Long soaks (bench/crash_soak.py) start from empty tables every so many kills, so that
    # the checks after each kill do not grow with the run.
    reset_every = int(os.environ.get("SHOAL_CRASH_RESET_EVERY", "0"))
    data = tmp_path / "data"
    daemon, client = fresh_tables(data)
    # Per table: records 0..present[t] are there (each exactly once) after the last restart.
    present = {t: 0 for t in TABLES}
    total_acknowledged = 0
    for kill in range(kills):
        if reset_every and kill and kill % reset_every == 0:
            assert daemon.stop() == 0
            daemon, client = fresh_tables(data)
            present = {t: 0 for t in TABLES}
        sent, acknowledged = write_until_killed(daemon, TABLES, present, rng.uniform(0.05, 0.6))
        daemon = Daemon(data)
        client = daemon.client()
        present = check_after_restart(client, TABLES, sent, acknowledged, f"kill {kill}")
        for t in TABLES:
            total_acknowledged += acknowledged[t][0]
        # PSF answers equal full scans on one table per round (all of them once in seven).
        t = list(TABLES)[kill % len(TABLES)]
        if present[t] == 0:
            continue
        indexed, plan = query_ids(client, t, "type = 'T1'")
        full, _ = query_ids(client, t, "type = 'T1' OR n < 0")
        assert indexed == full, f"kill {kill}, table {t}: PSF answer differs from a full scan ({plan})"
    assert daemon.stop() == 0
    print(f"{kills} kills; {total_acknowledged} acknowledged records checked in all (each round checks every earlier one again)")
    assert all(present[t] > 0 for t in TABLES), f"a table never got a record: {present}"
