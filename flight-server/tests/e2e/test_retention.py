"""Retention policies (create_table's `retention`, Kafka's retention.bytes/ms): the daemon
truncates each table's log head every `retention_check_secs`, the policy survives a restart,
a policy that cannot work is refused at create_table, and alter_table replaces a table's
policy."""

import json
import time

import pyarrow as pa
import pytest

from conftest import Daemon, action, put, query


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    return predicate()


def count(client, table):
    result, _, _ = query(client, {"table": table, "aggregates": [{"function": "count"}]})
    return result.column(0)[0].as_py()


def test_a_retention_policy_keeps_about_its_bytes_and_survives_a_restart(tmp_path):
    data = tmp_path / "data"
    d = Daemon(data, "--retention-check-secs", "1")
    client = d.client()
    # 64 KiB pages, keep about 256 KiB (4 pages) of log.
    action(client, "create_table", {"name": "logs", "page_size_bits": 16, "retention": {"keep_bytes": 262144},
                                    "columnar": {"enabled": False}})
    records = [json.dumps({"id": i, "text": "x" * 200}) for i in range(10_000)]
    put(client, "logs", records)
    action(client, "checkpoint", {"table": "logs"})  # flushes: only flushed pages are dropped
    stats = wait_for(lambda: (s := action(client, "stats", {"table": "logs"}))["begin_address"] > 64 and s)
    assert stats, "retention never truncated the log"
    kept = stats["tail_address"] - stats["begin_address"]
    assert 262144 <= kept < 262144 + 2 * 65536, stats
    left = count(client, "logs")
    assert 0 < left < 10_000 and left <= kept // 200, left
    # The newest records are the ones kept.
    ids, _, _ = query(client, {"table": "logs", "columns": ["id"]})
    assert max(ids.column("id").to_pylist()) == 9_999
    assert d.stop() == 0

    d = Daemon(data, "--retention-check-secs", "1")
    try:
        client = d.client()
        assert action(client, "stats", {"table": "logs"})["begin_address"] == stats["begin_address"]
        put(client, "logs", [json.dumps({"id": 10_000 + i, "text": "y" * 200}) for i in range(5_000)])
        action(client, "checkpoint", {"table": "logs"})
        later = wait_for(lambda: (s := action(client, "stats", {"table": "logs"}))["begin_address"] > stats["begin_address"] and s)
        assert later, "the policy was not kept across the restart"
        assert later["tail_address"] - later["begin_address"] < 262144 + 2 * 65536, later
    finally:
        assert d.stop() == 0


def test_retention_policies_that_cannot_work_are_refused(start_daemon):
    client = start_daemon("--in-memory").client()
    with pytest.raises(pa.ArrowInvalid, match="max_age_secs ages segment files"):
        action(client, "create_table", {"name": "t", "retention": {"max_age_secs": 60}})
    with pytest.raises(pa.ArrowInvalid, match="must be positive"):
        action(client, "create_table", {"name": "t", "retention": {"keep_bytes": 0}})
    with pytest.raises(pa.ArrowInvalid, match="unknown field `keep`"):
        action(client, "create_table", {"name": "t", "retention": {"keep": 5}})
    # An in-memory table's ring frees pages for new batches as retention drops old ones.
    action(client, "create_table", {"name": "t", "retention": {"keep_bytes": 1 << 20}})
    assert action(client, "stats", {"table": "t"})["records"] == 0


def test_alter_table_replaces_the_policy_which_the_daemon_applies_and_keeps(tmp_path):
    from test_cli import cli

    data = tmp_path / "data"
    d = Daemon(data, "--retention-check-secs", "1")
    try:
        client = d.client()
        action(client, "create_table", {"name": "logs", "page_size_bits": 16, "columnar": {"enabled": False}})
        put(client, "logs", [json.dumps({"id": i, "text": "x" * 200}) for i in range(10_000)])
        action(client, "checkpoint", {"table": "logs"})
        time.sleep(1.5)
        assert action(client, "stats", {"table": "logs"})["begin_address"] == 64, "no policy: everything kept"

        # The action: keep about 256 KiB from now on.
        answer = action(client, "alter_table", {"table": "logs", "retention": {"keep_bytes": 262144}})
        assert answer["retention"]["keep_bytes"] == 262144 and answer["previous_retention"].get("keep_bytes") is None, answer
        stats = wait_for(lambda: (s := action(client, "stats", {"table": "logs"}))["begin_address"] > 64 and s)
        assert stats, "the altered policy was never applied"
        assert 262144 <= stats["tail_address"] - stats["begin_address"] < 262144 + 2 * 65536, stats
        assert stats["retention"]["keep_bytes"] == 262144

        # The CLI: a smaller policy, then refusals named.
        out = json.loads(cli(d, "alter-table", "logs", "--retention-bytes", "131072"))
        assert out["previous_retention"]["keep_bytes"] == 262144 and out["retention"]["keep_bytes"] == 131072
        with pytest.raises(pa.ArrowInvalid, match="must be positive"):
            action(client, "alter_table", {"table": "logs", "retention": {"keep_bytes": 0}})
        with pytest.raises(pa.ArrowInvalid, match="unknown field `page_size_bits`"):
            action(client, "alter_table", {"table": "logs", "retention": {}, "page_size_bits": 12})
        with pytest.raises(pa.ArrowException, match="no_such"):
            action(client, "alter_table", {"table": "no_such", "retention": {}})
    finally:
        assert d.stop() == 0

    d = Daemon(data, "--retention-check-secs", "1")
    try:
        client = d.client()
        assert action(client, "stats", {"table": "logs"})["retention"]["keep_bytes"] == 131072, "kept across a restart"
        cli(d, "alter-table", "logs", "--no-retention")
        assert action(client, "stats", {"table": "logs"})["retention"].get("keep_bytes") is None
    finally:
        assert d.stop() == 0
