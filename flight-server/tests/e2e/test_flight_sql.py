"""Arrow Flight SQL on the daemon's port, through the real ADBC Flight SQL driver
(adbc-driver-flightsql from PyPI), with authentication on: answers equal shoal's own query
path on the GitHub events (docs/sql.md)."""

import base64
import json
import re
import time

import adbc_driver_flightsql.dbapi as flightsql
import adbc_driver_manager
import pyarrow as pa
import pyarrow.flight as flight
import pytest

from conftest import action, dig, github_events, self_signed_cert, string_literals

USER, PASSWORD = "analyst", "pa:ss"
BASIC = flight.FlightCallOptions(
    headers=[(b"authorization", b"Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()))]
)


@pytest.fixture
def events_daemon(start_daemon):
    """A daemon with basic auth, a table `events` of GitHub events and a PSF on `type`."""
    d = start_daemon("--basic-auth", f"{USER}:{PASSWORD}")
    client = d.client()
    # Small pages, so that the PSF's range holds whole pages (as in test_query_path.py).
    action(client, "create_table", {"name": "events", "page_size_bits": 18}, options=BASIC)
    records = github_events(3000)
    # First half, PSF, second half: the PSF covers only part of the log.
    schema = pa.schema([("json", pa.string())])
    for half, part in enumerate((records[:1500], records[1500:])):
        writer, reader = client.do_put(flight.FlightDescriptor.for_path("events"), schema, options=BASIC)
        with writer:
            writer.write_batch(pa.record_batch([pa.array(part, pa.string())], schema=schema))
            reader.read()
            writer.done_writing()
        if half == 0:
            action(client, "register_psf", {"table": "events", "name": "type", "kind": "projection", "field": "type", "backfill": False}, options=BASIC)
    d.records = [json.loads(r) for r in records]
    d.native = client
    return d


def connect(d, **kwargs):
    return flightsql.connect(d.location, db_kwargs={"username": USER, "password": PASSWORD, **kwargs})


def test_queries_answer_what_the_native_path_answers(events_daemon):
    d = events_daemon
    pushes = sorted(r["id"] for r in d.records if r.get("type") == "PushEvent")
    assert pushes, "the sample has push events"
    with connect(d) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, actor.login AS who FROM events WHERE type = 'PushEvent'")
        table = cur.fetch_arrow_table()
        assert table.column_names == ["id", "who"]
        assert sorted(table.column("id").to_pylist()) == pushes
        by_id = {r["id"]: dig(r, "actor.login") for r in d.records}
        assert all(by_id[i] == who for i, who in zip(table.column("id").to_pylist(), table.column("who").to_pylist()))

        # The same rows as shoal's JSON command through pyarrow.flight.
        native = query_ids_with_basic(d, "type = 'PushEvent'")
        assert native == pushes

        cur.execute("SELECT count(*) AS n, min(payload.size), max(created_at) FROM shoal.public.events WHERE type = 'PushEvent'")
        df = cur.fetch_df()
        assert list(df.columns) == ["n", "min(payload.size)", "max(created_at)"]
        assert int(df["n"][0]) == len(pushes)
        sizes = [dig(r, "payload.size") for r in d.records if r.get("type") == "PushEvent" and dig(r, "payload.size") is not None]
        assert int(df["min(payload.size)"][0]) == min(sizes)
        assert df["max(created_at)"][0] == max(r["created_at"] for r in d.records if r.get("type") == "PushEvent")

        cur.execute('SELECT id, "created_at" FROM events ORDER BY created_at DESC, id LIMIT 7 OFFSET 3')
        rows = cur.fetchall()
        expected = sorted(d.records, key=lambda r: r["id"])
        expected = sorted(expected, key=lambda r: r["created_at"], reverse=True)[3:10]
        assert [(r["id"], r["created_at"]) for r in expected] == rows

        cur.execute("SELECT * FROM events LIMIT 5")
        star = cur.fetch_arrow_table()
        assert star.num_rows == 5 and "actor" in star.column_names


def query_ids_with_basic(d, text):
    command = {"table": "events", "columns": ["id"], "filter": text}
    info = d.native.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(command)), BASIC)
    ids = []
    for endpoint in info.endpoints:
        ids += d.native.do_get(endpoint.ticket, BASIC).read_all().column("id").to_pylist()
    return sorted(ids)


def test_group_by_sum_and_avg_equal_python(events_daemon):
    d = events_daemon
    from collections import defaultdict

    groups = defaultdict(lambda: [0, 0, 0])  # count, count(size), sum(size)
    for r in d.records:
        g = groups[r.get("type")]
        g[0] += 1
        size = dig(r, "payload.size")
        if isinstance(size, int):
            g[1] += 1
            g[2] += size
    expected = sorted(((t, c, n, s if n else None) for t, (c, n, s) in groups.items()), key=lambda row: (-row[1], row[0]))
    with connect(d) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT type, count(*) AS n, count(payload.size), sum(payload.size) FROM events GROUP BY type ORDER BY n DESC, type"
        )
        assert cur.fetchall() == expected
        # With a WHERE (planned onto the PSF), a LIMIT, and avg.
        cur.execute("SELECT type, avg(payload.size) AS a FROM events WHERE type = 'PushEvent' GROUP BY type")
        ((kind, average),) = cur.fetchall()
        push = groups["PushEvent"]
        assert kind == "PushEvent" and abs(average - push[2] / push[1]) < 1e-9
        cur.execute("SELECT sum(payload.size) AS total, count(*) FROM events")
        assert cur.fetchone() == (sum(g[2] for g in groups.values()), len(d.records))
        cur.execute("SELECT DISTINCT type FROM events ORDER BY type")
        assert [row[0] for row in cur.fetchall()] == sorted(groups, key=lambda t: (t is None, t))
        # HAVING (the first hour: refused): by an aggregate's call, its alias, and one the
        # select list lacks.
        cur.execute("SELECT type, count(*) AS n FROM events GROUP BY type HAVING count(*) >= 10 AND n < 1000 ORDER BY n DESC, type")
        assert cur.fetchall() == [(t, c) for t, c, _, _ in expected if 10 <= c < 1000]
        cur.execute("SELECT count(DISTINCT type) AS kinds, count(*) FROM events")
        assert cur.fetchone() == (len([t for t in groups if t is not None]), len(d.records))
        cur.execute("SELECT type, count(DISTINCT actor.login) AS actors FROM events GROUP BY type ORDER BY type")
        actors = defaultdict(set)
        for r in d.records:
            if dig(r, "actor.login") is not None:
                actors[r.get("type")].add(dig(r, "actor.login"))
        assert cur.fetchall() == [(t, len(actors[t])) for t in sorted(groups, key=lambda t: (t is None, t))]
        cur.execute("SELECT type FROM events GROUP BY type HAVING sum(payload.size) > 0 ORDER BY type")
        assert [row[0] for row in cur.fetchall()] == sorted(t for t, (_, n, s) in groups.items() if n and s > 0)


def test_prepared_statements_bind_parameters(events_daemon):
    d = events_daemon
    login = dig(d.records[10], "actor.login")
    expected = sorted(r["id"] for r in d.records if dig(r, "actor.login") == login)
    with connect(d) as conn, conn.cursor() as cur:
        cur.execute("SELECT id FROM events WHERE actor.login = ? ORDER BY id", parameters=(login,))
        assert [row[0] for row in cur.fetchall()] == expected
        # The same prepared statement again with another value.
        other = dig(d.records[20], "actor.login")
        cur.execute("SELECT id FROM events WHERE actor.login = ? ORDER BY id", parameters=(other,))
        assert [row[0] for row in cur.fetchall()] == sorted(r["id"] for r in d.records if dig(r, "actor.login") == other)
        cur.execute("SELECT count(*) FROM events WHERE payload.size > ? AND type = ?", parameters=(2, "PushEvent"))
        count = cur.fetchone()[0]
        assert count == sum(1 for r in d.records if r.get("type") == "PushEvent" and (dig(r, "payload.size") or 0) > 2)


def test_result_schema_without_running_the_statement(events_daemon):
    """GetSchema of a statement (ADBC's execute_schema) answers the schema the statement's
    result has, for statements, prepared statements and metadata commands; bad SQL is
    INVALID_ARGUMENT naming the problem."""
    d = events_daemon
    with connect(d) as conn, conn.cursor() as cur:
        text = "SELECT id, actor.login AS who, count(*) AS n FROM events WHERE type = 'PushEvent' GROUP BY id, actor.login"
        schema = cur.adbc_execute_schema(text)
        cur.execute(text)
        assert schema == cur.fetch_arrow_table().schema
        assert schema.names == ["id", "who", "n"]
        # Prepared, with its parameter not yet bound.
        prepared = "SELECT id FROM events WHERE actor.login = ?"
        assert cur.adbc_execute_schema(prepared).names == ["id"]
        assert cur.adbc_execute_schema("EXPLAIN SELECT id FROM events").names == ["plan_step", "detail"]
        with pytest.raises(adbc_driver_manager.Error, match=r"NOT_FOUND.*no_such_table"):
            cur.adbc_execute_schema("SELECT id FROM no_such_table")
    # pyarrow.flight's GetSchema on Flight SQL commands.
    table_types = d.native.get_schema(flight.FlightDescriptor.for_command(flight_sql_any("CommandGetTableTypes")), BASIC).schema
    assert table_types.names == ["table_type"]
    statement = flight_sql_any("CommandStatementQuery", bytes([1 << 3 | 2, 21]) + b"SELECT id FROM events")
    assert d.native.get_schema(flight.FlightDescriptor.for_command(statement), BASIC).schema.names == ["id"]
    with pytest.raises(pa.ArrowNotImplementedError, match="CommandGetExportedKeys is not implemented"):
        d.native.get_schema(flight.FlightDescriptor.for_command(flight_sql_any("CommandGetExportedKeys", bytes([3 << 3 | 2, 6]) + b"events")), BASIC)
    with pytest.raises(pa.ArrowInvalid, match="CommandStatementUpdate: it has no result set"):
        d.native.get_schema(flight.FlightDescriptor.for_command(flight_sql_any("CommandStatementUpdate", bytes([1 << 3 | 2, 18]) + b"DELETE FROM events")), BASIC)


def test_explain_shows_the_psf_plan(events_daemon):
    d = events_daemon
    with connect(d) as conn, conn.cursor() as cur:
        cur.execute("EXPLAIN SELECT id FROM events WHERE type = 'WatchEvent'")
        steps = cur.fetch_arrow_table().to_pylist()
    kinds = [s["plan_step"] for s in steps]
    assert "index_scan" in kinds and "full_scan" in kinds, steps
    index = json.loads(next(s["detail"] for s in steps if s["plan_step"] == "index_scan"))
    assert index["psfs"] == ["type"]
    assert next(s["detail"] for s in steps if s["plan_step"] == "filter") == "type = 'WatchEvent'"
    # The same statement without EXPLAIN returns the rows that plan finds.
    with connect(d) as conn, conn.cursor() as cur:
        cur.execute("SELECT id FROM events WHERE type = 'WatchEvent' ORDER BY id")
        assert [r[0] for r in cur.fetchall()] == sorted(r["id"] for r in d.records if r.get("type") == "WatchEvent")


def test_metadata_lists_catalog_schema_tables_and_columns(events_daemon):
    d = events_daemon
    with connect(d) as conn:
        objects = conn.adbc_get_objects(depth="all").read_all().to_pylist()
        assert [c["catalog_name"] for c in objects] == ["shoal"]
        schemas = objects[0]["catalog_db_schemas"]
        assert [s["db_schema_name"] for s in schemas] == ["public"]
        tables = {t["table_name"]: t for t in schemas[0]["db_schema_tables"]}
        assert set(tables) == {"events"}
        columns = {c["column_name"] for c in tables["events"]["table_columns"]}
        assert {"id", "type", "actor", "payload", "created_at"} <= columns
        schema = conn.adbc_get_table_schema("events")
        assert schema.field("id").type == pa.string() and pa.types.is_struct(schema.field("actor").type)
        assert conn.adbc_get_table_types() == ["TABLE"]
        info = conn.adbc_get_info()
        assert info["vendor_name"] == "shoal"


def flight_sql_any(message: str, body: bytes = b"") -> bytes:
    """A Flight SQL command as pyarrow sends it: an Any (type URL, value) encoded by hand."""
    def field(number, data):
        return bytes([number << 3 | 2, len(data)]) + data  # lengths < 128 here
    return field(1, f"type.googleapis.com/arrow.flight.protocol.sql.{message}".encode()) + field(2, body)


def test_xdbc_type_info_lists_the_scalar_types(events_daemon):
    d = events_daemon
    info = d.native.get_flight_info(flight.FlightDescriptor.for_command(flight_sql_any("CommandGetXdbcTypeInfo")), BASIC)
    table = pa.concat_tables([d.native.do_get(e.ticket, BASIC).read_all() for e in info.endpoints])
    assert set(table.column("type_name").to_pylist()) == {"BIGINT", "DOUBLE", "VARCHAR", "BOOLEAN"}


def test_bulk_ingest_writes_json_records(events_daemon):
    d = events_daemon
    with connect(d) as conn, conn.cursor() as cur:
        data = pa.table({"id": [1, 2, 3], "name": ["a", None, "c"], "score": [0.5, 1.5, None]})
        assert cur.adbc_ingest("people", data, mode="create") == 3
        assert cur.adbc_ingest("people", data.slice(0, 1), mode="append") == 1
        cur.execute("SELECT id, name, score FROM people ORDER BY id, name NULLS LAST")
        assert cur.fetchall() == [(1, "a", 0.5), (1, "a", 0.5), (2, None, 1.5), (3, "c", None)]
        # A `json` column is taken as the records themselves.
        records = pa.table({"json": ['{"id": 10, "tags": ["x"]}', '{"id": 11}']})
        assert cur.adbc_ingest("docs", records, mode="create_append") == 2
        cur.execute("SELECT id FROM docs ORDER BY id")
        assert cur.fetchall() == [(10,), (11,)]
        with pytest.raises(adbc_driver_manager.Error, match="exists"):
            cur.adbc_ingest("people", data, mode="create")
        with pytest.raises(adbc_driver_manager.Error, match="no table"):
            cur.adbc_ingest("missing", data, mode="append")
        assert cur.adbc_ingest("people", data, mode="replace") == 3
        cur.execute("SELECT count(*) FROM people")
        assert cur.fetchone()[0] == 3


@pytest.mark.parametrize(
    "statement, named",
    [
        ("SELEC id FROM events", "syntax error"),
        ("SELECT id FROM nowhere", "nowhere"),
        ("SELECT count(*) FROM events HAVING count(*) > 1", "HAVING needs GROUP BY"),
        ("SELECT type, actor.login FROM events GROUP BY type", "must be a GROUP BY key"),
        ("SELECT sum(type) FROM events", "sum(type)"),
        ("SELECT a.id FROM events a JOIN events b ON a.id = b.id", "JOIN"),
        ("DELETE FROM events", "keyed table"),  # run as the update it is: events is append-only
        ("SELECT id FROM events WHERE " + " AND ".join(["id >= 0"] * 5000), "operators"),
        ("SELECT id FROM events WHERE " + "(" * 300 + "id = 1" + ")" * 300, "nested too deeply"),
        ("SELECT nope FROM events", "nope"),
    ],
)
def test_bad_sql_is_invalid_argument_and_the_daemon_stays_up(events_daemon, statement, named):
    d = events_daemon
    with connect(d) as conn, conn.cursor() as cur:
        with pytest.raises(adbc_driver_manager.Error) as raised:
            cur.execute(statement)
            cur.fetchall()
        message = str(raised.value)
        assert named in message, message
        assert "InvalidArgument" in message or "NotFound" in message or "INVALID_ARGUMENT" in message, message
    assert d.alive()
    assert query_ids_with_basic(d, "type = 'PushEvent'")


def test_without_credentials_flight_sql_is_refused(events_daemon):
    d = events_daemon
    with pytest.raises(adbc_driver_manager.Error, match="(?i)unauthenticated"):
        with flightsql.connect(d.location) as conn, conn.cursor() as cur:
            cur.execute("SELECT id FROM events LIMIT 1")
            cur.fetchall()
    with pytest.raises(adbc_driver_manager.Error, match="(?i)unauthenticated"):
        with flightsql.connect(d.location, db_kwargs={"username": USER, "password": "wrong"}) as conn, conn.cursor() as cur:
            cur.execute("SELECT id FROM events LIMIT 1")
            cur.fetchall()


def test_tls_and_bearer_tokens_work_as_for_the_rest_of_the_service(start_daemon, tmp_path):
    cert, key = self_signed_cert(tmp_path)
    d = start_daemon("--tls-cert", str(cert), "--tls-key", str(key), "--auth-token", "s3cret", scheme="grpc+tls", host="localhost")
    options = {
        "adbc.flight.sql.client_option.tls_root_certs": cert.read_text(),
        "adbc.flight.sql.authorization_header": "Bearer s3cret",
    }
    with flightsql.connect(d.location, db_kwargs=options) as conn, conn.cursor() as cur:
        cur.adbc_ingest("secure", pa.table({"a": [1, 2, 3]}), mode="create")
        cur.execute("SELECT a FROM secure WHERE a >= ? ORDER BY a DESC", parameters=(2,))
        assert cur.fetchall() == [(3,), (2,)]
    wrong = {**options, "adbc.flight.sql.authorization_header": "Bearer nope"}
    with pytest.raises(adbc_driver_manager.Error, match="(?i)unauthenticated"):
        with flightsql.connect(d.location, db_kwargs=wrong) as conn, conn.cursor() as cur:
            cur.execute("SELECT a FROM secure")


def test_keyed_tables_report_their_primary_key_and_take_delete_statements(start_daemon):
    """A keyed table through Flight SQL: `GetPrimaryKeys` names its key fields in order
    (an append-only table has none), bulk ingest upserts by key, and `DELETE FROM … WHERE`
    as an update statement (ADBC's execute_update) deletes the matching rows and answers
    how many; UPDATE, and DELETE on an append-only table, are refused by name."""
    d = start_daemon("--basic-auth", f"{USER}:{PASSWORD}")
    native = d.client()
    action(native, "create_table", {"name": "users", "primary_key": ["tenant", "id"]}, options=BASIC)
    action(native, "create_table", {"name": "plain"}, options=BASIC)

    def primary_keys(table: str):
        body = bytes([3 << 3 | 2, len(table)]) + table.encode()
        info = native.get_flight_info(flight.FlightDescriptor.for_command(flight_sql_any("CommandGetPrimaryKeys", body)), BASIC)
        result = pa.concat_tables([native.do_get(e.ticket, BASIC).read_all() for e in info.endpoints])
        return list(zip(result.column("column_name").to_pylist(), result.column("key_sequence").to_pylist(), result.column("table_name").to_pylist()))

    assert primary_keys("users") == [("tenant", 1, "users"), ("id", 2, "users")]
    assert primary_keys("plain") == [] and primary_keys("missing") == []

    with connect(d) as conn, conn.cursor() as cur:
        rows = pa.table({"tenant": ["a", "a", "b", "b"], "id": [1, 2, 1, 2], "status": ["open", "closed", "closed", "open"]})
        assert cur.adbc_ingest("users", rows, mode="append") == 4
        # Bulk ingest into a keyed table upserts: key (a, 1) gets a new version.
        assert cur.adbc_ingest("users", pa.table({"tenant": ["a"], "id": [1], "status": ["closed"]}), mode="append") == 1
        cur.execute("SELECT tenant, id, status FROM users ORDER BY tenant, id")
        assert cur.fetchall() == [("a", 1, "closed"), ("a", 2, "closed"), ("b", 1, "closed"), ("b", 2, "open")]

    with connect(d) as conn, conn.cursor() as cur:
        # (A cursor that ran a bulk ingest keeps its statement in ingest mode: a fresh one.)
        cur.adbc_statement.set_sql_query("DELETE FROM users WHERE status = 'closed' AND tenant = 'a'")
        assert cur.adbc_statement.execute_update() == 2
        cur.execute("SELECT tenant, id FROM users ORDER BY tenant, id")
        assert cur.fetchall() == [("b", 1), ("b", 2)]
    with connect(d) as conn, conn.cursor() as cur:
        cur.adbc_statement.set_sql_query("DELETE FROM shoal.public.users")
        assert cur.adbc_statement.execute_update() == 2
        cur.execute("SELECT count(*) FROM users")
        assert cur.fetchone()[0] == 0
        for statement, named in [
            ("UPDATE users SET status = 'x'", "UPDATE is not supported"),
            ("DELETE FROM plain WHERE id = 1", "keyed table"),
            ("DELETE FROM nowhere", "nowhere"),
        ]:
            cur.adbc_statement.set_sql_query(statement)
            with pytest.raises(adbc_driver_manager.Error, match=named):
                cur.adbc_statement.execute_update()
    with connect(d) as conn, conn.cursor() as cur:
        assert cur.adbc_ingest("users", rows, mode="append") == 4
    with connect(d) as conn, conn.cursor() as cur:
        # DB-API's execute sends a DELETE as a query (the first hour: refused, "use
        # execute_update"): it runs as the update it is and answers the rows it changed.
        cur.execute("DELETE FROM users WHERE tenant = 'b'")
        assert cur.fetchall() == [(2,)]
        cur.execute("delete from users where id = 1")
        assert [d[0] for d in cur.description] == ["rows_affected"] and cur.fetchall() == [(1,)]
        cur.execute("SELECT tenant, id FROM users")
        assert cur.fetchall() == [("a", 2)]
        with pytest.raises(adbc_driver_manager.Error, match="keyed table"):
            cur.execute("DELETE FROM plain")
        # INSERT … VALUES (the first hour: refused): named columns (a NULL leaves its key out),
        # or each row's JSON; as a query (DB-API) or an update (ADBC); an upsert by key.
        cur.execute("INSERT INTO users (tenant, id, status, score) VALUES ('c', 1, 'new', 1.5), ('a', 2, NULL, -3)")
        assert cur.fetchall() == [(2,)]
        cur.adbc_statement.set_sql_query("""INSERT INTO shoal.public.users VALUES ('{"tenant": "d", "id": 9, "tags": ["x"]}')""")
        assert cur.adbc_statement.execute_update() == 1
        cur.execute("SELECT tenant, id, status, score FROM users ORDER BY tenant, id")
        assert cur.fetchall() == [("a", 2, None, -3.0), ("c", 1, "new", 1.5), ("d", 9, None, None)]
        # INSERT … SELECT: the query's rows, each a record of its columns (nulls left out);
        # AS names the keys; a table into itself reads what was there when it was planned.
        cur.execute("SELECT tenant, id, status, score FROM users ORDER BY tenant, id")
        before = cur.fetchall()
        cur.execute("INSERT INTO plain SELECT * FROM users WHERE id < 5")
        assert cur.fetchall() == [(2,)]
        cur.execute("INSERT INTO plain SELECT tenant AS who, score FROM users WHERE tenant = 'c'")
        assert cur.fetchall() == [(1,)]
        cur.execute("INSERT INTO plain SELECT * FROM plain")
        assert cur.fetchall() == [(3,)]
        cur.execute("SELECT tenant, id, status, score, who FROM plain ORDER BY tenant, id, who")
        copied = [(t, i, s, sc, None) for t, i, s, sc in before if i < 5] + [(None, None, None, 1.5, "c")]
        assert sorted(cur.fetchall(), key=repr) == sorted(copied * 2, key=repr)
        for statement, named in [
            ("INSERT INTO users (id) SELECT id FROM users", "INSERT … SELECT takes no column list"),
            ("INSERT INTO users SELECT * FROM nowhere", "nowhere"),
            ("INSERT INTO users (id) VALUES (1, 2)", "row 1 has 2 values for 1 columns"),
            ("INSERT INTO users VALUES ('[1]')", "not an object"),
            ("INSERT INTO nowhere (id) VALUES (1)", "nowhere"),
        ]:
            with pytest.raises(adbc_driver_manager.Error, match=re.escape(named)):
                cur.execute(statement)
    assert d.alive()


def test_explain_counts_the_columnar_row_groups_and_struct_columns_come_whole(start_daemon):
    """Over compacted data, EXPLAIN shows the columnar scans and the row groups their
    statistics rule out; a struct column selected through Flight SQL is the records' object."""
    from test_columnar import SMALL_FILES
    d = start_daemon("--basic-auth", f"{USER}:{PASSWORD}")
    client = d.client()
    action(client, "create_table", {"name": "cold", "page_size_bits": 18, "columnar": SMALL_FILES}, options=BASIC)
    records = github_events(2000)
    schema = pa.schema([("json", pa.string())])
    writer, reader = client.do_put(flight.FlightDescriptor.for_path("cold"), schema, options=BASIC)
    with writer:
        writer.write_batch(pa.record_batch([pa.array(records, pa.string())], schema=schema))
        reader.read()
        writer.done_writing()
    deadline = 60
    start = time.time()
    # (test_columnar's wait_compacted, with the credentials this daemon asks for.)
    while True:
        stats = action(client, "stats", {"table": "cold"}, options=BASIC)["columnar"]
        if stats["backlog_bytes"] == 0 and stats["files"] > 0:
            break
        assert time.time() - start < deadline, stats
        time.sleep(0.05)
    with connect(d) as conn, conn.cursor() as cur:
        # No push event has a million commits: every row group's maximum rules it out.
        cur.execute("EXPLAIN SELECT id, actor FROM cold WHERE payload.size > 1000000")
        steps = cur.fetch_arrow_table().to_pylist()
    kinds = [s["plan_step"] for s in steps]
    assert "columnar_scan" in kinds, steps
    groups = next(s["detail"] for s in steps if s["plan_step"] == "columnar_row_groups")
    total, skipped = (int(x) for x in re.match(r"(\d+) row groups, (\d+) skipped by their statistics", groups).groups())
    assert total > 0 and skipped == total, groups
    with connect(d) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, actor FROM cold WHERE payload.size > 5")
        table = cur.fetch_arrow_table()
    parsed = [json.loads(r) for r in records]
    names = [f.name for f in table.schema.field("actor").type]
    expected = sorted((r["id"], {k: r["actor"].get(k) for k in names}) for r in parsed if isinstance(dig(r, "payload.size"), int) and dig(r, "payload.size") > 5)
    assert sorted(zip(table.column("id").to_pylist(), table.column("actor").to_pylist()), key=lambda x: x[0]) == expected


def test_the_statement_limit_applies_to_the_bytes_the_client_sent(events_daemon):
    """A statement within the documented 1 MiB is answered even when its condition, as the
    daemon renders it for the plan and the tickets (`IN ('a', 'b')` with a space per value),
    passes 1 MiB — a SELECT and a DELETE; one byte past the limit is refused, naming it."""
    d = events_daemon
    action(d.native, "create_table", {"name": "small", "primary_key": "id"}, options=BASIC)
    schema = pa.schema([("json", pa.string())])
    writer, reader = d.native.do_put(flight.FlightDescriptor.for_path("small"), schema, options=BASIC)
    with writer:
        rows = ['{"id": 1, "k": "zz00"}', '{"id": 2, "k": "PushEvent"}', '{"id": 3, "k": "other"}']
        writer.write_batch(pa.record_batch([pa.array(rows, pa.string())], schema=schema))
        reader.read()
        writer.done_writing()
    values = string_literals(132_000)
    text = f"SELECT count(*) FROM small WHERE k IN ({','.join(values)},'PushEvent')"
    assert 900 << 10 < len(text) < 1 << 20
    rendered = len(text) + len(values)  # a space after each comma
    assert rendered > 1 << 20, "the rendered condition passes the limit"
    with connect(d) as conn, conn.cursor() as cur:
        cur.execute(text)
        assert cur.fetchall() == [(1,)]
        too_long = text.replace("SELECT", "SELECT" + " " * ((1 << 20) - len(text) + 1), 1)
        with pytest.raises(adbc_driver_manager.Error, match="limit is 1048576 bytes"):
            cur.execute(too_long)
            cur.fetchall()
        cur.adbc_statement.set_sql_query(text.replace("SELECT count(*)", "DELETE", 1))
        assert cur.adbc_statement.execute_update() == 1
        cur.execute(text)
        assert cur.fetchall() == [(0,)]
    assert d.alive()
