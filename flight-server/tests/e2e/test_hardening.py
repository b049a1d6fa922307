"""Regression tests of outside probes that took the daemon down, hid data or held
resources, re-run against the real `shoal` binary with a pyarrow client. Each failed
before its fix."""

import json
import os
import signal
import subprocess
import threading
import time

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from conftest import Daemon, action, put, query, shoal_binary

FILTER_LIMIT = 4096  # shoal_core::psf::expr::MAX_EXPR_OPERATORS
# pyarrow maps some status codes (NOT_FOUND, OUT_OF_RANGE, RESOURCE_EXHAUSTED) to
# ArrowException subclasses and others to FlightError subclasses.
ANY_ERROR = (pa.ArrowException, flight.FlightError)
# A call past its client-side timeout: pyarrow reports "Timeout expired" as either.
TIMED_OUT = (flight.FlightTimedOutError, flight.FlightCancelledError)


def records(n: int, start: int = 0) -> list[str]:
    return [json.dumps({"id": i, "name": f"n{i}"}) for i in range(start, start + n)]


def test_huge_filters_are_refused_and_the_daemon_lives(daemon):
    """`" AND ".join(["id >= 0"] * 3000)` overflowed a worker's stack (SIGABRT)."""
    client = daemon.client()
    action(client, "create_table", {"name": "t"})
    put(client, "t", records(10))
    for text in [" AND ".join(["id >= 0"] * 3000), " OR ".join(["id >= 0"] * 100_000), "(" * 5000 + "id = 1" + ")" * 5000]:
        with pytest.raises(pa.ArrowInvalid) as error:
            client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps({"table": "t", "filter": text})))
        message = str(error.value)
        assert "limit" in message or "nested too deeply" in message, message
        assert len(message) < 8192, "the error echoes the whole filter"
        with pytest.raises(pa.ArrowInvalid):
            action(client, "register_psf", {"table": "t", "name": "p", "kind": "predicate", "expr": text})
        # A one-call DoGet (the query command as the ticket) of the same filter is refused the same way.
        ticket = {"table": "t", "filter": text}
        with pytest.raises(pa.ArrowInvalid) as error:
            client.do_get(flight.Ticket(json.dumps(ticket).encode())).read_all()
        assert "limit" in str(error.value) or "nested too deeply" in str(error.value), str(error.value)
        assert daemon.alive()
    # Chains up to the limit still work, and the answer is right.
    text = " AND ".join(["id >= 0"] * (FILTER_LIMIT // 2))
    result, _, _ = query(client, {"table": "t", "filter": text, "columns": ["id"]})
    assert sorted(result.column("id").to_pylist()) == list(range(10))


def test_sigkill_after_a_checkpoint_of_an_open_page_keeps_every_record_queryable(tmp_path):
    """After checkpoint + SIGKILL, count(*) said 2,000 but the schema was empty,
    SELECT * returned nothing and `columns: ["id"]` was an unknown column."""
    data = tmp_path / "data"
    d = Daemon(data)
    client = d.client()
    action(client, "create_table", {"name": "t"})
    put(client, "t", records(2000))
    action(client, "checkpoint", {"table": "t"})
    d.process.send_signal(signal.SIGKILL)
    d.process.wait(30)
    d = Daemon(data)
    try:
        client = d.client()
        assert action(client, "stats", {"table": "t"})["records"] == 2000
        whole, _, _ = query(client, {"table": "t"})
        assert whole.num_rows == 2000 and set(whole.schema.names) == {"id", "name"}
        ids, _, _ = query(client, {"table": "t", "columns": ["id"]})
        assert sorted(ids.column("id").to_pylist()) == list(range(2000))
    finally:
        assert d.stop() == 0


def test_in_memory_table_refuses_what_does_not_fit_and_keeps_what_it_acknowledged(start_daemon):
    """With --in-memory and a ring smaller than the data, 15,648 of 60,000
    acknowledged records were left, the plan still saying exact."""
    d = start_daemon("--in-memory", "--memory-budget-mb", "1")
    client = d.client()
    action(client, "create_table", {"name": "t"})
    schema = pa.schema([("json", pa.string())])
    writer, reader = client.do_put(flight.FlightDescriptor.for_path("t"), schema)
    acknowledged = 0
    refusal = None
    try:
        for batch in range(200):
            # ~400 bytes each: 40 MB in all, over a ring of at least 4 pages of 4 MiB.
            rows = [json.dumps({"id": i, "pad": "x" * 380}) for i in range(batch * 500, (batch + 1) * 500)]
            writer.write_batch(pa.record_batch([pa.array(rows, pa.string())], schema=schema))
            answer = reader.read()
            if answer is None:  # the stream ended: its status comes with close()
                break
            acknowledged += json.loads(answer.to_pybytes())["records"]
        writer.close()
    except ANY_ERROR as e:  # RESOURCE_EXHAUSTED
        refusal = e
    assert refusal is not None, "40 MB into a 16 MiB ring were all accepted"
    assert "in-memory table is full" in str(refusal), str(refusal)
    assert 0 < acknowledged < 100_000
    ids, _, plan = query(client, {"table": "t", "columns": ["id"]})
    assert sorted(ids.column("id").to_pylist()) == list(range(acknowledged)), "acknowledged records vanished"
    assert action(client, "stats", {"table": "t"})["records"] == acknowledged
    assert d.alive()


def test_in_memory_transactions_stage_at_most_what_their_table_can_hold(start_daemon):
    """Bounds everywhere: a transaction of an in-memory table staged its records in the
    daemon's memory without limit, more than its commit could ever ingest."""
    d = start_daemon("--in-memory")
    client = d.client()
    action(client, "create_table", {"name": "t", "page_size_bits": 16, "memory_budget_bytes": 1 << 20})
    action(client, "begin_transaction", {"table": "t", "transaction": "x"})
    schema = pa.schema([("json", pa.string())])
    rows = [json.dumps({"id": i, "pad": "x" * 1000}) for i in range(200)]  # ~200 KB a batch
    writer, reader = client.do_put(flight.FlightDescriptor.for_path("t"), schema)
    staged = 0
    with pytest.raises(ANY_ERROR, match="memory_budget_bytes"):
        for _ in range(10):  # 2 MB into a 1 MiB ring
            batch = pa.record_batch([pa.array(rows, pa.string())], schema=schema)
            writer.write_with_metadata(batch, pa.py_buffer(json.dumps({"transaction": "x"}).encode()))
            answer = reader.read()
            if answer is None:
                writer.close()
            staged += json.loads(answer.to_pybytes())["staged"]
    assert 0 < staged < 2000
    # What was staged commits, whole.
    assert action(client, "commit_transaction", {"table": "t", "transaction": "x"})["records"] == staged
    count, _, _ = query(client, {"table": "t", "aggregates": [{"function": "count"}]})
    assert sum(count.column(0).to_pylist()) == staged
    assert d.alive()


def test_keys_that_need_quoting_do_not_break_whole_record_queries(daemon):
    """One `{"a.b": 1}` made every query without columns fail with INTERNAL."""
    client = daemon.client()
    action(client, "create_table", {"name": "t"})
    put(client, "t", ['{"id": 1}', '{"a.b": 2}', '{"foo bar": 3}', '{"": 4}'])
    whole, info, _ = query(client, {"table": "t"})
    assert whole.num_rows == 4
    assert whole.schema.names == ["id", "a.b", "foo bar", ""]
    assert info.schema.names == whole.schema.names
    picked, _, _ = query(client, {"table": "t", "columns": ['"a.b"']})
    assert picked.column(0).to_pylist() == [None, 2, None, None]


def test_sigterm_with_a_put_stream_open_exits_after_the_grace_period(start_daemon):
    """SIGTERM while a client held a DoPut stream open: the daemon still ran and
    acknowledged batches 30 s later. Now: the grace period, then cancel, flush, exit 0."""
    d = start_daemon("--shutdown-grace-secs", "2")
    client = d.client()
    action(client, "create_table", {"name": "t"})
    schema = pa.schema([("json", pa.string())])
    writer, reader = client.do_put(flight.FlightDescriptor.for_path("t"), schema)
    writer.write_batch(pa.record_batch([pa.array(records(100), pa.string())], schema=schema))
    assert json.loads(reader.read().to_pybytes())["records"] == 100
    started = time.monotonic()
    d.process.send_signal(signal.SIGTERM)
    code = d.process.wait(30)
    elapsed = time.monotonic() - started
    assert code == 0, "\n".join(d.log_lines[-20:])
    assert elapsed < 15, f"the daemon took {elapsed:.1f} s to stop with a grace period of 2 s"
    assert any("grace period over" in line for line in d.log_lines), "\n".join(d.log_lines[-20:])
    try:
        writer.close()
    except Exception:
        pass


def test_durability_waits_are_bounded(start_daemon):
    """make_durable for an address never reached held a thread for 60 s each."""
    d = start_daemon()
    client = d.client()
    action(client, "create_table", {"name": "t"})
    put(client, "t", records(10))
    tail = action(client, "stats", {"table": "t"})["tail_address"]
    started = time.monotonic()
    with pytest.raises(ANY_ERROR) as error:
        action(client, "make_durable", {"table": "t", "address": tail + (1 << 30)})
    assert time.monotonic() - started < 5
    assert "beyond the tail" in str(error.value)
    assert action(client, "make_durable", {"table": "t"})["durable_address"] >= tail
    # Many at once are answered, none holds a thread for long.
    threads = [threading.Thread(target=lambda: action(d.client(), "make_durable", {"table": "t"})) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)


def test_abandoned_durability_waits_end_with_their_clients(start_daemon):
    """A make_durable whose client gave up kept its thread and its place among
    the 64 waits for 60 s, so 64 abandoned calls shut every later one out."""
    d = start_daemon()
    client = d.client()
    # Group commit every 10 s: a wait for the tail lasts until the next one.
    action(client, "create_table", {"name": "t", "durability": "group_commit", "group_commit_ms": 10_000})
    put_stream = client.do_put(flight.FlightDescriptor.for_path("t"), pa.schema([("json", pa.string())]))
    writer, _ = put_stream
    writer.write_batch(pa.record_batch([pa.array(records(10), pa.string())], names=["json"]))
    writer.done_writing()  # the acknowledgement would take 10 s: not read
    deadline = time.monotonic() + 10
    while action(client, "stats", {"table": "t"})["records"] < 10:
        assert time.monotonic() < deadline, "the batch was not ingested"
        time.sleep(0.05)
    impatient = flight.FlightCallOptions(timeout=0.5)
    def wait_and_give_up():
        with pytest.raises(TIMED_OUT):
            action(d.client(), "make_durable", {"table": "t"}, options=impatient)
    threads = [threading.Thread(target=wait_and_give_up) for _ in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    time.sleep(0.5)
    # Every place was given back: another wait waits (and times out) instead of being refused.
    with pytest.raises(TIMED_OUT):
        action(client, "make_durable", {"table": "t"}, options=flight.FlightCallOptions(timeout=1))
    assert d.alive()


def test_concurrent_scans_are_bounded_and_wait_for_a_place(start_daemon, tmp_path):
    """Bounds everywhere: every DoGet held a blocking thread, with no limit on how many."""
    config = tmp_path / "scans.toml"
    config.write_text("max_concurrent_scans = 1\nbatch_rows = 64\nendpoints_per_query = 1\n")
    d = start_daemon("--config", str(config))
    client = d.client()
    action(client, "create_table", {"name": "t"})
    put(client, "t", [json.dumps({"id": i, "text": "x" * 200}) for i in range(50_000)], batch=10_000)
    info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps({"table": "t"})))
    [endpoint] = info.endpoints
    # A slow reader holds the only place: its scan waits for the client to read on.
    held = client.do_get(endpoint.ticket)
    held.read_chunk()
    with pytest.raises(TIMED_OUT):
        client.do_get(endpoint.ticket, options=flight.FlightCallOptions(timeout=2)).read_all()
    held.cancel()
    time.sleep(0.5)
    assert client.do_get(endpoint.ticket).read_all().num_rows == 50_000


@pytest.mark.parametrize(
    "flag,value,message",
    [
        ("--group-commit-ms", str(2**64 - 1), "group_commit_ms"),
        ("--group-commit-ms", "0", "group_commit_ms"),
        ("--endpoints-per-query", "0", "endpoints_per_query"),
        ("--memory-budget-mb", "0", "memory_budget_bytes"),
        ("--shutdown-grace-secs", "999999", "shutdown_grace_secs"),
        ("--batch-rows", "0", "batch_rows"),
        ("--max-concurrent-scans", "100000", "max_concurrent_scans"),
        ("--max-concurrent-puts", "0", "max_concurrent_puts"),
        ("--max-tables", "0", "max_tables"),
        ("--columnar-row-group-rows", "0", "row_group_rows"),
        ("--columnar-codec", "brotli", "columnar-codec"),
        ("--log-format", "xml", "log-format"),
    ],
)
def test_settings_out_of_range_stop_the_start_naming_the_setting(tmp_path, flag, value, message):
    """`group_commit_ms = 2^64-1` was accepted, then every DoPut hung."""
    result = subprocess.run(
        [str(shoal_binary()), "serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d"), flag, value],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def test_long_inputs_echoed_in_errors_stay_invalid_argument(daemon):
    """Errors that echoed ~16 KB of input arrived as RESOURCE_EXHAUSTED
    'metadata size exceeds hard limit' instead of the real error."""
    client = daemon.client()
    action(client, "create_table", {"name": "t"})
    long = "x" * 100_000
    with pytest.raises(ANY_ERROR) as error:  # NOT_FOUND
        action(client, "stats", {"table": long})
    assert "does not exist" in str(error.value)
    with pytest.raises(pa.ArrowInvalid) as error:
        action(client, "create_table", {"name": long})
    assert "invalid table name" in str(error.value)
    with pytest.raises(pa.ArrowInvalid) as error:
        client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps({"table": "t", "limit": long})))
    assert "invalid JSON body" in str(error.value)
    with pytest.raises(pa.ArrowInvalid) as error:
        client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps({"table": "t", "filter": "a = " + long})))
    assert "invalid expression" in str(error.value)


def test_bearer_token_from_a_file(start_daemon, tmp_path):
    """The token was only a flag (visible in `ps`)."""
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-from-file\n")
    d = start_daemon("--auth-token-file", str(token_file))
    with pytest.raises(flight.FlightUnauthenticatedError):
        action(d.client(), "create_table", {"name": "t"})
    options = flight.FlightCallOptions(headers=[(b"authorization", b"Bearer s3cret-from-file")])
    assert action(d.client(), "create_table", {"name": "t"}, options=options)["name"] == "t"


def rss_bytes(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def disk_bytes(directory) -> int:
    """Bytes of disk the files under `directory` take (allocated blocks, not lengths)."""
    total = 0
    for root, _, files in os.walk(directory):
        for name in files:
            total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total


def test_tables_reserve_memory_and_disk_as_they_fill(start_daemon, tmp_path):
    """The first hour: an empty table reserved 341 MiB of the daemon's memory limit (its
    whole ring, index, schema bound and columnar cache), so a fourth create_table failed
    under --max-memory-mb 1024. Now a table reserves as it fills: an empty one a page
    frame, in memory and in the limit."""
    d = start_daemon("--max-memory-mb", "1024")
    client = d.client()
    action(client, "create_table", {"name": "t0"})
    before = rss_bytes(d.process.pid)
    for i in range(1, 100):
        action(client, "create_table", {"name": f"t{i}"})
    grown = rss_bytes(d.process.pid) - before
    assert grown < 99 * (8 << 20), f"99 empty tables took {grown >> 20} MiB"
    for i in (0, 50, 99):
        stats = action(client, "stats", {"table": f"t{i}"})
        assert stats["reserved_bytes"] <= 8 << 20, stats["memory"]
        assert stats["memory"]["bound_bytes"] > 300 << 20, stats["memory"]
        assert disk_bytes(tmp_path / "data0" / "tables" / f"t{i}") <= 2 << 20
    # A table that could never fill its ring within the limit is refused when made.
    with pytest.raises(ANY_ERROR, match="max_memory_bytes"):
        action(client, "create_table", {"name": "huge", "memory_budget_bytes": 1 << 30})
    # Limits from the config file.
    config = tmp_path / "limits.toml"
    config.write_text("max_tables = 2\nmax_memory_bytes = %d\n" % (600 << 20))
    limited = start_daemon("--config", str(config))
    client = limited.client()
    action(client, "create_table", {"name": "a"})
    action(client, "create_table", {"name": "b", "memory_budget_bytes": 64 << 20})
    with pytest.raises(ANY_ERROR, match="max_tables"):
        action(client, "create_table", {"name": "c", "memory_budget_bytes": 16 << 20})
    action(client, "drop_table", {"table": "a"})
    action(client, "create_table", {"name": "c", "memory_budget_bytes": 16 << 20})


def test_a_table_takes_disk_for_its_records_not_for_its_pages(tmp_path):
    """The first hour: an empty table took 1 MiB of disk (a preallocated withdrawn.bin)
    and each restart after a write a whole 4 MiB page (the shutdown closes the open page
    with a filler, written out). Now the filler's zeros are left to the file's hole."""
    data = tmp_path / "data"
    table = data / "tables" / "t"
    for round in range(3):
        d = Daemon(data)
        client = d.client()
        if round == 0:
            action(client, "create_table", {"name": "t"})
            assert disk_bytes(table) <= 1 << 20, sorted((p.name, p.stat().st_blocks * 512) for p in table.iterdir())
        put(client, "t", [json.dumps({"round": round})])
        assert d.stop() == 0
    segments = sorted(table.glob("segment-*.log"))
    assert segments and segments[0].stat().st_size >= 3 * (4 << 20)  # three pages closed
    assert disk_bytes(table) <= 1 << 20, sorted((p.name, p.stat().st_blocks * 512) for p in table.iterdir())
    d = Daemon(data)
    try:
        count = query(d.client(), {"table": "t", "aggregates": [{"function": "count"}]})[0]
        assert count.column(0).to_pylist() == [3]
    finally:
        assert d.stop() == 0


def test_a_batch_that_needs_memory_past_the_limit_is_refused_and_a_full_ring_keeps_ingesting(start_daemon):
    """Memory for data: a table's ring grows frame by frame as records arrive; the batch that
    would take the tables past max_memory_bytes is refused naming what it needs, while a table
    whose ring is populated (its memory does not grow any more) keeps taking records."""
    d = start_daemon("--max-memory-mb", "40")
    client = d.client()
    small = {"memory_budget_bytes": 16 << 20, "columnar": {"enabled": False}}  # up to 16 + 5 MiB (no PSF: no index)
    action(client, "create_table", {"name": "a", **small})
    action(client, "create_table", {"name": "b", **small})
    pad = "x" * 1000
    filler = [json.dumps({"id": i, "pad": pad}) for i in range(24_000)]  # 24 MB: more than a's ring
    put(client, "a", filler, batch=2000)
    memory = action(client, "stats", {"table": "a"})["memory"]
    assert memory["log_populated_bytes"] == 16 << 20, memory
    # b grows: its first batch needs a frame and the schema (the tables reserve 25 of 40 MiB:
    # taken); the next ones its other frames (refused: a's 21 and b's 21 MiB do not fit).
    refusal = None
    acknowledged = 0
    for start in range(0, 24_000, 2000):
        try:
            put(client, "b", filler[start : start + 2000], batch=2000)
            acknowledged += 2000
        except (flight.FlightError, pa.ArrowException) as error:
            refusal = error
            break
    assert refusal is not None, action(client, "stats", {"table": "b"})["memory"]
    assert "RESOURCE_EXHAUSTED" in str(refusal) and "max_memory_bytes" in str(refusal), refusal
    assert 'table "b"' in str(refusal) and "more bytes of memory" in str(refusal), refusal
    assert acknowledged >= 2000, acknowledged
    count = query(client, {"table": "b", "aggregates": [{"function": "count"}]})[0]
    assert count.column(0).to_pylist() == [acknowledged]
    # a's ring is populated: its batches need nothing more, and are taken.
    put(client, "a", filler[:4000], batch=2000)
    count = query(client, {"table": "a", "aggregates": [{"function": "count"}]})[0]
    assert count.column(0).to_pylist() == [28_000]
    # Dropping a frees its reservation: b grows again.
    action(client, "drop_table", {"table": "a"})
    put(client, "b", filler[:2000], batch=2000)
    assert d.alive()


def test_cached_columns_yield_their_memory_to_data(start_daemon):
    """The columnar tier's cache of decoded columns counts in the memory the tables reserve,
    but only as long as data does not need it: a batch that would pass max_memory_bytes lets
    the caches go first (the largest first) and is taken; the cold table still answers."""
    from test_columnar import SMALL_FILES, wait_compacted
    d = start_daemon("--max-memory-mb", "48")
    client = d.client()
    # a: ring 16 MiB + schema 5 MiB + a cache of up to 16 MiB; b: 16 + 5 MiB, no cache.
    action(client, "create_table", {"name": "a", "memory_budget_bytes": 16 << 20, "index_size_bits": 10, "columnar": {**SMALL_FILES, "cache_bytes": 16 << 20}})
    action(client, "create_table", {"name": "b", "memory_budget_bytes": 16 << 20, "columnar": {"enabled": False}})
    pad = "x" * 1000
    filler = [json.dumps({"id": i, "pad": pad}) for i in range(40_000)]
    put(client, "a", filler, batch=2000)
    wait_compacted(client, "a")
    for _ in range(2):
        rows, _, _ = query(client, {"table": "a", "filter": "id >= 0", "columns": ["id", "pad"]})
        assert rows.num_rows == 40_000
    cached = action(client, "stats", {"table": "a"})["memory"]["columnar_bytes"]
    assert cached > 8 << 20, action(client, "stats", {"table": "a"})["memory"]
    # b fills its ring: 21 MiB more, which fits only once a's cache is let go.
    put(client, "b", filler[:20_000], batch=2000)
    memory = action(client, "stats", {"table": "b"})["memory"]
    assert memory["log_populated_bytes"] == 16 << 20, memory
    assert action(client, "stats", {"table": "a"})["memory"]["columnar_bytes"] < cached - (4 << 20)
    count = query(client, {"table": "a", "aggregates": [{"function": "count"}]})[0]
    assert count.column(0).to_pylist() == [40_000]
    assert d.alive()


def test_a_keyed_tables_key_index_cannot_grow_past_the_memory_limit(start_daemon):
    """Global memory budget: a keyed table's key index grows with every new key,
    after `create_table` checked the daemon's limit; nothing refused that growth. Now a
    keyed table's batches are refused with RESOURCE_EXHAUSTED once the daemon's tables
    reserve more than max_memory_bytes, and every key acknowledged before is there."""
    limited = start_daemon("--max-memory-mb", "48")
    client = limited.client()
    # At most 4 MiB of ring (1 MiB pages), 16 MiB of index and 5 MiB of schema: the key index
    # takes the rest.
    small = {"memory_budget_bytes": 4 << 20, "page_size_bits": 20, "columnar": {"enabled": False}}
    action(client, "create_table", {"name": "k", "primary_key": "id", **small})
    schema = pa.schema([("json", pa.string())])
    acknowledged = 0
    refusal = None
    for batch in range(200):
        rows = [json.dumps({"id": batch * 5000 + i, "v": "x"}) for i in range(5000)]
        writer, reader = client.do_put(flight.FlightDescriptor.for_path("k"), schema)
        try:
            with writer:
                writer.write_batch(pa.record_batch([pa.array(rows, pa.string())], schema=schema))
                json.loads(reader.read().to_pybytes())
                writer.done_writing()
            acknowledged += len(rows)
        except (flight.FlightError, pa.ArrowException) as error:  # pyarrow raises ArrowInvalid for a closing DoPut
            refusal = error
            break
    assert refusal is not None, "new keys were taken past the limit"
    assert "RESOURCE_EXHAUSTED" in str(refusal) and "max_memory_bytes" in str(refusal), refusal
    assert 'table "k"' in str(refusal) and "key index" in str(refusal), refusal
    assert 100_000 <= acknowledged < 200 * 5000, acknowledged
    stats = action(client, "stats", {"table": "k"})
    assert stats["keys"]["live"] == acknowledged, stats["keys"]
    assert stats["reserved_bytes"] > 48 << 20, stats
    count = query(client, {"table": "k", "aggregates": [{"function": "count"}]})[0]
    assert count.column(0).to_pylist() == [acknowledged]
    assert limited.alive()


SCHEMA_FIELDS_LIMIT = 10_000  # shoal_core::schema::MAX_SCHEMA_FIELDS


def test_ever_new_keys_leave_the_schema_bounded_and_the_records_whole(tmp_path):
    """Bounds: records with ever new keys (a map keyed by ids, or a hostile client) grew the
    inferred schema, its Arrow form and every checkpoint without bound. The schema now keeps
    at most SCHEMA_FIELDS_LIMIT fields and then stops adding keys (as Elasticsearch's
    mappings do at their limit); the records keep every key."""
    data = tmp_path / "data"
    d = Daemon(data)
    client = d.client()
    action(client, "create_table", {"name": "wide", "columnar": {"enabled": False}})
    wide = [json.dumps({"id": r, **{f"k{r}_{i}": i for i in range(1000)}}) for r in range(12)]
    put(client, "wide", wide, batch=4)
    action(client, "checkpoint", {"table": "wide"})

    def fields():
        schema = client.get_schema(flight.FlightDescriptor.for_path("wide")).schema
        return schema.names

    names = fields()
    assert len(names) == SCHEMA_FIELDS_LIMIT, len(names)
    assert names[:3] == ["id", "k0_0", "k0_1"], "the first keys seen are kept"
    # A key the schema no longer holds: not a column (named as such), but filters and
    # whole-record output still see it.
    with pytest.raises(pa.ArrowInvalid, match="is not in the table's schema"):
        query(client, {"table": "wide", "columns": ["k11_999"]})
    rows, _, _ = query(client, {"table": "wide", "filter": "k11_999 = 999", "output": "json"})
    assert [json.loads(text)["id"] for text in rows.column("json").to_pylist()] == [11]
    ids, _, _ = query(client, {"table": "wide", "filter": "k11_999 = 999", "columns": ["id"]})
    assert ids.column("id").to_pylist() == [11]
    # The bound holds across more records and a restart from the checkpoint.
    put(client, "wide", [json.dumps({"id": 99, "brand_new": 1})])
    assert len(fields()) == SCHEMA_FIELDS_LIMIT
    assert d.stop() == 0
    d = Daemon(data)
    try:
        client = d.client()
        assert len(fields()) == SCHEMA_FIELDS_LIMIT
        assert action(client, "stats", {"table": "wide"})["records"] == 13
    finally:
        assert d.stop() == 0
