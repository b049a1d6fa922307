"""Following a table by log address (streaming reads): answers that start where the
previous one was complete (`complete_until` in the plan) return every record exactly
once while another client ingests, through PSF chains and full scans; `_address` gives
each row its record's address; `durable_only` stops at the durable address."""

import json
import threading

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from conftest import action, github_events, put


def follow_once(client, command, start):
    """One poll: the rows of [start, complete_until) and the new start."""
    command = {**command, "from_address": start, "with_address": True}
    info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(command)))
    plan = json.loads(info.app_metadata)
    tables = [client.do_get(e.ticket).read_all() for e in info.endpoints]
    rows = pa.concat_tables(tables).to_pylist() if tables else []
    return rows, plan["complete_until"]


def test_followers_see_every_record_once_while_another_client_ingests(daemon):
    client = daemon.client()
    action(client, "create_table", {"name": "ev", "page_size_bits": 18})
    action(client, "register_psf", {"table": "ev", "name": "type", "kind": "projection", "field": "type"})
    base = [json.loads(line) for line in github_events(2000)]
    # Three copies with distinct ids, put by another client in many small batches.
    records = [json.dumps({**r, "id": f"{r['id']}-{copy}"}) for copy in range(3) for r in base]
    done, first = threading.Event(), threading.Event()

    def ingest():
        writer = daemon.client()
        for start in range(0, len(records), 50):
            put(writer, "ev", records[start:start + 50])
            first.set()
        done.set()

    thread = threading.Thread(target=ingest)
    thread.start()
    # A column no record has had yet is unknown: follow once the first batch is in.
    assert first.wait(60)
    followers = {"psf": {"table": "ev", "filter": "type = 'PushEvent'", "columns": ["id"]},
                 "full": {"table": "ev", "columns": ["id"]}}
    seen = {name: {} for name in followers}
    start = {name: 0 for name in followers}
    polls = 0
    while True:
        finished = done.is_set()
        for name, command in followers.items():
            rows, until = follow_once(client, command, start[name])
            for row in rows:
                assert start[name] <= row["_address"] < until, (name, row, start[name], until)
                assert row["id"] not in seen[name], f"{name}: {row['id']} returned twice"
                seen[name][row["id"]] = row["_address"]
            assert until >= start[name]
            start[name] = until
        polls += 1
        if finished:
            break
    thread.join()
    pushes = {json.loads(r)["id"] for r in records if json.loads(r)["type"] == "PushEvent"}
    assert set(seen["psf"]) == pushes
    assert set(seen["full"]) == {json.loads(r)["id"] for r in records}
    assert polls >= 2
    # The addresses are the records' own: a point query at one gives that record.
    some_id, address = next(iter(seen["psf"].items()))
    rows, _ = follow_once(client, {"table": "ev", "columns": ["id"], "to_address": address + 1}, address)
    assert [r["id"] for r in rows] == [some_id]


def test_address_column_and_its_errors(daemon):
    client = daemon.client()
    action(client, "create_table", {"name": "t"})
    acks = put(client, "t", ['{"a": 1}', '{"a": 2}', '{"_address": 5}'])
    command = {"table": "t", "columns": ["a"], "with_address": True, "filter": "a >= 1"}
    info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(command)))
    assert info.schema.field("_address").type == pa.uint64() and not info.schema.field("_address").nullable
    table = pa.concat_tables([client.do_get(e.ticket).read_all() for e in info.endpoints])
    assert table.column("_address").to_pylist() == [acks[0]["first_address"], acks[0]["first_address"] + (acks[0]["last_address"] - acks[0]["first_address"]) // 2]
    # One call, JSON output: the same column after `json`.
    one = client.do_get(flight.Ticket(json.dumps({"table": "t", "output": "json", "with_address": True}).encode())).read_all()
    assert one.column_names == ["json", "_address"] and one.num_rows == 3
    assert one.column("_address").to_pylist()[-1] == acks[0]["last_address"]
    for bad, named in [
        ({"table": "t", "with_address": True}, "_address"),  # every top-level field: one is named _address
        ({"table": "t", "with_address": True, "aggregates": [{"function": "count"}]}, "with_address"),
    ]:
        with pytest.raises(pa.ArrowException, match=named):
            client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(bad)))


def test_durable_only_stops_at_the_durable_address(start_daemon):
    memory = start_daemon("--in-memory")
    client = memory.client()
    action(client, "create_table", {"name": "m"})
    put(client, "m", ['{"a": 1}'])
    with pytest.raises(pa.ArrowException, match="in memory"):
        client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps({"table": "m", "durable_only": True})))
    disk = start_daemon()
    client = disk.client()
    action(client, "create_table", {"name": "d"})
    put(client, "d", ['{"a": 1}', '{"a": 2}'])
    durable = action(client, "make_durable", {"table": "d"})["durable_address"]
    info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps({"table": "d", "durable_only": True, "columns": ["a"]})))
    plan = json.loads(info.app_metadata)
    assert plan["complete_until"] <= durable
    rows = pa.concat_tables([client.do_get(e.ticket).read_all() for e in info.endpoints])
    assert sorted(rows.column("a").to_pylist()) == [1, 2]


def test_a_follower_behind_retention_gets_an_error_or_the_gap(daemon):
    client = daemon.client()
    action(client, "create_table", {"name": "r", "page_size_bits": 16})
    acks = put(client, "r", [json.dumps({"n": i, "pad": "x" * 200}) for i in range(2000)], batch=100)
    old = acks[0]["first_address"]
    action(client, "make_durable", {"table": "r"})
    cut = action(client, "truncate", {"table": "r", "keep_bytes": 100_000})
    begin = cut["begin_address"]
    assert begin > old
    command = {"table": "r", "columns": ["n"], "from_address": old, "with_address": True}
    # A follower that must not miss records: OUT_OF_RANGE naming what is gone.
    strict = {**command, "if_truncated": "error"}
    with pytest.raises(pa.ArrowException, match=rf"\[{old}, {begin}\) were dropped"):
        client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(strict)))
    with pytest.raises(pa.ArrowException, match="were dropped"):
        client.do_get(flight.Ticket(json.dumps(strict).encode())).read_all()
    # By default it resumes at the begin address, and the plan says what was skipped.
    info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(command)))
    plan = json.loads(info.app_metadata)
    assert plan["truncated"] == {"from": old, "to": begin}
    rows = pa.concat_tables([client.do_get(e.ticket).read_all() for e in info.endpoints])
    assert min(rows.column("_address").to_pylist()) >= begin
    assert rows.column("n").to_pylist() == sorted(rows.column("n").to_pylist())[: rows.num_rows]
    # A follower at or past the begin address is told nothing.
    fresh = json.loads(client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps({**command, "from_address": begin}))).app_metadata)
    assert "truncated" not in fresh
