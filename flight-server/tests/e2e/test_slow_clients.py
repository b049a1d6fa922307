"""Slow and stalled clients cost others nothing: DoPut streams left open and silent hold no
place among the ingesting streams and are ended after `stream_idle_timeout_secs`; unread DoGet
streams hold at most half the scan places (per connection) and are ended likewise, their places
going to waiting scans; a scan that waits longer than `scan_wait_timeout_ms` is refused naming
the limit; connections that dribble their HTTP/2 preface are closed after
`handshake_timeout_secs`. Each against the real daemon."""

import json
import socket
import statistics
import threading
import time

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from conftest import action, put

ANY_ERROR = (pa.ArrowException, flight.FlightError)
SCHEMA = pa.schema([("json", pa.string())])


def batch(rows):
    return pa.record_batch([pa.array(rows, pa.string())], schema=SCHEMA)


def ended_with_status(writer, reader, match):
    """A DoPut stream the daemon ended: its results run out, and the status comes with the close."""
    with pytest.raises(flight.FlightTimedOutError, match=match):
        while reader.read() is not None:
            pass
        writer.close()


def timed_put(client, table, n=100):
    started = time.monotonic()
    put(client, table, [json.dumps({"id": i, "t": "honest"}) for i in range(n)])
    return time.monotonic() - started


def timed_count(client, table):
    started = time.monotonic()
    command = {"table": table, "aggregates": [{"function": "count"}]}
    count = client.do_get(flight.Ticket(json.dumps(command).encode())).read_all().column(0)[0].as_py()
    return time.monotonic() - started, count


def test_silent_doput_streams_hold_no_place_and_are_ended(start_daemon):
    """100 DoPut streams opened (schema sent) and left silent, past max_concurrent_puts = 8:
    an honest writer's batches and an honest reader's queries keep their latency; a stream
    that sent a batch, then nothing, is ended with DEADLINE_EXCEEDED naming the setting, and
    what it acknowledged stays."""
    d = start_daemon("--max-concurrent-puts", "8", "--stream-idle-timeout-secs", "4")
    honest = d.client()
    action(honest, "create_table", {"name": "t"})
    baseline_put = statistics.median(timed_put(honest, "t") for _ in range(5))
    baseline_get = statistics.median(timed_count(honest, "t")[0] for _ in range(5))

    idle_clients = [d.client() for _ in range(10)]
    idle = [c.do_put(flight.FlightDescriptor.for_path("t"), SCHEMA) for c in idle_clients for _ in range(10)]
    # One more sent a batch, had it acknowledged, and went silent.
    quiet_writer, quiet_reader = d.client().do_put(flight.FlightDescriptor.for_path("t"), SCHEMA)
    quiet_writer.write_batch(batch([json.dumps({"id": -1, "t": "quiet"})]))
    assert json.loads(quiet_reader.read().to_pybytes())["records"] == 1

    loaded_put = statistics.median(timed_put(honest, "t") for _ in range(5))
    loaded_get = statistics.median(timed_count(honest, "t")[0] for _ in range(5))
    print(f"honest DoPut {baseline_put * 1000:.1f} -> {loaded_put * 1000:.1f} ms, DoGet {baseline_get * 1000:.1f} -> {loaded_get * 1000:.1f} ms with 100 silent streams")
    # Before the fix a writer waited 30 s for a place and was refused: any slack for a busy
    # machine stays far below that.
    assert loaded_put < 2 * baseline_put + 0.5, (baseline_put, loaded_put)
    assert loaded_get < 2 * baseline_get + 0.5, (baseline_get, loaded_get)

    time.sleep(6)
    ended_with_status(quiet_writer, quiet_reader, "stream_idle_timeout_secs")
    for writer, reader in idle:
        ended_with_status(writer, reader, "sent nothing for 4 s")
    _, count = timed_count(honest, "t")
    assert count == 10 * 100 + 1, "every acknowledged record stays, the quiet one among them"
    assert d.alive()


def test_unread_doget_streams_leave_places_to_other_connections(start_daemon):
    """A client that opens 1,000 DoGets of a large result and reads none of them holds at most
    half of max_concurrent_scans (one connection; the rest wait for its own places, then are
    refused after scan_wait_timeout_ms); another client's query answers within 1 s; the stalled
    scans are ended after the idle timeout with DEADLINE_EXCEEDED after what was queued — never
    a clean end — and their places go to the waiting ones."""
    d = start_daemon("--max-concurrent-scans", "8", "--stream-idle-timeout-secs", "3", "--scan-wait-timeout-ms", "4000",
                     "--batch-rows", "64")
    client = d.client()
    action(client, "create_table", {"name": "big"})
    # More than a client's receive window and a stream's queue hold (~60 MB).
    put(client, "big", [json.dumps({"id": i, "text": "x" * 600}) for i in range(100_000)], batch=20_000)
    action(client, "create_table", {"name": "small"})
    put(client, "small", [json.dumps({"id": i}) for i in range(10)])
    baseline = statistics.median(timed_count(client, "small")[0] for _ in range(5))

    hostile = d.client()
    command = json.dumps({"table": "big"}).encode()
    readers, errors = [], []

    def open_unread():
        try:
            readers.append(hostile.do_get(flight.Ticket(command)))
        except ANY_ERROR as e:  # a call that waited past scan_wait_timeout_ms
            errors.append(e)

    threads = [threading.Thread(target=open_unread) for _ in range(1000)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    honest = d.client()
    latencies = []
    for _ in range(5):
        took, count = timed_count(honest, "small")
        assert count == 10
        latencies.append(took)
    print(f"honest query {baseline * 1000:.1f} -> {statistics.median(latencies) * 1000:.1f} ms beside 1,000 unread DoGets")
    # Before: a fresh query waited for a place until a stalled scan ended (22 s seen).
    assert statistics.median(latencies) < 2 * baseline + 0.5, (baseline, latencies)
    assert max(latencies) < 1.0 + 2 * baseline, latencies

    for t in threads:
        t.join(60)
    assert readers, errors
    assert all("scan_wait_timeout_ms" in str(e) for e in errors), errors[:3]
    print(f"{len(readers)} DoGets got a place, {len(errors)} were refused after waiting")
    # A stalled stream: the batches queued before it stalled, then the status, never a clean end.
    with pytest.raises(flight.FlightTimedOutError, match="read nothing for 3 s"):
        readers[0].read_all()
    assert d.alive()


def test_a_scan_that_waits_past_scan_wait_timeout_ms_is_refused_naming_it(start_daemon):
    d = start_daemon("--max-concurrent-scans", "1", "--scan-wait-timeout-ms", "500", "--batch-rows", "64")
    client = d.client()
    action(client, "create_table", {"name": "t"})
    # More than the client's receive window and the stream's queue hold (~60 MB): the held
    # scan cannot run to its end while its reader reads nothing.
    put(client, "t", [json.dumps({"id": i, "text": "x" * 600}) for i in range(100_000)], batch=20_000)
    held = client.do_get(flight.Ticket(json.dumps({"table": "t"}).encode()))
    held.read_chunk()
    other = d.client()
    started = time.monotonic()
    with pytest.raises(ANY_ERROR, match="scan_wait_timeout_ms") as refused:
        other.do_get(flight.Ticket(json.dumps({"table": "t", "limit": 1}).encode())).read_all()
    assert "max_concurrent_scans" in str(refused.value)
    assert time.monotonic() - started < 10
    held.cancel()
    time.sleep(0.5)
    assert other.do_get(flight.Ticket(json.dumps({"table": "t", "limit": 1}).encode())).read_all().num_rows == 1


def test_connections_that_dribble_the_preface_are_closed(start_daemon):
    """300 connections that send the HTTP/2 preface a byte at a time are closed after
    handshake_timeout_secs; meanwhile an honest client writes and reads as before."""
    d = start_daemon("--handshake-timeout-secs", "2")
    honest = d.client()
    action(honest, "create_table", {"name": "t"})
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    sockets = []
    for _ in range(300):
        s = socket.create_connection(("127.0.0.1", d.port))
        s.sendall(preface[:1])
        sockets.append(s)
    deadline = time.monotonic() + 8
    closed = set()
    sent = 1
    while len(closed) < len(sockets) and time.monotonic() < deadline:
        assert timed_put(honest, "t", 10) < 5
        time.sleep(0.5)
        for i, s in enumerate(sockets):
            if i in closed:
                continue
            try:
                s.sendall(preface[sent:sent + 1])
                s.setblocking(False)
                if s.recv(1) == b"":
                    closed.add(i)
            except BlockingIOError:
                pass
            except OSError:
                closed.add(i)
            finally:
                s.setblocking(True)
        sent = min(sent + 1, len(preface) - 1)
    for s in sockets:
        s.close()
    assert len(closed) == 300, f"{300 - len(closed)} dribbling connections still open after 8 s"
    _, count = timed_count(honest, "t")
    assert count > 0
    assert d.alive()
