"""The daemon restarted on its data directory: after SIGTERM every record, PSF and
chain is back; after SIGKILL everything acknowledged as durable (a `checkpoint` action
answered) is back exactly once."""

import json
import signal

from conftest import Daemon, action, github_events, put
from conftest import query_ids as ids


def test_restart_after_sigterm_recovers_records_psfs_and_index_scans(tmp_path):
    events = github_events(3000)
    records = [json.loads(e) for e in events]
    d = Daemon(tmp_path / "data")
    client = d.client()
    action(client, "create_table", {"name": "events", "page_size_bits": 18})
    put(client, "events", events[:1000])
    registered = action(client, "register_psf", {"table": "events", "name": "type", "kind": "projection", "field": "type"})
    put(client, "events", events[1000:2000])
    assert d.stop() == 0

    d = Daemon(tmp_path / "data")
    try:
        assert any("table recovered" in line for line in d.log_lines), d.log_lines
        client = d.client()
        psfs = action(client, "list_psfs", {"table": "events"})
        assert [(p["name"], p["safe_register_address"]) for p in psfs] == [("type", registered["safe_register_address"])]
        put(client, "events", events[2000:])
        got, meta = ids(client, "events", "type = 'IssuesEvent'")
        assert got == sorted(r["id"] for r in records if r["type"] == "IssuesEvent")
        assert [s["psfs"] for s in meta["plan"]["index_scans"]] == [["type"]]
        assert action(client, "stats", {"table": "events"})["records"] == 3000
        assert action(client, "create_table", {"name": "events", "if_not_exists": True})["created"] is False
    finally:
        assert d.stop() == 0


def test_sigkill_keeps_every_record_acknowledged_by_a_checkpoint(tmp_path):
    events = github_events(2000)
    d = Daemon(tmp_path / "data")
    client = d.client()
    action(client, "create_table", {"name": "t", "page_size_bits": 18})
    put(client, "t", events[:1200])
    flushed = action(client, "checkpoint", {"table": "t"})
    assert flushed["flushed_until_address"] > 0
    put(client, "t", events[1200:])
    d.process.send_signal(signal.SIGKILL)
    d.process.wait(30)

    d = Daemon(tmp_path / "data")
    try:
        got, _ = ids(d.client(), "t")
        assert len(got) == len(set(got)), "no record twice"
        acknowledged = sorted(json.loads(e)["id"] for e in events[:1200])
        assert set(acknowledged) <= set(got), "every record acknowledged by the checkpoint is back"
        assert set(got) <= {json.loads(e)["id"] for e in events}, "nothing that was never sent"
    finally:
        assert d.stop() == 0


def test_truncate_drops_the_head_of_the_log_and_survives_restart(tmp_path):
    events = github_events(3000)
    d = Daemon(tmp_path / "data")
    client = d.client()
    action(client, "create_table", {"name": "t", "page_size_bits": 18})
    put(client, "t", events[:1500])
    middle = action(client, "checkpoint", {"table": "t"})["flushed_until_address"]
    put(client, "t", events[1500:])
    action(client, "checkpoint", {"table": "t"})
    report = action(client, "truncate", {"table": "t", "before_address": middle})
    assert 0 < report["begin_address"] <= middle and report["begin_address"] > report["previous_begin_address"]
    kept, _ = ids(client, "t")
    assert set(json.loads(e)["id"] for e in events[1500:]) <= set(kept)
    assert len(kept) < len(events)
    try:
        action(client, "truncate", {"table": "t", "keep_bytes": 1, "before_address": 5})
        raise AssertionError("two rules accepted")
    except Exception as e:  # noqa: BLE001 - pyarrow maps INVALID_ARGUMENT to ArrowInvalid
        assert "exactly one" in str(e)
    assert d.stop() == 0
    d = Daemon(tmp_path / "data")
    try:
        again, _ = ids(d.client(), "t")
        assert again == kept
        assert action(d.client(), "stats", {"table": "t"})["begin_address"] == report["begin_address"]
    finally:
        assert d.stop() == 0
