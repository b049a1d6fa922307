"""The first hour of a new user, end to end, through the `shoal` CLI only (issue: "The first
hour"): start a daemon by host name, create tables, ingest NDJSON, a JSON array file, CSV and
pretty-printed JSON, query in every format, SQL, TLS with an `openssl req -x509` certificate,
and a cluster of two on loopback — checking every message a user reads on the way."""

import csv
import io
import json
import secrets
import subprocess

import pyarrow as pa
import pyarrow.ipc

from conftest import Daemon, free_port, github_events, self_signed_cert, shoal_binary


def shoal(*args: str, endpoint: str, ok: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([str(shoal_binary()), *args, "--endpoint", endpoint], capture_output=True, text=True, timeout=120)
    if ok:
        assert result.returncode == 0, f"shoal {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result


def test_the_first_hour(tmp_path):
    events = github_events(500)
    daemon = Daemon(tmp_path / "data", listen="localhost:0")
    try:
        endpoint = f"localhost:{daemon.port}"  # no scheme: as client.md says it may be given
        # Create and ingest: NDJSON, an array, CSV, pretty-printed documents; the table first.
        assert json.loads(shoal("create-table", "events", endpoint=endpoint).stdout)["created"] is True
        ndjson = tmp_path / "events.ndjson"
        ndjson.write_text("\n".join(events) + "\n")
        out = shoal("ingest", "events", str(ndjson), endpoint=endpoint).stdout
        assert out.startswith("ingested 500 of 500 records (0 skipped") and "into events" in out, out
        records = [json.loads(e) for e in events[:3]]
        (tmp_path / "array.json").write_text(json.dumps(records, indent=2))
        (tmp_path / "pretty.json").write_text("\n".join(json.dumps(r, indent=4) for r in records))
        (tmp_path / "people.csv").write_text("id,name,age\n1,ana,31\n2,bo,\n")
        for table, path, count in (("array", "array.json", 3), ("pretty", "pretty.json", 3), ("people", "people.csv", 2)):
            out = shoal("ingest", table, str(tmp_path / path), "--create", endpoint=endpoint).stdout
            assert f"ingested {count} of {count} records" in out, out

        # Query in every format; the plan in one line.
        filter_ = "type = 'PushEvent'"
        pushes = sorted(json.loads(e)["id"] for e in events if json.loads(e)["type"] == "PushEvent")
        table = shoal("query", "events", "--filter", filter_, "--columns", "id", "--show", "2", endpoint=endpoint).stdout
        assert f"{len(pushes)} rows in" in table and "\nplan: full scan over" in table and "--plan" in table, table
        as_json = json.loads(shoal("query", "events", "--filter", filter_, "--columns", "id", "--format", "json", endpoint=endpoint).stdout)
        assert sorted(r["id"] for r in as_json) == pushes
        lines = shoal("query", "events", "--filter", filter_, "--columns", "id", "--format", "jsonl", endpoint=endpoint).stdout
        assert sorted(json.loads(l)["id"] for l in lines.splitlines()) == pushes
        rows = list(csv.DictReader(io.StringIO(shoal("query", "people", "--format", "csv", endpoint=endpoint).stdout)))
        assert [(r["id"], r["name"], r["age"]) for r in sorted(rows, key=lambda r: r["id"])] == [("1", "ana", "31"), ("2", "bo", "")]
        feather = tmp_path / "pushes.arrow"
        shoal("query", "events", "--filter", filter_, "--columns", "id", "--format", "arrow", "-o", str(feather), endpoint=endpoint)
        assert sorted(pa.ipc.open_file(pa.memory_map(str(feather))).read_all().column("id").to_pylist()) == pushes
        # LIKE with % anywhere and ILIKE (the first hour: only 'prefix%').
        bots = sorted(json.loads(e)["id"] for e in events if "bot" in json.loads(e)["actor"]["login"].lower())
        lines = shoal("query", "events", "--filter", "actor.login ILIKE '%BOT%'", "--columns", "id", "--format", "jsonl", endpoint=endpoint).stdout
        assert bots and sorted(json.loads(l)["id"] for l in lines.splitlines()) == bots
        raw = shoal("query", "array", "--raw", endpoint=endpoint).stdout
        assert sorted(json.loads(l)["id"] for l in raw.splitlines()) == sorted(r["id"] for r in records)

        # SQL, and a missing table named with the command that makes it.
        out = shoal("sql", "--format", "jsonl", "-c", "SELECT type, count(*) AS n FROM events GROUP BY type HAVING count(*) > 10 ORDER BY n DESC", endpoint=endpoint).stdout
        counts = {}
        for e in events:
            counts[json.loads(e)["type"]] = counts.get(json.loads(e)["type"], 0) + 1
        assert [json.loads(l) for l in out.splitlines()] == [{"type": t, "n": n} for t, n in sorted(counts.items(), key=lambda kv: -kv[1]) if n > 10]
        # `query --sql`: a statement with query's output (formats, the plan line).
        out = shoal("query", "--sql", f"SELECT id FROM events WHERE {filter_}", "--format", "jsonl", endpoint=endpoint).stdout
        assert sorted(json.loads(l)["id"] for l in out.splitlines()) == pushes
        out = shoal("query", "--sql", f"SELECT count(*) FROM events WHERE {filter_}", endpoint=endpoint).stdout
        assert f"| {len(pushes)} " in out and "1 rows in" in out and "plan: " in out, out
        both = shoal("query", "events", "--sql", "SELECT 1", endpoint=endpoint, ok=False)
        assert both.returncode == 2 and "--sql" in both.stderr, both.stderr
        missing = shoal("query", "evnets", endpoint=endpoint, ok=False)
        assert missing.returncode != 0 and "create it with `shoal create-table evnets`" in missing.stderr, missing.stderr
        stats = json.loads(shoal("stats", "events", endpoint=endpoint).stdout)
        assert stats["records"] == 500 and stats["memory"]["reserved_bytes"] < stats["memory"]["bound_bytes"], stats
        # Aggregates and time travel in `query`: the table now, and as it was at that tail.
        shoal("ingest", "events", str(tmp_path / "array.json"), endpoint=endpoint)
        count = lambda *more: json.loads(shoal("query", "events", "--aggregate", "count,max:id", "--format", "jsonl", *more, endpoint=endpoint).stdout)
        assert count()["count(*)"] == 503 and count("--to-address", str(stats["tail_address"]))["count(*)"] == 500
    finally:
        daemon.stop()

    # TLS with the certificate `openssl req -x509` makes (a CA certificate), as pyarrow takes it.
    cert, key = self_signed_cert(tmp_path)
    tls = Daemon(tmp_path / "tls", "--tls-cert", str(cert), "--tls-key", str(key), scheme="grpc+tls", host="localhost")
    try:
        endpoint = f"grpc+tls://localhost:{tls.port}"
        shoal("create-table", "t", "--tls-ca", str(cert), endpoint=endpoint)
        assert shoal("tables", "--tls-ca", str(cert), endpoint=endpoint).stdout.split() == ["t"]
        untrusted = shoal("tables", endpoint=endpoint, ok=False)
        assert "certificate" in untrusted.stderr and "--tls-ca" in untrusted.stderr, untrusted.stderr
    finally:
        tls.stop()

    # A cluster of two on loopback: a sharded table through either node.
    ports = [free_port(), free_port()]
    nodes = ",".join(f"grpc://127.0.0.1:{p}" for p in ports)
    secret = secrets.token_hex(16)
    cluster = [Daemon(tmp_path / f"node{i}", "--cluster-nodes", nodes, "--node-id", str(i), "--cluster-secret", secret,
                      listen=f"127.0.0.1:{p}") for i, p in enumerate(ports)]
    try:
        first, second = (f"127.0.0.1:{p}" for p in ports)
        shoal("create-table", "sharded", "--shard-key", "id", endpoint=first)
        out = shoal("ingest", "sharded", str(ndjson), endpoint=second).stdout
        assert "ingested 500 of 500 records" in out and "last address 0" not in out, out
        shown = shoal("cluster", endpoint=second).stdout.splitlines()
        assert shown[0] == "2 nodes; this is node 1" and sum(" up" in l for l in shown) == 2, shown
        assert "table sharded: 2 shards by id" in shown, shown
        out = shoal("query", "sharded", "--filter", filter_, "--columns", "id", "--show", "0", endpoint=first).stdout
        assert f"{len(pushes)} rows in" in out and "plan: sharded over 2 shards; shard 0 on node 0:" in out, out
    finally:
        for d in cluster:
            d.stop()

    # The same over TLS: each node calls the other with the `openssl req -x509` certificate
    # trusted (--cluster-tls-ca), and the CLI with --tls-ca.
    ports = [free_port(), free_port()]
    nodes = ",".join(f"grpc+tls://127.0.0.1:{p}" for p in ports)
    tls_cluster = [Daemon(tmp_path / f"tls{i}", "--cluster-nodes", nodes, "--node-id", str(i), "--cluster-secret", secret,
                          "--tls-cert", str(cert), "--tls-key", str(key), "--cluster-tls-ca", str(cert),
                          scheme="grpc+tls", listen=f"127.0.0.1:{p}") for i, p in enumerate(ports)]
    try:
        first, second = (f"grpc+tls://127.0.0.1:{p}" for p in ports)
        shoal("create-table", "sharded", "--shard-key", "id", "--tls-ca", str(cert), endpoint=first)
        out = shoal("ingest", "sharded", str(ndjson), "--tls-ca", str(cert), endpoint=second).stdout
        assert "ingested 500 of 500 records" in out, out
        shown = shoal("cluster", "--tls-ca", str(cert), endpoint=first).stdout.splitlines()
        assert sum(" up" in l for l in shown) == 2, shown
        out = shoal("query", "sharded", "--aggregate", "count", "--format", "jsonl", "--tls-ca", str(cert), endpoint=first).stdout
        assert json.loads(out)["count(*)"] == 500, out
    finally:
        for d in tls_cluster:
            d.stop()
