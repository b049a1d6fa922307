"""A table sharded over three daemons: three `shoal serve` processes on loopback, one
membership list; every answer is compared with one daemon holding the same records."""

import json
import secrets
import signal
import subprocess
from collections import Counter

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from conftest import Daemon, action, dig, free_port, github_events, put, query, shoal_binary, string_literals


class Cluster:
    """Three nodes, each a real daemon with its own data directory and a fixed port."""

    def __init__(self, root, size=3, *extra):
        self.root = root
        self.extra = extra
        self.ports = [free_port() for _ in range(size)]
        self.nodes = ",".join(f"grpc://127.0.0.1:{p}" for p in self.ports)
        self.secret = secrets.token_hex(32)
        self.daemons = [self.start(i) for i in range(size)]

    def start(self, i):
        return Daemon(self.root / f"node{i}", "--cluster-nodes", self.nodes, "--node-id", str(i),
                      "--cluster-secret", self.secret, *self.extra,
                      listen=f"127.0.0.1:{self.ports[i]}")

    def client(self, i):
        return self.daemons[i].client()

    def stop(self):
        for d in self.daemons:
            d.stop()


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path, 3, "--durability", "group_commit")
    yield c
    c.stop()


def put_batch(client, table: str, rows: list[str], metadata: dict) -> dict:
    """One DoPut batch of `rows` into `table` with `metadata` (a writer's serial, a
    transaction); the daemon's answer."""
    schema = pa.schema([("json", pa.string())])
    writer, reader = client.do_put(flight.FlightDescriptor.for_path(table), schema)
    with writer:
        writer.write_with_metadata(pa.record_batch([pa.array(rows, pa.string())], schema=schema), json.dumps(metadata).encode())
        ack = json.loads(reader.read().to_pybytes())
        writer.done_writing()
    return ack


def read_all(client, command, at_locations=True):
    """Plans on `client` and reads every endpoint — at its location (a new client per node), or
    all through `client` (which forwards shards it does not hold)."""
    info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(command)))
    tables = []
    for endpoint in info.endpoints:
        reader = client
        if at_locations and endpoint.locations:
            reader = flight.FlightClient(endpoint.locations[0])
        tables.append(reader.do_get(endpoint.ticket).read_all())
    rows = pa.concat_tables(tables, promote_options="permissive") if tables else None
    return rows, info, json.loads(info.app_metadata)


def ids(rows):
    return sorted(rows.column("id").to_pylist()) if rows is not None and rows.num_rows else []


def test_a_sharded_table_answers_as_one_daemon_holding_its_records(cluster, start_daemon):
    events = github_events(6000)
    single = start_daemon().client()
    action(single, "create_table", {"name": "events"})
    created = action(cluster.client(1), "create_table", {"name": "events", "shard_key": "id"})
    assert created["created"] is True and created["shards"] == 3
    assert [s["node"] for s in created["shard_map"]] == [0, 1, 2]
    assert [s["location"] for s in created["shard_map"]] == [f"grpc://127.0.0.1:{p}" for p in cluster.ports]
    # A plain create_table of the name (what connectors send, with if_not_exists) finds it.
    assert action(cluster.client(2), "create_table", {"name": "events", "if_not_exists": True})["created"] is False
    with pytest.raises(pa.ArrowException, match="already exists"):
        action(cluster.client(2), "create_table", {"name": "events"})
    # Every node knows the table.
    for i in range(3):
        described = action(cluster.client(i), "cluster", {})
        assert described["node_id"] == i
        assert [t["name"] for t in described["tables"]] == ["events"]

    # Half the records, a PSF registered mid-stream on every shard (through another node), the rest.
    half = len(events) // 2
    put(single, "events", events[:half])
    acks = put(cluster.client(0), "events", events[:half])
    assert sum(a["records"] for a in acks) == half
    assert all(len(a["shards"]) >= 1 for a in acks)
    action(single, "register_psf", {"table": "events", "name": "by_type", "kind": "projection", "field": "type"})
    registered = action(cluster.client(2), "register_psf", {"table": "events", "name": "by_type", "kind": "projection", "field": "type"})
    assert [s["name"] for s in registered["shards"]] == ["by_type"] * 3
    put(single, "events", events[half:])
    put(cluster.client(2), "events", events[half:])

    psfs = action(cluster.client(0), "list_psfs", {"table": "events"})
    assert sorted(p["shard"] for p in psfs) == [0, 1, 2]

    # Spread by the key: each shard within ±10 % of even.
    stats = action(cluster.client(0), "stats", {"table": "events"})
    assert stats["records"] == len(events)
    per_shard = [s["records"] for s in stats["shards"]]
    even = len(events) / 3
    assert all(abs(n - even) <= 0.1 * even for n in per_shard), per_shard

    for command in (
        {"table": "events", "columns": ["id"]},
        {"table": "events", "columns": ["id", "type"], "filter": "type = 'PushEvent'"},
        {"table": "events", "columns": ["id"], "filter": "type = 'IssuesEvent' AND payload.action = 'opened'"},
        {"table": "events", "columns": ["id", "repo.name"], "filter": "actor.login LIKE 'a%'"},
    ):
        expected, _, _ = query(single, command)
        for node in range(3):
            at_locations, info, meta = read_all(cluster.client(node), command)
            assert ids(at_locations) == ids(expected), (node, command)
            assert meta["sharded"] is True and meta["exact"] is True
            assert [s["shard"] for s in meta["shards"]] == [0, 1, 2]
            # Every endpoint names the node holding its shard.
            assert {e.locations[0].uri.decode() for e in info.endpoints} <= {f"grpc://127.0.0.1:{p}" for p in cluster.ports}
        through_one, _, _ = read_all(cluster.client(0), command, at_locations=False)
        assert ids(through_one) == ids(expected)
    # The PSF serves the part of each shard ingested after it was registered.
    _, _, meta = read_all(cluster.client(0), {"table": "events", "columns": ["id"], "filter": "type = 'PushEvent'"})
    assert all("by_type" in json.dumps(s["plan"]) for s in meta["shards"]), meta

    # A filter that pins the shard key plans only the shard that can hold it (partition pruning).
    some_id = json.loads(events[123])["id"]
    for command in ({"table": "events", "columns": ["id", "type"], "filter": f"id = '{some_id}'"},
                    {"table": "events", "columns": ["id"], "filter": f"type <> 'x' AND id IN ('{some_id}', 'nope')"}):
        rows, _, meta = read_all(cluster.client(1), command)
        assert ids(rows) == [some_id]
        assert meta["pruned_shards"] >= 1 and len(meta["shards"]) == 3 - meta["pruned_shards"]

    # A limit stays exact: one endpoint that reads the shards in turn.
    limited, info, _ = read_all(cluster.client(1), {"table": "events", "columns": ["id", "type"], "filter": "type = 'PushEvent'", "limit": 17})
    assert len(info.endpoints) == 1 and limited.num_rows == 17
    assert set(limited.column("type").to_pylist()) == {"PushEvent"}
    everything, _, _ = read_all(cluster.client(1), {"table": "events", "columns": ["id"], "limit": 100000})
    assert everything.num_rows == len(events)

    # Aggregates: partial rows per shard (what Spark merges) add up to the single answer.
    expected, _, _ = query(single, {"table": "events", "aggregates": [{"function": "count"}], "filter": "type = 'PushEvent'"})
    partial, _, _ = read_all(cluster.client(2), {"table": "events", "aggregates": [{"function": "count"}], "filter": "type = 'PushEvent'", "partial": True})
    assert sum(partial.column(0).to_pylist()) == expected.column(0)[0].as_py()
    # Final aggregates: one endpoint that merges every shard's partials (avg from sums and counts);
    # the answer is the single daemon's, per group too.
    aggregates = [{"function": "count"}, {"function": "avg", "column": "payload.size"}, {"function": "sum", "column": "payload.size"},
                  {"function": "min", "column": "created_at"}, {"function": "max", "column": "payload.size"}]
    for command in (
        {"table": "events", "aggregates": aggregates},
        {"table": "events", "aggregates": aggregates, "filter": "type = 'PushEvent'"},
        {"table": "events", "aggregates": aggregates[:2], "group_by": ["type"]},
    ):
        expected, _, _ = query(single, command)
        merged, info, _ = read_all(cluster.client(1), command)
        assert len(info.endpoints) == 1
        assert merged.column_names == expected.column_names
        key = lambda row: str(row.get("type"))
        want, got = sorted(expected.to_pylist(), key=key), sorted(merged.to_pylist(), key=key)
        assert len(got) == len(want)
        for w, g in zip(want, got):
            for name, value in w.items():
                if isinstance(value, float):
                    assert g[name] == pytest.approx(value), (command, name)
                else:
                    assert g[name] == value, (command, name)
    # A one-call query (DoGet of the command itself) of the sharded table: one stream, every shard.
    command = {"table": "events", "columns": ["id"], "filter": "type = 'PushEvent'"}
    one_call = cluster.client(2).do_get(flight.Ticket(json.dumps(command).encode())).read_all()
    assert ids(one_call) == ids(query(single, command)[0])
    counted = cluster.client(2).do_get(flight.Ticket(json.dumps({"table": "events", "aggregates": [{"function": "count"}]}).encode())).read_all()
    assert counted.column(0).to_pylist() == [len(events)]

    # Whole records: each shard inferred its own types (a path may be Int64 on one shard and JSON
    # text on another); every endpoint answers in the one merged schema the plan announces.
    info = cluster.client(0).get_flight_info(flight.FlightDescriptor.for_command(json.dumps({"table": "events", "filter": "type <> 'PushEvent'"})))
    parts = [flight.FlightClient(e.locations[0]).do_get(e.ticket).read_all() for e in info.endpoints]
    for part in parts:
        assert part.schema.types == info.schema.types
    whole = pa.concat_tables(parts)
    expected, _, _ = query(single, {"table": "events", "columns": ["id"], "filter": "type <> 'PushEvent'"})
    assert sorted(whole.column("id").to_pylist()) == ids(expected)

    # The schema is the shards' merged.
    schema = cluster.client(0).get_schema(flight.FlightDescriptor.for_path("events")).schema
    assert "id" in schema.names and "payload" in schema.names

    # Drop fans out too: the table is gone from every node.
    assert action(cluster.client(2), "drop_table", {"name": "events"})["dropped"] is True
    for i in range(3):
        assert action(cluster.client(i), "cluster", {})["tables"] == []
        with pytest.raises(pa.ArrowKeyError, match="does not exist"):
            action(cluster.client(i), "stats", {"table": "events.shard-%d" % i})


def test_writers_serials_and_transactions_span_the_shards(cluster):
    client = cluster.client(0)
    action(client, "create_table", {"name": "t", "shards": 4, "shard_key": "k"})
    records = [json.dumps({"k": f"key-{i}", "v": i}) for i in range(300)]

    def send(metadata, rows):
        return put_batch(client, "t", rows, metadata)

    # Before any record: a column is unknown everywhere (as on one daemon); a path only some shards
    # have seen reads as null on the others.
    with pytest.raises(pa.ArrowInvalid, match="unknown column"):
        read_all(client, {"table": "t", "columns": ["k"]})
    send({}, [json.dumps({"k": "only", "rare": 1})])
    rows, _, _ = read_all(cluster.client(1), {"table": "t", "columns": ["k", "rare"]})
    assert rows.to_pylist() == [{"k": "only", "rare": 1}]
    first = send({"writer": "w", "serial": 1}, records[:100])
    assert first["records"] == 100 and first["duplicate"] is False
    again = send({"writer": "w", "serial": 1}, records[:100])
    assert again["duplicate"] is True and again["records"] == 0
    status = action(cluster.client(1), "writer_status", {"table": "t", "writer": "w"})
    assert status["last_serial"] == 1 and len(status["shards"]) == 4

    action(client, "begin_transaction", {"table": "t", "transaction": "tx1"})
    staged = send({"transaction": "tx1"}, records[100:300])
    assert staged["staged"] == 200
    prepared = action(client, "prepare_transaction", {"table": "t", "transaction": "tx1"})
    assert prepared["state"] == "prepared" and prepared["records"] == 200
    assert action(client, "stats", {"table": "t"})["records"] == 101
    action(cluster.client(2), "commit_transaction", {"table": "t", "transaction": "tx1"})
    action(cluster.client(2), "commit_transaction", {"table": "t", "transaction": "tx1"})  # idempotent
    listed = action(cluster.client(1), "list_transactions", {"table": "t"})
    assert [(t["transaction"], t["state"], t["records"]) for t in listed] == [("tx1", "committed", 200)]
    assert len(listed[0]["shards"]) == 4
    rows, _, _ = read_all(cluster.client(1), {"table": "t", "columns": ["k", "v"]})
    assert sorted(v for v in rows.column("v").to_pylist() if v is not None) == list(range(300))


def test_a_node_down_fails_queries_by_name_and_its_records_come_back(cluster):
    events = github_events(3000)
    client = cluster.client(0)
    action(client, "create_table", {"name": "events", "shard_key": "id"})
    put(client, "events", events)
    before, _, _ = read_all(client, {"table": "events", "columns": ["id"]})
    assert before.num_rows == len(events)

    cluster.daemons[2].process.send_signal(signal.SIGKILL)
    cluster.daemons[2].process.wait(30)
    # `shoal cluster` (the first hour: there was no cluster command) shows who is down.
    shown = subprocess.run([str(shoal_binary()), "cluster", "--endpoint", cluster.daemons[0].location],
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "3 nodes; this is node 0", shown.stdout
    assert f"  node 1  grpc://127.0.0.1:{cluster.ports[1]}  up" in lines, shown.stdout
    assert any(l.startswith(f"  node 2  grpc://127.0.0.1:{cluster.ports[2]}  DOWN: ") for l in lines), shown.stdout
    assert "table events: 3 shards by id" in lines and any("on node 2" in l for l in lines), shown.stdout
    with pytest.raises(flight.FlightUnavailableError, match=r"shard 2 on node 2 \(grpc://127.0.0.1:%d\)" % cluster.ports[2]):
        client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps({"table": "events", "columns": ["id"]})))
    with pytest.raises(flight.FlightUnavailableError, match="shard 2 on node 2"):
        put(client, "events", [json.dumps({"id": f"new-{i}"}) for i in range(50)])
    # Flight SQL too: never a partial answer.
    import adbc_driver_flightsql.dbapi as flightsql
    import adbc_driver_manager
    with flightsql.connect(cluster.daemons[1].location) as conn, conn.cursor() as cur:
        for statement in ("SELECT id FROM events", "SELECT count(*) FROM events", "SELECT id FROM events ORDER BY id LIMIT 3"):
            with pytest.raises(adbc_driver_manager.Error, match=r"shard 2 on node 2 .*Unavailable"):
                cur.execute(statement)
                cur.fetchall()

    cluster.daemons[2] = cluster.start(2)
    after, _, _ = read_all(client, {"table": "events", "columns": ["id"]})
    # Every record acknowledged (group_commit: durable when acknowledged) is back; the batch
    # refused while node 2 was down may have landed on the other shards (a repeat is safe with a
    # writer serial), never on node 2's.
    got = Counter(after.column("id").to_pylist())
    assert all(got[json.loads(e)["id"]] == 1 for e in events)


def test_cluster_settings_are_checked_and_a_lone_daemon_refuses_shards(tmp_path, start_daemon):
    lone = start_daemon().client()
    assert action(lone, "cluster", {}) == {"node_id": None, "nodes": [], "tables": []}
    with pytest.raises(pa.ArrowInvalid, match="need a cluster"):
        action(lone, "create_table", {"name": "x", "shards": 2})
    with pytest.raises(RuntimeError, match="node_id 5 is not in cluster.nodes"):
        Daemon(tmp_path / "bad", "--cluster-nodes", "grpc://127.0.0.1:1,grpc://127.0.0.1:2", "--node-id", "5")
    # A node needs the secret the nodes share, of a length that cannot be guessed.
    with pytest.raises(RuntimeError, match="a cluster needs a secret its nodes share"):
        Daemon(tmp_path / "nosecret", "--cluster-nodes", "grpc://127.0.0.1:1", "--node-id", "0")
    with pytest.raises(RuntimeError, match="cluster.secret holds 5 bytes"):
        Daemon(tmp_path / "short", "--cluster-nodes", "grpc://127.0.0.1:1", "--node-id", "0", "--cluster-secret", "short")


def secret_header(secret):
    return flight.FlightCallOptions(headers=[(b"x-shoal-cluster-secret", secret.encode())])


def test_calls_between_nodes_need_the_cluster_secret_also_without_client_auth(tmp_path, start_daemon):
    """`cluster_define` / `cluster_forget` write `<data_dir>/cluster/`: from a client that does
    not carry the cluster's secret (none, or a wrong one) they are refused, and nothing is
    written; the nodes themselves (which carry it) define and forget tables as before."""
    one = Cluster(tmp_path, 1)
    try:
        client = one.client(0)
        definition = {"name": "t", "shards": 2, "shard_key": [], "nodes": 1, "options": {}}
        for options in [None, secret_header("0" * 64), secret_header(one.secret[::-1])]:
            with pytest.raises(flight.FlightUnauthorizedError, match="needs the cluster's secret"):
                action(client, "cluster_define", definition, options=options)
            with pytest.raises(flight.FlightUnauthorizedError, match="needs the cluster's secret"):
                action(client, "cluster_forget", {"table": "t"}, options=options)
        assert list((tmp_path / "node0" / "cluster").glob("*")) == []
        assert action(client, "cluster_define", definition, options=secret_header(one.secret))["defined"] is True
        assert [p.name for p in (tmp_path / "node0" / "cluster").glob("*.json")] == ["t.json"]
        assert action(client, "cluster_forget", {"table": "t"}, options=secret_header(one.secret))["forgotten"] is True
        # What the nodes do themselves carries the secret: a sharded table is made and dropped.
        assert action(client, "create_table", {"name": "s", "shards": 2})["created"] is True
        assert action(client, "drop_table", {"name": "s"})["dropped"] is True
    finally:
        one.stop()
    lone = start_daemon().client()
    with pytest.raises(flight.FlightUnauthorizedError, match="no node of a cluster"):
        action(lone, "cluster_define", definition)


def test_list_flights_shows_a_sharded_table_once(cluster):
    """ListFlights on any node lists the sharded table by its name, with its merged schema and
    the records of every shard (what catalogs show), not the shards' own tables; a node down
    leaves the entry without totals instead of failing the listing."""
    events = github_events(900)
    action(cluster.client(0), "create_table", {"name": "events", "shard_key": "id"})
    action(cluster.client(0), "create_table", {"name": "plain"})
    put(cluster.client(0), "events", events)
    for i in range(3):
        listed = {info.descriptor.path[0].decode(): info for info in cluster.client(i).list_flights()}
        assert "events" in listed and not any(".shard-" in name for name in listed), sorted(listed)
        info = listed["events"]
        assert info.total_records == len(events)
        assert {"id", "type", "actor"} <= set(info.schema.names)
        assert json.loads(info.app_metadata)["sharded"] is True
    assert "plain" in {info.descriptor.path[0].decode() for info in cluster.client(0).list_flights()}
    cluster.daemons[2].process.send_signal(signal.SIGKILL)
    cluster.daemons[2].process.wait()
    listed = {info.descriptor.path[0].decode(): info for info in cluster.client(0).list_flights()}
    assert listed["events"].total_records == -1
    assert "node 2" in json.loads(listed["events"].app_metadata)["error"]


def test_flight_sql_reads_a_sharded_table_as_one_daemon_holding_its_records(cluster, start_daemon):
    """Flight SQL (the real ADBC driver) on any node of the cluster: statements over the sharded
    table answer what the same statements answer on one daemon holding every record — rows read
    at the shards' locations, exact limits, merged aggregates, sorts and groups over all shards,
    prepared statements typed by the merged schema, EXPLAIN per shard, the catalog listing the
    table once, bulk ingest routed by key, DELETE on every shard of a keyed table."""
    import adbc_driver_flightsql.dbapi as flightsql
    import adbc_driver_manager

    events = github_events(3000)
    single = start_daemon()
    action(single.client(), "create_table", {"name": "events"})
    action(cluster.client(0), "create_table", {"name": "events", "shard_key": "id"})
    put(single.client(), "events", events)
    put(cluster.client(0), "events", events)
    records = [json.loads(r) for r in events]

    statements = [
        "SELECT id, actor.login AS who FROM events WHERE type = 'PushEvent' ORDER BY id",
        "SELECT count(*) AS n, min(payload.size), max(created_at), sum(payload.size), avg(payload.size) FROM events WHERE type = 'PushEvent'",
        'SELECT id, "created_at" FROM events ORDER BY created_at DESC, id LIMIT 7 OFFSET 3',
        "SELECT type, count(*) AS n, max(payload.size) AS most FROM events GROUP BY type ORDER BY n DESC, type",
        "SELECT DISTINCT type FROM events ORDER BY type",
        "SELECT count(*) FROM events WHERE actor.login LIKE 'a%'",
    ]

    def run(location, text, parameters=None):
        with flightsql.connect(location) as conn, conn.cursor() as cur:
            cur.execute(text, parameters=parameters)
            return cur.fetch_arrow_table()

    for text in statements:
        want = run(single.location, text)
        for node in (0, 2):
            got = run(cluster.daemons[node].location, text)
            assert got.column_names == want.column_names, text
            assert got.num_rows == want.num_rows, (node, text)
            for g, w in zip(got.to_pylist(), want.to_pylist()):
                assert g == {k: pytest.approx(v) if isinstance(v, float) else v for k, v in w.items()}, (node, text)

    with flightsql.connect(cluster.daemons[1].location) as conn, conn.cursor() as cur:
        # Rows with no sort come from every shard's endpoint, at its node; a limit stays exact.
        cur.execute("SELECT id, type FROM events WHERE type <> 'PushEvent'")
        table = cur.fetch_arrow_table()
        assert sorted(table.column("id").to_pylist()) == sorted(r["id"] for r in records if r["type"] != "PushEvent")
        cur.execute("SELECT id FROM events WHERE type = 'PushEvent' LIMIT 11")
        assert len(cur.fetchall()) == 11
        cur.execute("SELECT * FROM events LIMIT 5")
        star = cur.fetch_arrow_table()
        assert star.num_rows == 5 and {"id", "type", "actor", "payload"} <= set(star.column_names)

        # A prepared statement: its parameter typed by the merged schema, bound twice.
        login = dig(records[10], "actor.login")
        cur.execute("SELECT id FROM events WHERE actor.login = ? ORDER BY id", parameters=(login,))
        assert [r[0] for r in cur.fetchall()] == sorted(r["id"] for r in records if dig(r, "actor.login") == login)
        actor = dig(records[20], "actor.id")
        cur.execute("SELECT count(*) FROM events WHERE actor.id = ?", parameters=(actor,))
        assert cur.fetchone()[0] == sum(1 for r in records if dig(r, "actor.id") == actor)
        assert cur.adbc_execute_schema("SELECT id, payload.size AS size FROM events WHERE type = 'PushEvent'").names == ["id", "size"]

        # EXPLAIN: each shard's plan, on its node.
        cur.execute("EXPLAIN SELECT id FROM events WHERE type = 'WatchEvent'")
        steps = cur.fetch_arrow_table().to_pylist()
        shards = [s["detail"] for s in steps if s["plan_step"] == "shard"]
        assert len(shards) == 3 and all(f"events.shard-{i}" in shards[i] for i in range(3)), steps
        assert sum(1 for s in steps if s["plan_step"] == "filter") == 3

        # The catalog lists the sharded table once, by its name, with its merged schema.
        objects = conn.adbc_get_objects(depth="all").read_all().to_pylist()
        tables = {t["table_name"]: t for t in objects[0]["catalog_db_schemas"][0]["db_schema_tables"]}
        assert set(tables) == {"events"}
        assert {"id", "type", "actor", "payload"} <= {c["column_name"] for c in tables["events"]["table_columns"]}

        # Bulk ingest routed by the shard key, through this node.
        extra = pa.table({"json": [json.dumps({"id": f"sql-{i}", "type": "SqlEvent"}) for i in range(300)]})
        assert cur.adbc_ingest("events", extra, mode="append") == 300
        with pytest.raises(adbc_driver_manager.Error, match="exists"):
            cur.adbc_ingest("events", extra, mode="create")
    with flightsql.connect(cluster.daemons[2].location) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM events WHERE type = 'SqlEvent'")
        assert cur.fetchone()[0] == 300
    stats = action(cluster.client(0), "stats", {"table": "events"})
    assert stats["records"] == len(events) + 300
    assert all(s["records"] > len(events) / 3 * 0.9 for s in stats["shards"]), stats

    # DELETE on a keyed sharded table reaches every shard and answers how many rows it deleted.
    action(cluster.client(0), "create_table", {"name": "users", "primary_key": "id", "shards": 3})
    put(cluster.client(1), "users", [json.dumps({"id": i, "status": "closed" if i % 3 == 0 else "open"}) for i in range(60)])
    with flightsql.connect(cluster.daemons[2].location) as conn, conn.cursor() as cur:
        cur.adbc_statement.set_sql_query("DELETE FROM users WHERE status = 'closed'")
        assert cur.adbc_statement.execute_update() == 20
    with flightsql.connect(cluster.daemons[0].location) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM users")
        assert cur.fetchone()[0] == 40
    # Its listing counts rows (live keys, summed over the shards), not versions, as one daemon's.
    stats = action(cluster.client(1), "stats", {"table": "users"})
    assert stats["keys"]["live"] == 40 and stats["keys"]["keys"] == 60 and stats["records"] >= 60
    listed = {f.descriptor.path[0].decode(): f for f in cluster.client(1).list_flights()}
    assert listed["users"].total_records == 40
    with flightsql.connect(cluster.daemons[0].location) as conn, conn.cursor() as cur:
        # INSERT … VALUES, routed by the shard key through this node (an upsert by key).
        cur.execute("INSERT INTO users (id, status) VALUES (1, 'open'), (1000, 'new'), (1001, 'new')")
        assert cur.fetchall() == [(3,)]
        cur.execute("SELECT count(*) FROM users WHERE status = 'new' OR id = 1")
        assert cur.fetchone()[0] == 3
        cur.adbc_statement.set_sql_query("DELETE FROM users WHERE status = 'new' AND id >= 1000")
        assert cur.adbc_statement.execute_update() == 2
        cur.execute("SELECT count(*) FROM users")
        assert cur.fetchone()[0] == 40

    # The statement limit holds what the client sent (1 MiB), on every shard: a condition the
    # coordinator renders past 1 MiB is planned and deleted by every shard's node. A client's own
    # JSON filter past 1 MiB is refused by the node it reached, before any shard sees it.
    condition = f"status IN ({','.join(string_literals(132_000))},'open')"
    select, delete = (f"SELECT count(*) FROM users WHERE {condition}", f"DELETE FROM users WHERE {condition}")
    assert len(delete) < 1 << 20 < len(condition) + 132_000
    with flightsql.connect(cluster.daemons[1].location) as conn, conn.cursor() as cur:
        cur.execute(select)
        assert cur.fetchone()[0] == 40
        cur.adbc_statement.set_sql_query(delete)
        assert cur.adbc_statement.execute_update() == 40
        cur.execute("SELECT count(*) FROM users")
        assert cur.fetchone()[0] == 0
    padded = "status = 'open'" + " " * (1 << 20)
    shard_map = next(t for t in action(cluster.client(0), "cluster", {})["tables"] if t["name"] == "users")["shard_map"]
    elsewhere = next(s["table"] for s in shard_map if s["node"] != 0)  # forwarded by node 0 to its node
    for body in ({"table": "users", "filter": padded}, {"table": elsewhere, "filter": padded}):
        with pytest.raises(pa.ArrowInvalid, match="limit is 1048576 bytes"):
            action(cluster.client(0), "delete", body)
    with pytest.raises(pa.ArrowInvalid, match="limit is 1048576 bytes"):
        query(cluster.client(0), {"table": "users", "filter": padded})
    assert all(d.alive() for d in cluster.daemons)


def test_a_sharded_table_is_read_by_per_shard_log_ranges(cluster):
    """What a follower sends: `from_address` / `to_address` per shard table; only the shards named
    are read, each in its own range, in the table's merged schema; a plain address is refused."""
    client = cluster.client(0)
    action(client, "create_table", {"name": "events", "shard_key": "id"})
    put(client, "events", github_events(900))
    ends = {s["table"]: s["complete_until"] for s in action(client, "stats", {"table": "events"})["shards"]}
    by_shard = {}
    for i in range(3):
        rows, _, _ = query(cluster.client(i), {"table": f"events.shard-{i}", "columns": ["id"]})
        by_shard[f"events.shard-{i}"] = sorted(rows.column("id").to_pylist())
    named = ["events.shard-0", "events.shard-2"]
    command = {"table": "events", "columns": ["id", "type"], "from_address": {t: 0 for t in named},
               "to_address": {t: ends[t] for t in named}}
    rows, info, meta = read_all(cluster.client(1), command)
    assert ids(rows) == sorted(by_shard[named[0]] + by_shard[named[1]])
    assert [s["table"] for s in meta["shards"]] == named and meta["pruned_shards"] == 1
    # An empty range of one shard: nothing from it.
    command["from_address"]["events.shard-2"] = ends["events.shard-2"]
    rows, _, _ = read_all(cluster.client(1), command)
    assert ids(rows) == by_shard[named[0]]
    for bad in (64, {"events.shard-9": 0}, {"other.shard-0": 0}, {"events.shard-0": -1}):
        with pytest.raises(pa.ArrowInvalid, match="per shard"):
            client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps({"table": "events", "from_address": bad})))


def test_cluster_definitions_are_checked_before_a_name_becomes_a_file(tmp_path):
    """`cluster_define` writes `<data_dir>/cluster/<name>.json`: a name that is not a table name
    (a path, `..`), and shard or node counts out of range, are refused before anything is
    written; a daemon holding a table keeps it intact and keeps answering."""
    one = Cluster(tmp_path, 1)
    try:
        client = one.client(0)
        action(client, "create_table", {"name": "victim"})
        meta = tmp_path / "node0" / "tables" / "victim" / "table.json"
        before = meta.read_bytes()
        outside = tmp_path / "outside"
        base = {"shards": 2, "shard_key": [], "nodes": 1, "options": {}}
        # As another node would call (with the secret): the definitions are checked all the same.
        node = secret_header(one.secret)
        for name in ["../tables/victim/table", str(outside), "a/b", "..", ".hidden", "x" * 200, ""]:
            with pytest.raises(pa.ArrowInvalid, match="invalid table name"):
                action(client, "cluster_define", {**base, "name": name}, options=node)
            with pytest.raises(pa.ArrowInvalid, match="invalid table name"):
                action(client, "cluster_forget", {"table": name}, options=node)
        for field, value in [("shards", 0), ("shards", 1_000_000_000_000), ("nodes", 0), ("nodes", 1 << 40)]:
            with pytest.raises(pa.ArrowInvalid, match=f'"{field}" must be an integer'):
                action(client, "cluster_define", {**base, "name": "t", field: value}, options=node)
        assert meta.read_bytes() == before, "the table's metadata is untouched"
        assert not outside.with_suffix(".json").exists()
        assert [p.name for p in (tmp_path / "node0" / "cluster").glob("*")] == []
        assert [f.descriptor.path[0].decode() for f in client.list_flights()] == ["victim"]
        assert action(client, "cluster_define", {**base, "name": "t"}, options=node)["defined"] is True
    finally:
        one.stop()
