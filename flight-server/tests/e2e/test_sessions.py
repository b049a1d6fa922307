"""Exactly-once over the wire: writer serial numbers in DoPut batch metadata, the
durability policies, and transactions (staged, invisible until commit, idempotent
commit) — across a SIGKILL of the daemon."""

import json
import signal

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from conftest import Daemon, action, github_events, query, query_ids

SCHEMA = pa.schema([("json", pa.string())])


def put_tagged(client, table, batches):
    """DoPut of (records, metadata dict) pairs; returns the PutResult metadata of each."""
    writer, reader = client.do_put(flight.FlightDescriptor.for_path(table), SCHEMA)
    acks = []
    with writer:
        for records, metadata in batches:
            batch = pa.record_batch([pa.array(records, pa.string())], schema=SCHEMA)
            writer.write_with_metadata(batch, pa.py_buffer(json.dumps(metadata).encode()))
            acks.append(json.loads(reader.read().to_pybytes()))
        writer.done_writing()
    return acks


def ids(client, table):
    return query_ids(client, table)[0]


def test_writer_serials_make_resends_exactly_once_and_fsync_acks_are_durable(tmp_path):
    events = github_events(1000)
    d = Daemon(tmp_path / "data")
    client = d.client()
    action(client, "create_table", {"name": "t", "durability": "fsync", "page_size_bits": 20})
    batches = [(events[i:i + 100], {"writer": "job-1", "serial": i // 100 + 1}) for i in range(0, 600, 100)]
    acks = put_tagged(client, "t", batches)
    assert [a["duplicate"] for a in acks] == [False] * 6
    assert all(a["durable_address"] >= a["end_address"] for a in acks), "fsync: acknowledged means durable"
    status = action(client, "writer_status", {"table": "t", "writer": "job-1"})
    assert status["last_serial"] == 6 and status["last_durable_serial"] == 6
    # The daemon dies; the writer resends everything from serial 1, then continues.
    d.process.send_signal(signal.SIGKILL)
    d.process.wait(30)
    d = Daemon(tmp_path / "data")
    try:
        client = d.client()
        assert action(client, "writer_status", {"table": "t", "writer": "job-1"})["last_serial"] == 6
        more = [(events[i:i + 100], {"writer": "job-1", "serial": i // 100 + 1}) for i in range(0, 1000, 100)]
        acks = put_tagged(client, "t", more)
        assert [a["duplicate"] for a in acks] == [True] * 6 + [False] * 4
        got = ids(client, "t")
        assert got == sorted(json.loads(e)["id"] for e in events), "every event exactly once"
        with pytest.raises(pa.ArrowInvalid, match="go together"):
            put_tagged(client, "t", [(events[:1], {"writer": "x"})])
        with pytest.raises(pa.ArrowInvalid, match="unknown field"):
            put_tagged(client, "t", [(events[:1], {"writr": "x", "serial": 1})])
    finally:
        assert d.stop() == 0


def test_transactions_stage_invisibly_commit_idempotently_and_survive_sigkill(tmp_path):
    events = github_events(900)
    d = Daemon(tmp_path / "data")
    client = d.client()
    action(client, "create_table", {"name": "t", "page_size_bits": 20})
    assert action(client, "begin_transaction", {"table": "t", "transaction": "sink-0-1"})["state"] == "open"
    acks = put_tagged(client, "t", [(events[i:i + 150], {"transaction": "sink-0-1"}) for i in range(0, 450, 150)])
    assert [a["staged"] for a in acks] == [150, 150, 150]
    count, _, _ = query(client, {"table": "t", "aggregates": [{"function": "count"}]})
    assert sum(count.column(0).to_pylist()) == 0, "staged records are invisible"
    with pytest.raises(pa.ArrowInvalid, match="record 1 of the batch"):
        put_tagged(client, "t", [(['{"ok": 1}', '{"broken"'], {"transaction": "sink-0-1"})])
    assert action(client, "prepare_transaction", {"table": "t", "transaction": "sink-0-1"})["state"] == "prepared"
    # A second transaction stays open; both outlive a SIGKILL.
    action(client, "begin_transaction", {"table": "t", "transaction": "sink-0-2"})
    put_tagged(client, "t", [(events[450:], {"transaction": "sink-0-2"})])
    d.process.send_signal(signal.SIGKILL)
    d.process.wait(30)

    d = Daemon(tmp_path / "data")
    try:
        client = d.client()
        states = {t["transaction"]: t["state"] for t in action(client, "list_transactions", {"table": "t"})}
        assert states == {"sink-0-1": "prepared", "sink-0-2": "open"}
        committed = action(client, "commit_transaction", {"table": "t", "transaction": "sink-0-1"})
        assert committed["state"] == "committed" and committed["records"] == 450
        again = action(client, "commit_transaction", {"table": "t", "transaction": "sink-0-1"})
        assert again["state"] == "committed", "commit is idempotent"
        assert action(client, "abort_transaction", {"table": "t", "transaction": "sink-0-2"})["state"] == "aborted"
        assert ids(client, "t") == sorted(json.loads(e)["id"] for e in events[:450])
        with pytest.raises((flight.FlightError, pa.ArrowInvalid), match="is committed; it cannot abort"):
            action(client, "abort_transaction", {"table": "t", "transaction": "sink-0-1"})
        with pytest.raises(pa.ArrowKeyError):
            action(client, "commit_transaction", {"table": "t", "transaction": "nope"})
    finally:
        assert d.stop() == 0
    # The committed outcome survives a restart too.
    d = Daemon(tmp_path / "data")
    try:
        client = d.client()
        assert action(client, "commit_transaction", {"table": "t", "transaction": "sink-0-1"})["state"] == "committed"
        assert len(ids(client, "t")) == 450
    finally:
        assert d.stop() == 0


def test_make_durable_writes_the_open_page_without_closing_it(tmp_path):
    d = Daemon(tmp_path / "data")
    try:
        client = d.client()
        action(client, "create_table", {"name": "t", "page_size_bits": 22})
        acks = put_tagged(client, "t", [(['{"id": "a"}', '{"id": "b"}'], {})])
        assert acks[0]["durable_address"] < acks[0]["end_address"], "policy none: not durable yet"
        durable = action(client, "make_durable", {"table": "t"})["durable_address"]
        assert durable >= acks[0]["end_address"]
        stats = action(client, "stats", {"table": "t"})
        assert stats["tail_address"] < 1 << 22, "the open page was not closed"
    finally:
        assert d.stop() == 0


def test_an_open_transactions_staged_records_are_recounted_after_a_crash(tmp_path):
    """After a SIGKILL, an open transaction's count comes from its staging file, which is cut
    after its last whole record: a batch the daemon wrote but never acknowledged is counted
    (so a writer that resends it sees a count it did not acknowledge at prepare, and aborts
    instead of committing it twice), and a torn record does not swallow what is staged next."""
    events = github_events(300)
    data = tmp_path / "data"
    d = Daemon(data)
    client = d.client()
    action(client, "create_table", {"name": "t"})
    action(client, "begin_transaction", {"table": "t", "transaction": "open-1"})
    put_tagged(client, "t", [(events[:100], {"transaction": "open-1"})])
    d.process.send_signal(signal.SIGKILL)
    d.process.wait(30)
    staged = next(data.rglob("open-1.staged"))
    whole = staged.stat().st_size
    # A batch written but never acknowledged (a whole record), then a torn one.
    record = events[100].encode()
    with open(staged, "ab") as f:
        f.write(len(record).to_bytes(4, "little") + record)
        f.write((500).to_bytes(4, "little") + b"torn")
    d = Daemon(data)
    try:
        client = d.client()
        [info] = action(client, "list_transactions", {"table": "t"})
        assert (info["state"], info["records"]) == ("open", 101), info
        assert staged.stat().st_size == whole + 4 + len(record), "cut after the last whole record"
        put_tagged(client, "t", [(events[101:150], {"transaction": "open-1"})])
        assert action(client, "prepare_transaction", {"table": "t", "transaction": "open-1"})["records"] == 150
        assert action(client, "commit_transaction", {"table": "t", "transaction": "open-1"})["records"] == 150
        assert ids(client, "t") == sorted(json.loads(e)["id"] for e in events[:150])
    finally:
        assert d.stop() == 0
