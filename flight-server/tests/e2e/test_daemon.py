"""End-to-end tests of the shoal daemon over Arrow Flight, with pyarrow as the client."""

import json
import os
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from conftest import REPO, action, dig, github_events, put, query, self_signed_cert, shoal_binary

# pyarrow maps INVALID_ARGUMENT to ArrowInvalid, NOT_FOUND/ALREADY_EXISTS to
# ArrowKeyError/FlightServerError depending on the version; tests check the message.
ANY_ERROR = (flight.FlightError, pa.ArrowException)

GITHUB_PSFS = [
    {"name": "id", "kind": "projection", "field": "id"},
    {"name": "actor_id", "kind": "projection", "field": "actor.id"},
    {"name": "repo_id", "kind": "projection", "field": "repo.id"},
    {"name": "type", "kind": "projection", "field": "type"},
    {"name": "opened_issues", "kind": "predicate", "expr": "type = 'IssuesEvent' AND payload.action = 'opened'"},
    {
        "name": "cpp_pull_requests",
        "kind": "predicate",
        "expr": "type = 'PullRequestEvent' AND payload.pull_request.head.repo.language = 'C++'",
    },
]


def test_github_events_with_psfs_registered_part_way_match_a_python_oracle(daemon):
    events = github_events(4000)
    records = [json.loads(e) for e in events]
    client = daemon.client()
    assert action(client, "create_table", {"name": "events"})["created"] is True
    half = len(events) // 2
    acks = put(client, "events", events[:half])
    assert sum(a["records"] for a in acks) == half
    assert all(a["first_address"] <= a["last_address"] for a in acks)
    boundaries = {}
    for psf in GITHUB_PSFS:
        # Forward only (FishStore's PSF): index scans above the boundary, full scans below.
        result = action(client, "register_psf", {"table": "events", **psf, "backfill": False})
        boundaries[psf["name"]] = result["safe_register_address"]
        assert result["safe_register_address"] >= acks[-1]["last_address"]
    put(client, "events", events[half:])

    some_actor = records[half + 10]["actor"]["id"]
    cases = [
        ("type = 'WatchEvent'", "type", lambda r: r["type"] == "WatchEvent"),
        # Over half of the events are pushes, but all of them are in memory: the index
        # scan is kept (the cost check that picks a full scan is for ranges on the device).
        ("type = 'PushEvent'", "type", lambda r: r["type"] == "PushEvent"),
        ("type = 'IssuesEvent' AND payload.action = 'opened'", "opened_issues",
         lambda r: r["type"] == "IssuesEvent" and dig(r, "payload.action") == "opened"),
        ("type = 'PullRequestEvent' AND payload.pull_request.head.repo.language = 'C++'", "cpp_pull_requests",
         lambda r: r["type"] == "PullRequestEvent" and dig(r, "payload.pull_request.head.repo.language") == "C++"),
        (f"actor.id = {some_actor}", "actor_id", lambda r: r["actor"]["id"] == some_actor),
        ("payload.size > 3", None, lambda r: isinstance(dig(r, "payload.size"), int) and dig(r, "payload.size") > 3),
    ]
    for text, psf, oracle in cases:
        table, info, meta = query(client, {"table": "events", "filter": text, "columns": ["id", "actor.login"]})
        expected = sorted(r["id"] for r in records if oracle(r))
        got = sorted(table.column("id").to_pylist()) if table is not None else []
        assert got == expected, text
        assert table is None or table.schema.names == ["id", "actor.login"]
        plan = meta["plan"]
        if psf is None:
            assert plan["index_scans"] == [], text
            assert len(plan["full_scans"]) == 1
        else:
            assert [s["psfs"] for s in plan["index_scans"]] == [[psf]], text
            assert plan["index_scans"][0]["from"] == boundaries[psf]
            assert plan["full_scans"][0]["to"] == boundaries[psf], "records before registration are full-scanned"
        assert len(info.endpoints) >= 1


def test_limit_columns_schema_and_listings(daemon):
    events = github_events(500)
    client = daemon.client()
    action(client, "create_table", {"name": "gh"})
    put(client, "gh", events)
    table, info, _ = query(client, {"table": "gh", "columns": ["actor.login", "payload.size"], "limit": 7})
    assert table.num_rows <= 7 * len(info.endpoints)
    assert table.schema.names == ["actor.login", "payload.size"]
    schema = client.get_schema(flight.FlightDescriptor.for_path("gh")).schema
    assert pa.types.is_struct(schema.field("actor").type)
    assert schema.field("actor").type.get_field_index("login") >= 0
    flights = list(client.list_flights())
    assert [f.descriptor.path[0].decode() for f in flights] == ["gh"]
    assert flights[0].total_records == 500
    stats = action(client, "stats", {"table": "gh"})
    assert stats["records"] == 500
    # The background schema observer never passes the flushed address, nor that the tail.
    assert 0 <= stats["observed_until_address"] <= stats["flushed_until_address"] <= stats["tail_address"]
    assert stats["page_size_bytes"] == 4 << 20  # the daemon's default page


def json_test_suite() -> Path | None:
    candidates = [os.environ.get("SHOAL_JSON_TEST_SUITE"), REPO.parent / "shared" / "data" / "JSONTestSuite" / "test_parsing"]
    for candidate in candidates:
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    if os.environ.get("SHOAL_REQUIRE_DATA") == "1":
        pytest.fail("JSONTestSuite not found (set SHOAL_JSON_TEST_SUITE)")
    pytest.skip("JSONTestSuite not found (set SHOAL_JSON_TEST_SUITE)")


def put_bytes(client, table, payloads: list[bytes]):
    schema = pa.schema([("json", pa.binary())])
    writer, reader = client.do_put(flight.FlightDescriptor.for_path(table), schema)
    with writer:
        writer.write_batch(pa.record_batch([pa.array(payloads, pa.binary())], schema=schema))
        ack = json.loads(reader.read().to_pybytes())
        writer.done_writing()
    return ack


def test_must_reject_json_gets_a_clear_error_and_earlier_data_stays(daemon):
    suite = json_test_suite()
    client = daemon.client()
    action(client, "create_table", {"name": "strict"})
    action(client, "create_table", {"name": "lenient", "on_invalid_json": "skip"})
    put(client, "strict", ['{"id": "a"}', '{"id": "b"}'])
    rejects = sorted(suite.glob("n_*.json"))
    accepts = sorted(suite.glob("y_*.json"))
    assert len(rejects) > 100
    for path in rejects:
        with pytest.raises(pa.ArrowInvalid) as error:
            put_bytes(client, "strict", [path.read_bytes()])
        assert "not valid JSON" in str(error.value), path.name
        assert daemon.alive()
    for path in accepts:
        assert put_bytes(client, "strict", [path.read_bytes()])["records"] == 1, path.name
    table, _, _ = query(client, {"table": "strict", "filter": "id IN ('a', 'b')", "columns": ["id"]})
    assert sorted(table.column("id").to_pylist()) == ["a", "b"]
    assert action(client, "stats", {"table": "strict"})["records"] == 2 + len(accepts)
    ack = put_bytes(client, "lenient", [p.read_bytes() for p in rejects + accepts])
    assert (ack["records"], ack["skipped"]) == (len(accepts), len(rejects))


def test_protocol_errors_use_the_right_status_codes(daemon):
    client = daemon.client()
    action(client, "create_table", {"name": "t"})
    put(client, "t", ['{"a": 1}'])
    with pytest.raises(pa.ArrowInvalid, match="unknown field `nme`"):
        action(client, "create_table", {"nme": "x"})
    with pytest.raises(pa.ArrowInvalid, match="invalid JSON body"):
        list(client.do_action(flight.Action("create_table", b"{not json")))
    with pytest.raises(ANY_ERROR, match="already exists"):
        action(client, "create_table", {"name": "t"})
    with pytest.raises(ANY_ERROR, match="does not exist"):
        query(client, {"table": "missing"})
    with pytest.raises(ANY_ERROR, match="no PSF named"):
        action(client, "deregister_psf", {"table": "t", "name": "nope"})
    with pytest.raises(pa.ArrowInvalid, match="unknown column"):
        query(client, {"table": "t", "columns": ["b"]})
    with pytest.raises(pa.ArrowInvalid, match="invalid expression"):
        query(client, {"table": "t", "filter": "a = = 1"})
    with pytest.raises(pa.ArrowInvalid, match="index_size_bits must be within"):
        action(client, "create_table", {"name": "huge", "index_size_bits": 30})
    with pytest.raises(ANY_ERROR, match="exceeds this server's limit"):
        action(client, "create_table", {"name": "huge", "memory_budget_bytes": 1 << 50})
    with pytest.raises(pa.ArrowInvalid, match="unknown action"):
        action(client, "explode", {})
    with pytest.raises(pa.ArrowInvalid, match="column named \"json\""):
        schema = pa.schema([("body", pa.string())])
        writer, reader = client.do_put(flight.FlightDescriptor.for_path("t"), schema)
        writer.write_batch(pa.record_batch([pa.array(["{}"])], schema=schema))
        reader.read()
        writer.close()
    assert daemon.alive()


def test_bearer_token_is_required_when_configured(start_daemon):
    d = start_daemon("--auth-token", "s3cret")
    with pytest.raises(flight.FlightUnauthenticatedError):
        list(d.client().list_flights())
    options = flight.FlightCallOptions(headers=[(b"authorization", b"Bearer s3cret")])
    assert list(d.client().list_flights(options=options)) == []
    with pytest.raises(flight.FlightUnauthenticatedError):
        bad = flight.FlightCallOptions(headers=[(b"authorization", b"Bearer wrong")])
        list(d.client().list_flights(options=bad))


def test_basic_credentials_get_a_session_token_through_the_flight_handshake(start_daemon):
    d = start_daemon("--basic-auth", "analyst:pa:ss")
    client = d.client()
    with pytest.raises(flight.FlightUnauthenticatedError):
        list(client.list_flights())
    with pytest.raises(flight.FlightUnauthenticatedError):
        client.authenticate_basic_token(b"analyst", b"wrong")
    # pyarrow's basic-token flow: Handshake with basic credentials, bearer token back.
    header = client.authenticate_basic_token(b"analyst", b"pa:ss")
    assert header[0] == b"authorization" and header[1].startswith(b"Bearer ")
    options = flight.FlightCallOptions(headers=[header])
    action(client, "create_table", {"name": "t"}, options=options)
    assert [f.descriptor.path[0] for f in client.list_flights(options=options)] == [b"t"]
    with pytest.raises(flight.FlightUnauthenticatedError):
        list(client.list_flights(options=flight.FlightCallOptions(headers=[(b"authorization", b"Bearer forged")])))
    # The CLI sends basic credentials with every call.
    run = lambda *creds: subprocess.run(
        [str(shoal_binary()), "stats", "--endpoint", d.location, *creds], capture_output=True, text=True, timeout=60
    )
    accepted = run("--basic-auth", "analyst:pa:ss")
    assert accepted.returncode == 0, accepted.stderr
    assert json.loads(accepted.stdout)["table"] == "t", accepted.stdout
    refused = run("--basic-auth", "analyst:nope")
    assert refused.returncode != 0 and "Unauthenticated" in refused.stderr, refused.stderr


def test_sigterm_flushes_and_exits_cleanly(start_daemon):
    d = start_daemon()
    client = d.client()
    action(client, "create_table", {"name": "t"})
    put(client, "t", ['{"a": %d}' % i for i in range(100)])
    assert d.stop() == 0
    assert any("table flushed and closed" in line for line in d.log_lines)


def test_tls_serves_grpc_tls_clients(start_daemon, tmp_path):
    cert, key = self_signed_cert(tmp_path)
    d = start_daemon("--tls-cert", str(cert), "--tls-key", str(key), scheme="grpc+tls", host="localhost")
    client = d.client(tls_root_certs=cert.read_bytes())
    action(client, "create_table", {"name": "secure"})
    put(client, "secure", ['{"a": 1}', '{"a": 2}'])
    table, _, _ = query(client, {"table": "secure", "filter": "a = 2"})
    assert table.column("a").to_pylist() == [2]
    plain = flight.FlightClient(f"grpc://localhost:{d.port}")
    with pytest.raises(ANY_ERROR):
        list(plain.list_flights())


def test_pushed_aggregates_are_final_or_partial_and_match_the_python_oracle(daemon):
    events = github_events(3000)
    records = [json.loads(e) for e in events]
    client = daemon.client()
    # Small pages so that a partial query splits into several endpoints.
    action(client, "create_table", {"name": "agg", "page_size_bits": 18})
    put(client, "agg", events[:1500])
    action(client, "register_psf", {"table": "agg", "name": "type", "kind": "projection", "field": "type", "backfill": False})
    put(client, "agg", events[1500:])
    aggregates = [
        {"function": "count"},
        {"function": "count", "column": "payload.size"},
        {"function": "min", "column": "payload.size"},
        {"function": "max", "column": "payload.size"},
        {"function": "max", "column": "actor.login"},
        {"function": "sum", "column": "payload.size"},
    ]
    names = ["count(*)", "count(payload.size)", "min(payload.size)", "max(payload.size)", "max(actor.login)", "sum(payload.size)"]
    for text, oracle in [
        ("type = 'WatchEvent'", lambda r: r["type"] == "WatchEvent"),
        ("payload.size > 3", lambda r: isinstance(dig(r, "payload.size"), int) and dig(r, "payload.size") > 3),
        ("type = 'NoSuchEvent'", lambda r: False),
        (None, lambda r: True),
    ]:
        matching = [r for r in records if oracle(r)]
        sizes = [dig(r, "payload.size") for r in matching if dig(r, "payload.size") is not None]
        logins = [dig(r, "actor.login") for r in matching if dig(r, "actor.login") is not None]
        expected = [len(matching), len(sizes), min(sizes, default=None), max(sizes, default=None),
                    max(logins, default=None), sum(sizes) if sizes else None]

        # By default the answer is final: one endpoint, one row, whatever max_endpoints says;
        # avg too.
        command = {"table": "agg", "aggregates": aggregates + [{"function": "avg", "column": "payload.size"}], "max_endpoints": 4}
        if text:
            command["filter"] = text
        table, info, _ = query(client, command)
        assert len(info.endpoints) == 1 and table.num_rows == 1, text
        assert table.schema.names == names + ["avg(payload.size)"]
        row = [table.column(i)[0].as_py() for i in range(7)]
        assert row[:6] == expected, text
        assert row[6] == (pytest.approx(sum(sizes) / len(sizes)) if sizes else None), text

        # "partial": true: one row of partial aggregates per endpoint, merged by the reader.
        command = {"table": "agg", "aggregates": aggregates, "max_endpoints": 4, "partial": True}
        if text:
            command["filter"] = text
        table, info, _ = query(client, command)
        assert len(info.endpoints) > 1 or text == "type = 'NoSuchEvent'", text
        assert table.num_rows == len(info.endpoints), "one row of partial aggregates per endpoint"
        assert table.schema.names == names
        columns = [[v for v in table.column(i).to_pylist() if v is not None] for i in range(6)]
        merged = [sum(columns[0]), sum(columns[1]), min(columns[2], default=None), max(columns[3], default=None),
                  max(columns[4], default=None), sum(columns[5]) if columns[5] else None]
        assert merged == expected, text

    def status_of(command):
        with pytest.raises(ANY_ERROR) as error:
            query(client, command)
        return str(error.value)

    assert "cannot be combined" in status_of({"table": "agg", "aggregates": [{"function": "count"}], "columns": ["id"]})
    assert "min(actor)" in status_of({"table": "agg", "aggregates": [{"function": "min", "column": "actor"}]})
    assert "sum(actor.login)" in status_of({"table": "agg", "aggregates": [{"function": "sum", "column": "actor.login"}]})
    assert "sum\" and \"count" in status_of(
        {"table": "agg", "aggregates": [{"function": "avg", "column": "payload.size"}], "partial": True})
    assert "applies to" in status_of({"table": "agg", "partial": True})
    assert "unknown variant `median`" in status_of({"table": "agg", "aggregates": [{"function": "median", "column": "id"}]})
    assert daemon.alive()


def test_group_by_answers_one_row_per_group_final_or_partial_like_the_python_oracle(daemon):
    events = github_events(3000)
    records = [json.loads(e) for e in events]
    client = daemon.client()
    action(client, "create_table", {"name": "grp", "page_size_bits": 18})
    put(client, "grp", events[:1500])
    action(client, "register_psf", {"table": "grp", "name": "type", "kind": "projection", "field": "type", "backfill": False})
    put(client, "grp", events[1500:])
    aggregates = [{"function": "count"}, {"function": "sum", "column": "payload.size"},
                  {"function": "max", "column": "actor.login"}]

    def oracle(keep):
        groups = {}
        for r in records:
            if keep(r):
                g = groups.setdefault(r["type"], [0, None, None])
                g[0] += 1
                size = dig(r, "payload.size")
                if isinstance(size, int):
                    g[1] = (g[1] or 0) + size
                login = dig(r, "actor.login")
                if login is not None and (g[2] is None or login > g[2]):
                    g[2] = login
        return groups

    for text, keep in [(None, lambda r: True), ("payload.size > 0", lambda r: isinstance(dig(r, "payload.size"), int) and dig(r, "payload.size") > 0)]:
        expected = oracle(keep)
        command = {"table": "grp", "group_by": ["type"], "aggregates": aggregates, "max_endpoints": 4}
        if text:
            command["filter"] = text
        # Final (the default): one endpoint, one row per group; the same in one DoGet call.
        table, info, _ = query(client, command)
        assert len(info.endpoints) == 1
        assert table.schema.names == ["type", "count(*)", "sum(payload.size)", "max(actor.login)"]
        rows = {r["type"]: [r["count(*)"], r["sum(payload.size)"], r["max(actor.login)"]] for r in table.to_pylist()}
        assert rows == expected, text
        one_call = client.do_get(flight.Ticket(json.dumps(command).encode())).read_all()
        assert {r["type"]: r["count(*)"] for r in one_call.to_pylist()} == {k: v[0] for k, v in expected.items()}
        # Partial: every endpoint its own groups; merged per key they are the answer.
        table, info, _ = query(client, {**command, "partial": True})
        assert len(info.endpoints) > 1
        merged = {}
        for r in table.to_pylist():
            m = merged.setdefault(r["type"], [0, None, None])
            m[0] += r["count(*)"]
            if r["sum(payload.size)"] is not None:
                m[1] = (m[1] or 0) + r["sum(payload.size)"]
            if r["max(actor.login)"] is not None and (m[2] is None or r["max(actor.login)"] > m[2]):
                m[2] = r["max(actor.login)"]
        assert merged == expected, text

    # Keys only: the distinct values (nulls are one group).
    table, _, _ = query(client, {"table": "grp", "group_by": ["type", "payload.action"]})
    assert sorted(table.to_pylist(), key=str) == sorted(
        [{"type": t, "payload.action": a} for t, a in {(r["type"], dig(r, "payload.action")) for r in records}], key=str)

    def status_of(command):
        with pytest.raises(ANY_ERROR) as error:
            query(client, command)
        return str(error.value)

    assert "cannot be grouped" in status_of({"table": "grp", "group_by": ["actor"], "aggregates": [{"function": "count"}]})
    assert "cannot be combined" in status_of({"table": "grp", "group_by": ["type"], "columns": ["id"]})
    assert "nope" in status_of({"table": "grp", "group_by": ["nope"]})
    assert daemon.alive()


def test_endpoints_keep_chain_walks_whole_and_split_full_scans(daemon):
    events = github_events(3000)
    client = daemon.client()
    action(client, "create_table", {"name": "ep", "page_size_bits": 18})
    put(client, "ep", events[:1500])
    action(client, "register_psf", {"table": "ep", "name": "type", "kind": "projection", "field": "type", "backfill": False})
    put(client, "ep", events[1500:])

    def ranges(info):
        # Each endpoint's app_metadata is the plan of its log range.
        plans = [json.loads(e.app_metadata) for e in info.endpoints]
        spans = [[(s["from"], s["to"]) for s in p["index_scans"] + p["full_scans"]] for p in plans]
        return [(min(f for f, _ in s), max(t for _, t in s)) for s in spans]

    for text, index_endpoints in [("type = 'WatchEvent'", 1), ("payload.size > 3", 0)]:
        table, info, meta = query(client, {"table": "ep", "filter": text, "columns": ["id"], "max_endpoints": 4})
        spans = ranges(info)
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), f"endpoints tile the log: {spans}"
        assert spans[0][0] == meta["from"] and spans[-1][1] == meta["to"]
        index_ranges = [(s["from"], s["to"]) for s in meta["plan"]["index_scans"]]
        assert sum(1 for r in spans if r in index_ranges) == index_endpoints, (text, spans, index_ranges)
        assert len(spans) <= 4 + index_endpoints
    # The index scan after registration is one endpoint; the full scan before it is split.
    _, info, meta = query(client, {"table": "ep", "filter": "type = 'WatchEvent'", "columns": ["id"], "max_endpoints": 4})
    assert len(info.endpoints) >= 2
