"""Keyed tables through the daemon: `create_table` with a `primary_key`, DoPut batches
with an `op` column (upsert, delete, merge), queries that see each key's latest version
(full scans, index scans on the key and on a PSF, aggregates, time travel by
`to_address`), clear errors for bad keys and ops, SIGKILL recovery of every acknowledged
operation, exactly once (also when the kill lands in a log compaction), and log
compaction (`compact`, retention) that keeps every live row."""

import json
import random
import signal
import threading
import time

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from conftest import Daemon, action, query


def merge_patch(target, patch):
    """RFC 7386 (the oracle's own)."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = merge_patch(result.get(name), value)
    return result


def random_ops(rng: random.Random, count: int, keys: int):
    """`count` (op, document) pairs over `keys` keys: repeated keys, keys that come back
    after a delete, merges that add, change and remove nested fields."""
    out = []
    for _ in range(count):
        key = rng.randrange(keys)
        op = rng.choice(["upsert", "upsert", "delete", "merge"])
        if op == "delete":
            out.append((op, {"id": key}))
            continue
        n = {"a": rng.choice([None, rng.randrange(100)])}
        if rng.random() < 0.5:
            n["c"] = rng.randrange(5)
        out.append((op, {"id": key, "g": rng.choice([None, 0, 1, 2]), "n": n, "text": "x" * rng.randrange(200)}))
    return out


def apply(oracle: dict, op: str, document: dict):
    key = document["id"]
    if op == "upsert":
        oracle[key] = document
    elif op == "delete":
        oracle.pop(key, None)
    else:
        oracle[key] = merge_patch(oracle.pop(key, None), document)


def put_ops(client, table: str, ops, batch: int = 25, **metadata):
    """DoPut of (op, document) pairs with an `op` column; returns every batch's PutResult."""
    schema = pa.schema([("json", pa.string()), ("op", pa.string())])
    writer, reader = client.do_put(flight.FlightDescriptor.for_path(table), schema)
    acks = []
    with writer:
        for start in range(0, len(ops), batch):
            part = ops[start : start + batch]
            columns = [pa.array([json.dumps(d) for _, d in part]), pa.array([op for op, _ in part])]
            record_batch = pa.record_batch(columns, schema=schema)
            if metadata:
                writer.write_with_metadata(record_batch, pa.py_buffer(json.dumps(metadata).encode()))
            else:
                writer.write_batch(record_batch)
            acks.append(json.loads(reader.read().to_pybytes()))
        writer.done_writing()
    return acks


def rows(client, table: str, **command) -> dict:
    """Every matching row as {id: document}; fails on two versions of one key."""
    result, _, _ = query(client, {"table": table, "output": "json", **command})
    out = {}
    for text in result.column("json").to_pylist() if result is not None else []:
        document = json.loads(text)
        assert document["id"] not in out, f"two versions of key {document['id']}: {command}"
        out[document["id"]] = document
    return out


def check(client, table: str, oracle: dict):
    assert rows(client, table) == oracle
    for key in range(0, 40, 7):
        assert rows(client, table, filter=f"id = {key}") == ({key: oracle[key]} if key in oracle else {})
    assert rows(client, table, filter="g = 1") == {k: v for k, v in oracle.items() if v.get("g") == 1}
    assert rows(client, table, filter="n.a < 50") == {
        k: v for k, v in oracle.items() if isinstance(v.get("n", {}).get("a"), int) and v["n"]["a"] < 50
    }
    counted, _, _ = query(client, {"table": table, "aggregates": [{"function": "count"}]})
    assert counted.column(0).to_pylist() == [len(oracle)]
    assert action(client, "stats", {"table": table})["keys"]["live"] == len(oracle)


def test_upserts_deletes_and_merges_equal_a_dictionary_oracle_at_every_snapshot(daemon):
    client = daemon.client()
    created = action(client, "create_table", {"name": "users", "primary_key": "id", "page_size_bits": 14, "memory_budget_bytes": 1 << 17})
    assert created["created"] is True
    action(client, "register_psf", {"table": "users", "name": "g", "kind": "projection", "field": "g"})
    rng = random.Random(18)
    oracle, snapshots = {}, []
    for round_ in range(8):
        ops = random_ops(rng, 100, 40)
        put_ops(client, "users", ops)
        for op, document in ops:
            apply(oracle, op, document)
        check(client, "users", oracle)
        snapshots.append((action(client, "stats", {"table": "users"})["complete_until"], json.loads(json.dumps(oracle))))
    for address, then in snapshots:
        assert rows(client, "users", to_address=address) == {int(k): v for k, v in then.items()}, f"as of {address}"
    stats = action(client, "stats", {"table": "users"})
    assert stats["keys"]["primary_key"] == ["id"] and stats["keys"]["superseded"] > 0 and stats["keys"]["memory_bytes"] > 0
    assert [p["name"] for p in action(client, "list_psfs", {"table": "users"})] == ["primary_key", "g"]
    listed = {i.descriptor.path[0].decode(): i for i in client.list_flights()}
    assert listed["users"].total_records == len(oracle), "ListFlights counts a keyed table's live keys"


def test_bad_keys_ops_and_append_only_tables_get_clear_errors(daemon):
    client = daemon.client()
    action(client, "create_table", {"name": "k", "primary_key": ["tenant", "id"]})
    action(client, "create_table", {"name": "plain"})

    def refused(table, ops):
        with pytest.raises(pa.ArrowException) as error:
            put_ops(client, table, ops)
        return str(error.value)

    message = refused("k", [("upsert", {"tenant": "a", "id": 1}), ("upsert", {"tenant": "a", "id": None})])
    assert "record 1" in message and "(tenant, id)" in message, message
    message = refused("k", [("upsert", {"tenant": "a", "id": 1}), ("remove", {"tenant": "a", "id": 1})])
    assert "row 1" in message and "remove" in message, message
    message = refused("plain", [("delete", {"id": 1})])
    assert "keyed table" in message, message
    assert action(client, "stats", {"table": "k"})["records"] == 0, "nothing of a refused batch is written"
    with pytest.raises(pa.ArrowException, match="primary_key"):
        action(client, "create_table", {"name": "bad", "primary_key": []})
    with pytest.raises(pa.ArrowException, match="cannot be deregistered"):
        action(client, "deregister_psf", {"table": "k", "name": "primary_key"})


def test_sigkill_during_upserts_keeps_every_acknowledged_operation_exactly_once(tmp_path):
    """20 rounds: acknowledged (fsync) batches of upserts, deletes and merges, then SIGKILL
    — in the middle of a batch's stream on odd rounds; the recovered table equals the
    oracle of the acknowledged operations (an unacknowledged batch carries a writer serial
    and is resent, so it is applied exactly once)."""
    rng = random.Random(7)
    oracle = {}
    serial = 0
    data = tmp_path / "data"
    for round_ in range(20):
        d = Daemon(data)
        try:
            client = d.client()
            if round_ == 0:
                action(client, "create_table", {"name": "t", "primary_key": "id", "durability": "fsync", "page_size_bits": 14})
            else:
                assert rows(client, "t") == oracle, f"after kill {round_}"
            for _ in range(3):
                serial += 1
                ops = random_ops(rng, 20, 30)
                put_ops(client, "t", ops, batch=20, writer="w", serial=serial)
                for op, document in ops:
                    apply(oracle, op, document)
            if round_ % 4 == 2:
                # The kill lands in (or just after) a log compaction: it never loses a row.
                action(client, "checkpoint", {"table": "t"})
                compacting = threading.Thread(target=compact_quietly, args=(d, "t"), daemon=True)
                compacting.start()
                time.sleep(rng.random() * 0.05)
            if round_ % 2:
                # A batch in flight at the kill: sent, never acknowledged.
                serial += 1
                pending = random_ops(rng, 20, 30)
                schema = pa.schema([("json", pa.string()), ("op", pa.string())])
                writer, _ = client.do_put(flight.FlightDescriptor.for_path("t"), schema)
                columns = [pa.array([json.dumps(x) for _, x in pending]), pa.array([op for op, _ in pending])]
                writer.write_with_metadata(pa.record_batch(columns, schema=schema), pa.py_buffer(json.dumps({"writer": "w", "serial": serial}).encode()))
        finally:
            d.process.send_signal(signal.SIGKILL)
            d.process.wait(30)
        if round_ % 2:
            # The writer resends what it was never told was durable; a duplicate is skipped.
            d = Daemon(data)
            try:
                ack = put_ops(d.client(), "t", pending, batch=20, writer="w", serial=serial)[0]
                for op, document in pending:
                    apply(oracle, op, document)
                assert ack["records"] in (0, 20) and ack["duplicate"] is (ack["records"] == 0)
            finally:
                d.process.send_signal(signal.SIGKILL)
                d.process.wait(30)
    d = Daemon(data)
    try:
        client = d.client()
        check(client, "t", oracle)
    finally:
        assert d.stop() == 0


def compact_quietly(d: Daemon, table: str):
    """The `compact` action, on its own connection, whatever becomes of the daemon."""
    try:
        action(d.client(), "compact", {"table": table})
    except (pa.ArrowException, OSError):
        pass


def test_compaction_drops_obsolete_versions_keeps_live_rows_and_refuses_older_snapshots(daemon, tmp_path):
    """`compact` (FASTER's roll to tail): the live rows stay, every obsolete version below
    the flushed address goes, the key index forgets deleted keys, time travel below the
    snapshot horizon is refused by name and above it still answers; `shoal compact` and
    the retention policy's `compact_obsolete_percent` do the same."""
    from test_cli import cli

    client = daemon.client()
    columnar = {"enabled": True, "file_log_bytes": 1 << 15, "row_group_rows": 64, "idle_ms": 0}
    action(client, "create_table", {"name": "users", "primary_key": "id", "page_size_bits": 14, "memory_budget_bytes": 1 << 17, "columnar": columnar})
    action(client, "register_psf", {"table": "users", "name": "g", "kind": "projection", "field": "g"})
    rng = random.Random(180)
    oracle = {}
    for _ in range(6):
        ops = random_ops(rng, 150, 40)
        put_ops(client, "users", ops)
        for op, document in ops:
            apply(oracle, op, document)
    before = action(client, "stats", {"table": "users"})
    old_snapshot = before["complete_until"]
    action(client, "checkpoint", {"table": "users"})
    # The columnar files hold every version; their scans see one per key, as the log's do.
    deadline = time.monotonic() + 60
    while (stats := action(client, "stats", {"table": "users"})["columnar"])["files"] == 0 or stats["backlog_bytes"] > 0:
        assert time.monotonic() < deadline, stats
        time.sleep(0.05)
    check(client, "users", oracle)
    _, _, plan = query(client, {"table": "users", "filter": "n.a < 50", "output": "json"})
    assert "columnar" in json.dumps(plan), plan
    report = action(client, "compact", {"table": "users", "wait_ms": 5000})
    assert report["deferred"] is False and report["begin_address"] > report["previous_begin_address"], report
    # The open page (flushed in part by the checkpoint) stays: its versions are not copied.
    assert 0 < report["versions_copied"] <= len(oracle) and report["superseded_dropped"] > 0, report
    check(client, "users", oracle)
    stats = action(client, "stats", {"table": "users"})["keys"]
    assert stats["superseded"] < before["keys"]["superseded"], stats
    assert stats["keys"] - stats["live"] < before["keys"]["keys"] - before["keys"]["live"], "deleted keys were forgotten"
    assert stats["memory_bytes"] < before["keys"]["memory_bytes"]
    horizon = stats["snapshot_horizon"]
    assert horizon == report["snapshot_horizon"] > old_snapshot
    with pytest.raises(pa.ArrowException, match="snapshot horizon") as refused:
        rows(client, "users", to_address=old_snapshot)
    assert "OUT_OF_RANGE" in str(refused.value) or isinstance(refused.value, flight.FlightError), refused.value
    assert rows(client, "users", to_address=horizon) == oracle

    # The CLI, and a policy that compacts as soon as a tenth of the versions are obsolete.
    ops = [("upsert", {"id": k, "g": 1, "n": {}, "text": f"again {round_} " * 60}) for round_ in range(4) for k in range(40)]
    put_ops(client, "users", ops)
    for op, document in ops:
        apply(oracle, op, document)
    action(client, "checkpoint", {"table": "users"})
    compacted = json.loads(cli(daemon, "compact", "users", "--wait-ms", "5000"))
    assert compacted["versions_copied"] > 0 and compacted["superseded_dropped"] > 0 and compacted["table"] == "users", compacted
    check(client, "users", oracle)
    altered = json.loads(cli(daemon, "alter-table", "users", "--compact-obsolete-percent", "10"))
    assert altered["retention"] == {"compact_obsolete_percent": 10}, altered
    with pytest.raises(pa.ArrowException, match="compact_obsolete_percent"):
        action(client, "alter_table", {"table": "users", "retention": {"compact_obsolete_percent": 101}})
    action(client, "create_table", {"name": "plain"})
    with pytest.raises(pa.ArrowException, match="append-only"):
        action(client, "compact", {"table": "plain"})


def test_cli_creates_upserts_merges_and_deletes_by_key(daemon, tmp_path):
    """`shoal create-table --primary-key`, `shoal ingest --op`, `shoal delete --where`, and
    the `delete` action (SQL's DELETE FROM) it calls."""
    from test_cli import cli

    created = json.loads(cli(daemon, "create-table", "tickets", "--primary-key", "id"))
    assert created["created"] is True
    path = tmp_path / "tickets.ndjson"
    path.write_text("".join(json.dumps({"id": i, "status": "open", "owner": {"name": f"u{i}"}}) + "\n" for i in range(10)))
    assert "ingested 10 of 10 records" in cli(daemon, "ingest", "--table", "tickets", str(path))
    patch = "".join(json.dumps({"id": i, "status": "closed", "owner": {"name": None}}) + "\n" for i in range(0, 10, 2))
    assert "ingested 5 of 5 records" in cli(daemon, "ingest", "--table", "tickets", "--op", "merge", "-", stdin=patch)
    client = daemon.client()
    expected = {i: {"id": i, "status": "closed" if i % 2 == 0 else "open", "owner": {} if i % 2 == 0 else {"name": f"u{i}"}} for i in range(10)}
    assert rows(client, "tickets") == expected
    deleted = json.loads(cli(daemon, "delete", "tickets", "--where", "status = 'closed'"))
    assert deleted["deleted"] == 5
    assert rows(client, "tickets") == {i: v for i, v in expected.items() if i % 2}
    cli(daemon, "ingest", "--table", "tickets", "--op", "delete", "-", stdin='{"id": 1}\n{"id": 99}\n')
    assert sorted(rows(client, "tickets")) == [3, 5, 7, 9]
    assert action(client, "delete", {"table": "tickets"})["deleted"] == 4
    assert rows(client, "tickets") == {} and action(client, "stats", {"table": "tickets"})["keys"]["live"] == 0
    action(client, "create_table", {"name": "plain"})
    with pytest.raises(pa.ArrowException, match="keyed table"):
        action(client, "delete", {"table": "plain", "filter": "id = 1"})


def test_transactions_stage_deletes_and_merges_and_commit_them_once(start_daemon):
    """Flink's exactly-once sink stages a changelog in a transaction: its upserts, deletes and
    merges (in the staging file, with their operations) are invisible until the commit and
    applied once by it; a record without the key is refused when staged."""
    d = start_daemon()
    client = d.client()
    action(client, "create_table", {"name": "t", "primary_key": "id"})
    put_ops(client, "t", [("upsert", {"id": i, "v": 0}) for i in range(5)])
    action(client, "begin_transaction", {"table": "t", "transaction": "cp-1"})
    staged = put_ops(client, "t", [("delete", {"id": 0}), ("merge", {"id": 1, "w": 1}), ("upsert", {"id": 9, "v": 9}), ("merge", {"id": 1, "v": None})], transaction="cp-1")
    assert staged[0]["staged"] == 4
    assert sorted(rows(client, "t")) == [0, 1, 2, 3, 4], "staged operations are invisible"
    with pytest.raises(pa.ArrowException, match="primary key"):
        put_ops(client, "t", [("delete", {"other": 1})], transaction="cp-1")
    action(client, "prepare_transaction", {"table": "t", "transaction": "cp-1"})
    assert action(client, "commit_transaction", {"table": "t", "transaction": "cp-1"})["records"] == 4
    assert action(client, "commit_transaction", {"table": "t", "transaction": "cp-1"})["state"] == "committed"
    assert rows(client, "t") == {1: {"id": 1, "w": 1}, 2: {"id": 2, "v": 0}, 3: {"id": 3, "v": 0}, 4: {"id": 4, "v": 0}, 9: {"id": 9, "v": 9}}
