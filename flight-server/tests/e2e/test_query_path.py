"""The query path: exact limits over every endpoint, raw JSON output, one-call DoGet
(the query command as the ticket), and tickets that carry their plan."""

import json
import subprocess
import threading

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from conftest import action, github_events, put, query, shoal_binary

ANY_ERROR = (pa.ArrowException, flight.FlightError)


def one_call(client, command: dict) -> pa.Table:
    """The whole answer of `command` in one DoGet (no GetFlightInfo)."""
    return client.do_get(flight.Ticket(json.dumps(command).encode())).read_all()


@pytest.fixture
def events_table(daemon):
    """Table `ev` with small pages: 1,500 GitHub events, a `type` PSF, 1,500 more. Returns
    (client, events, safe register address of the PSF)."""
    client = daemon.client()
    events = github_events(3000)
    action(client, "create_table", {"name": "ev", "page_size_bits": 18})
    put(client, "ev", events[:1500])
    # Forward only: the plans mix index scans (after it) and full scans (before).
    psf = action(client, "register_psf", {"table": "ev", "name": "type", "kind": "projection", "field": "type", "backfill": False})
    put(client, "ev", events[1500:])
    return client, events, psf["safe_register_address"]


def test_limits_are_exact_over_every_endpoint_while_another_client_ingests(daemon, events_table):
    client, events, registered = events_table
    parsed = [json.loads(e) for e in events]
    watch_ids = {e["id"] for e in parsed if e["type"] == "WatchEvent"}
    late_watch_ids = {e["id"] for e in parsed[1500:] if e["type"] == "WatchEvent"}
    sized_ids = {e["id"] for e in parsed if isinstance(e["payload"].get("size"), int) and e["payload"]["size"] > 1}
    assert len(late_watch_ids) > 7 and len(sized_ids) > 7

    stop = threading.Event()

    def ingest_other_records():
        # Records no filter below matches, so the expected answers stay fixed.
        other = daemon.client()
        n = 0
        while not stop.is_set():
            put(other, "ev", [json.dumps({"id": f"x{n + i}", "type": "Other"}) for i in range(200)], batch=100)
            n += 200

    writer = threading.Thread(target=ingest_other_records)
    writer.start()
    try:
        cases = [
            ("mixed", {"filter": "type = 'WatchEvent'"}, watch_ids),
            ("index", {"filter": "type = 'WatchEvent'", "from_address": registered}, late_watch_ids),
            ("full", {"filter": "payload.size > 1"}, sized_ids),
        ]
        for name, command, expected in cases:
            _, _, meta = query(client, {"table": "ev", "columns": ["id"], "max_endpoints": 6, **command})
            kinds = (bool(meta["plan"]["index_scans"]), bool(meta["plan"]["full_scans"]))
            assert kinds == {"mixed": (True, True), "index": (True, False), "full": (False, True)}[name], (name, meta)
            for limit in [1, 7, len(expected) + 1000]:
                table, info, _ = query(client, {"table": "ev", "columns": ["id"], "max_endpoints": 6, "limit": limit, **command})
                ids = table.column("id").to_pylist()
                assert len(ids) == min(limit, len(expected)), (name, limit, len(info.endpoints))
                assert set(ids) <= expected and len(set(ids)) == len(ids), (name, limit)
                # The same in one call.
                ids = one_call(client, {"table": "ev", "columns": ["id"], "limit": limit, **command}).column("id").to_pylist()
                assert len(ids) == min(limit, len(expected)) and set(ids) <= expected, (name, limit)
    finally:
        stop.set()
        writer.join(60)
    assert daemon.alive()


# Records whose bytes a re-serialisation would change: escapes, big and precise numbers,
# deep nesting, odd spacing.
ODD_RECORDS = [
    '{"id": 1, "kind": "odd", "s": "caf\\u00e9 \\ud83d\\ude00 \\/ \\"q\\" \\n"}',
    '{"id":2,"kind":"odd","n":123456789012345678,"f":1.50000000000000000001,"e":-2.5E+10}',
    '{ "id" : 3 , "kind" : "odd" , "deep" : ' + "[" * 100 + "{}" + "]" * 100 + " }",
    '{"id": 4, "kind": "odd", "nested": ' + '{"a": ' * 60 + "true" + "}" * 60 + ', "u": "\u00e9\u4e2d"}',
    '{"id": 5, "kind": "odd", "empty": {}, "list": [], "null": null, "t": "\\t\\u0000x"}',
]


def test_json_output_returns_the_records_byte_identical(daemon):
    client = daemon.client()
    action(client, "create_table", {"name": "raw", "page_size_bits": 16})
    filler = [json.dumps({"id": 100 + i, "kind": "filler", "pad": "x" * 200}) for i in range(600)]
    put(client, "raw", filler[:300] + ODD_RECORDS[:2])
    action(client, "register_psf", {"table": "raw", "name": "kind", "kind": "projection", "field": "kind", "backfill": False})
    put(client, "raw", filler[300:] + ODD_RECORDS[2:])
    stats = action(client, "stats", {"table": "raw"})
    assert stats["records"] == 605

    for filter_text, kinds in [
        ("kind = 'odd'", (True, True)),  # chains after registration, a full scan before
        ("id < 6", (False, True)),  # no PSF: full scan
        ("kind = 'odd' AND id >= 3", (True, True)),
    ]:
        command = {"table": "raw", "filter": filter_text, "output": "json", "max_endpoints": 4}
        table, info, meta = query(client, command)
        assert (bool(meta["plan"]["index_scans"]), bool(meta["plan"]["full_scans"])) == kinds
        assert table.schema == pa.schema([pa.field("json", pa.string(), nullable=False)])
        expected = sorted(r for r in ODD_RECORDS if json.loads(r)["id"] >= (3 if "id >= 3" in filter_text else 0))
        assert sorted(table.column("json").to_pylist()) == expected, filter_text
        assert sorted(one_call(client, command).column("json").to_pylist()) == expected, filter_text
    # Every record, no filter: nothing is parsed, and every record comes back as put.
    everything = one_call(client, {"table": "raw", "output": "json"}).column("json").to_pylist()
    assert sorted(everything) == sorted(filler + ODD_RECORDS)

    with pytest.raises(pa.ArrowInvalid, match="cannot be combined"):
        query(client, {"table": "raw", "output": "json", "columns": ["id"]})
    with pytest.raises(pa.ArrowInvalid, match="cannot be combined"):
        one_call(client, {"table": "raw", "output": "json", "aggregates": [{"function": "count"}]})
    with pytest.raises(pa.ArrowInvalid, match="unknown variant"):
        query(client, {"table": "raw", "output": "xml"})

    # The CLI prints the same records as NDJSON.
    out = subprocess.run(
        [str(shoal_binary()), "query", "--endpoint", daemon.location, "--table", "raw", "--filter", "kind = 'odd'", "--raw"],
        capture_output=True, text=True, timeout=60, check=True,
    )
    assert sorted(out.stdout.splitlines()) == sorted(ODD_RECORDS)
    assert "5 rows" in out.stderr


def test_one_call_doget_answers_like_getflightinfo_and_doget(events_table):
    client, _, _ = events_table
    commands = [
        {"table": "ev", "filter": "type = 'WatchEvent'", "columns": ["id", "actor.login"]},
        {"table": "ev", "filter": "payload.size > 3 OR type = 'WatchEvent'", "columns": ["id"]},
        {"table": "ev", "columns": ["id", "type"], "max_endpoints": 5},
        {"table": "ev", "filter": "type IN ('IssuesEvent', 'ForkEvent')"},
    ]
    for command in commands:
        two_calls, info, _ = query(client, command)
        assert len(info.endpoints) >= 1
        single = one_call(client, command)
        assert single.schema == two_calls.schema
        key = lambda t: sorted(map(json.dumps, t.to_pylist()))
        assert key(single) == key(two_calls), command
    # Aggregates in one call: one row over the whole table (GetFlightInfo gives one partial row per endpoint).
    aggregates = [{"function": "count"}, {"function": "max", "column": "id"}]
    command = {"table": "ev", "filter": "type = 'WatchEvent'", "aggregates": aggregates, "max_endpoints": 4}
    partials, _, _ = query(client, command)
    whole = one_call(client, command)
    assert whole.num_rows == 1
    assert whole.column("count(*)")[0].as_py() == sum(partials.column("count(*)").to_pylist())
    assert whole.column("max(id)")[0].as_py() == max(v for v in partials.column("max(id)").to_pylist() if v is not None)


def test_forged_truncated_and_stale_tickets_are_invalid_argument(daemon, events_table):
    client, events, _ = events_table
    _, info, _ = query(client, {"table": "ev", "filter": "type = 'WatchEvent'", "columns": ["id"], "max_endpoints": 1})
    (endpoint,) = info.endpoints
    raw = endpoint.ticket.ticket
    ticket = json.loads(raw)
    assert ticket["v"] == 2 and ticket["plan"]["index_scans"] and ticket["plan"]["filter"] == "type = 'WatchEvent'"
    expected = sorted(client.do_get(endpoint.ticket).read_all().column("id").to_pylist())
    assert len(expected) == sum(1 for e in events if json.loads(e)["type"] == "WatchEvent")

    def tampered(change) -> bytes:
        body = json.loads(raw)
        change(body)
        return json.dumps(body).encode()

    def set_psf_id(b):
        b["plan"]["index_scans"][0]["properties"][0]["psf_id"] = 999

    def rename_psf(b):
        b["plan"]["index_scans"][0]["properties"][0]["psf"] = "other"

    def overlap(b):
        b["plan"]["full_scans"].append(dict(b["plan"]["full_scans"][0]))

    def reverse(b):
        r = b["plan"]["full_scans"][0]
        r["from"], r["to"] = r["to"], r["from"]

    def index_before_registration(b):
        b["plan"]["index_scans"][0]["from"] = 0
        b["plan"]["full_scans"] = []

    def bad_hex(b):
        b["plan"]["index_scans"][0]["properties"][0]["canonical"] = "zz"

    def bad_filter(b):
        b["plan"]["filter"] = "type = ("

    def old_version(b):
        b["v"] = 1

    def unknown_key(b):
        b["plan"]["extra"] = 1

    cases = {
        "garbage": b"\x00\xff\xfe not json",
        "empty": b"",
        "truncated": raw[: len(raw) // 2],
        "not an object": b"[1, 2]",
        "psf id": tampered(set_psf_id),
        "psf name": tampered(rename_psf),
        "overlap": tampered(overlap),
        "reversed": tampered(reverse),
        "uncovered": tampered(index_before_registration),
        "hex": tampered(bad_hex),
        "filter": tampered(bad_filter),
        "version": tampered(old_version),
        "unknown key": tampered(unknown_key),
        "unknown command key": json.dumps({"table": "ev", "filtre": "x"}).encode(),
    }
    for name, body in cases.items():
        with pytest.raises(pa.ArrowInvalid) as error:
            client.do_get(flight.Ticket(body)).read_all()
        assert len(str(error.value)) < 8192, name
    assert "does not exist" in _error(client, cases["psf id"])
    assert "overlap" in _error(client, cases["overlap"])
    assert "does not cover" in _error(client, cases["uncovered"])
    assert "version 1" in _error(client, cases["version"])

    # A range past the tail is cut to it (no scan of pages that do not exist).
    def far_tail(b):
        b["plan"]["index_scans"][0]["to"] = 1 << 62

    assert sorted(client.do_get(flight.Ticket(tampered(far_tail))).read_all().column("id").to_pylist()) == expected
    # A ticket issued before its PSF was deregistered still reads its range along the chains.
    action(client, "deregister_psf", {"table": "ev", "name": "type"})
    assert sorted(client.do_get(endpoint.ticket).read_all().column("id").to_pylist()) == expected
    assert daemon.alive()


def _error(client, body: bytes) -> str:
    with pytest.raises(pa.ArrowInvalid) as error:
        client.do_get(flight.Ticket(body)).read_all()
    return str(error.value)
