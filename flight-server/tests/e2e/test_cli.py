"""The `shoal` CLI's client commands and the metrics endpoint, against a real daemon."""

import json
import subprocess
import urllib.request

from conftest import action, free_port, github_events, query, self_signed_cert, shoal_binary


def cli(daemon, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        [str(shoal_binary()), *args, "--endpoint", daemon.location],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"shoal {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_ingest_psf_query_and_stats_commands(daemon, tmp_path):
    events = github_events(1500)
    path = tmp_path / "events.ndjson"
    path.write_text("\n".join(events) + "\n", encoding="utf-8")
    out = cli(daemon, "ingest", "--table", "events", "--create", "--batch-records", "400", str(path))
    assert "ingested 1500 of 1500 records" in out and "MB/s" in out
    # --wait: the PSF's backfill (the 1,500 records already there) is done when it answers.
    registered = json.loads(cli(daemon, "psf", "add", "--table", "events", "--name", "opened",
                                "--predicate", "type = 'IssuesEvent' AND payload.action = 'opened'", "--wait"))
    assert registered["safe_register_address"] > 0 and registered["backfill"]["done"] is True, registered
    assert registered["coverage"] == {"from": 64, "to": "tail"}, registered
    cli(daemon, "ingest", "--table", "events", "-", stdin="\n".join(events[:100]) + "\n")
    listed = json.loads(cli(daemon, "psf", "list", "--table", "events"))
    assert [p["name"] for p in listed] == ["opened"]
    out = cli(daemon, "query", "--table", "events", "--filter", "type = 'IssuesEvent' AND payload.action = 'opened'",
              "--columns", "id,actor.login", "--show", "3", "--plan")
    expected = sum(
        1 for e in events + events[:100]
        if (r := json.loads(e))["type"] == "IssuesEvent" and r["payload"].get("action") == "opened"
    )
    assert f"\n{expected} rows in" in "\n" + out
    assert '"index_scans"' in out and '"opened"' in out
    # By default, the plan in one line.
    out = cli(daemon, "query", "--table", "events", "--filter", "type = 'IssuesEvent' AND payload.action = 'opened'", "--show", "0")
    line = next(l for l in out.splitlines() if l.startswith("plan: "))
    assert "index scan on PSF opened over" in line and "--plan" in line, out
    assert "full scan over" not in line, out  # the backfill covers the records before the PSF
    # A timestamp range PSF of ten-second buckets; a TIMESTAMP range reads its chains.
    minute = json.loads(cli(daemon, "psf", "add", "events", "--name", "tens", "--range", "created_at", "--timestamp",
                            "--bucket", "10s", "--wait"))
    assert minute["definition"] == {"kind": "range", "field": "created_at", "type": "timestamp", "bucket": "10s", "unit": "s"}
    window = "created_at >= TIMESTAMP '2018-01-01T11:01:10Z' AND created_at < TIMESTAMP '2018-01-01 11:01:30'"
    out = cli(daemon, "query", "events", "--filter", window, "--show", "0")
    in_window = sum(1 for e in events + events[:100] if "2018-01-01T11:01:10Z" <= json.loads(e)["created_at"] < "2018-01-01T11:01:30Z")
    assert f"\n{in_window} rows in" in "\n" + out and "index scan on PSF tens" in out, out
    stats = json.loads(cli(daemon, "stats", "--table", "events"))
    assert stats["records"] == 1600
    dropped = json.loads(cli(daemon, "psf", "drop", "--table", "events", "--name", "opened"))
    assert dropped["safe_deregister_address"] >= registered["safe_register_address"]


def test_cli_reports_an_unreachable_daemon_clearly():
    port = free_port()
    result = subprocess.run(
        [str(shoal_binary()), "stats", "--endpoint", f"grpc://127.0.0.1:{port}"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode != 0
    assert "cannot connect" in result.stderr and "shoal serve" in result.stderr


def test_a_second_daemon_on_the_same_data_dir_is_refused(daemon, tmp_path):
    result = subprocess.run(
        [str(shoal_binary()), "serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "data")],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode != 0
    assert "in use by another shoal process" in result.stdout + result.stderr
    assert daemon.alive()


def test_prometheus_metrics_count_ingestion_and_scans(start_daemon):
    metrics_port = free_port()
    d = start_daemon("--metrics-listen", f"127.0.0.1:{metrics_port}")
    cli(d, "ingest", "--table", "m", "--create", "-", stdin="\n".join('{"a": %d}' % i for i in range(50)) + "\n")
    cli(d, "query", "--table", "m", "--filter", "a > 10")
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    assert 'shoal_ingested_records_total{table="m"} 50' in text
    assert 'shoal_scans_total{table="m",kind="full"}' in text


def cli_fails(daemon, *args: str) -> str:
    result = subprocess.run([str(shoal_binary()), *args, "--endpoint", daemon.location],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0, f"shoal {' '.join(args)} should fail:\n{result.stdout}"
    return result.stderr


def test_query_formats_files_and_stdin_agree_with_the_records(daemon, tmp_path):
    """`shoal query --format json|jsonl|csv|arrow [-o FILE]`, the filter from a file or stdin:
    each format holds exactly the matching rows (against a Python oracle over the same events)."""
    import csv
    import io
    import pyarrow.ipc as ipc

    events = github_events(800)
    path = tmp_path / "events.ndjson"
    path.write_text("\n".join(events) + "\n", encoding="utf-8")
    cli(daemon, "ingest", "--table", "events", "--create", str(path))
    where = "type = 'PushEvent' AND payload.size > 2"
    oracle = sorted(
        (r["id"], r["actor"]["login"], r["payload"]["size"])
        for r in map(json.loads, events)
        if r["type"] == "PushEvent" and r["payload"].get("size", 0) > 2
    )
    assert oracle, "the sample has matching events"
    columns = ("--columns", "id,actor.login,payload.size")

    # jsonl to stdout; the count goes to stderr so that stdout holds rows only.
    rows = [json.loads(line) for line in cli(daemon, "query", "--table", "events", "--filter", where, *columns,
                                             "--format", "jsonl").splitlines()]
    assert sorted((r["id"], r["actor.login"], r["payload.size"]) for r in rows) == oracle

    # json, the filter from a file, into a file.
    filter_file = tmp_path / "filter.sql"
    filter_file.write_text(where + "\n", encoding="utf-8")
    out = tmp_path / "rows.json"
    assert cli(daemon, "query", "--table", "events", "--filter-file", str(filter_file), *columns,
               "--format", "json", "-o", str(out)) == ""
    rows = json.loads(out.read_text(encoding="utf-8"))
    assert sorted((r["id"], r["actor.login"], r["payload.size"]) for r in rows) == oracle

    # csv, the filter from stdin: flat columns only.
    text = cli(daemon, "query", "--table", "events", "--filter-file", "-", "--columns", "id,payload.size",
               "--format", "csv", stdin=where)
    table = list(csv.DictReader(io.StringIO(text)))
    assert sorted((r["id"], int(r["payload.size"])) for r in table) == sorted((i, s) for i, _, s in oracle)
    error = cli_fails(daemon, "query", "--table", "events", "--filter", where, "--columns", "id,payload.commits", "--format", "csv")
    assert 'column "payload.commits"' in error and "--format jsonl" in error

    # arrow: an IPC file pyarrow opens.
    out = tmp_path / "rows.arrow"
    cli(daemon, "query", "--table", "events", "--filter", where, *columns, "--format", "arrow", "-o", str(out))
    table = ipc.open_file(str(out)).read_all()
    assert sorted(zip(table.column("id").to_pylist(), table.column("actor.login").to_pylist(),
                      table.column("payload.size").to_pylist())) == oracle

    # --raw: the records as ingested, into a file too.
    out = tmp_path / "raw.ndjson"
    assert cli(daemon, "query", "--table", "events", "--filter", where, "--raw", "-o", str(out)) == ""
    raw = out.read_text(encoding="utf-8").splitlines()
    assert sorted(raw) == sorted(e for e in events if (r := json.loads(e))["type"] == "PushEvent" and r["payload"].get("size", 0) > 2)

    # no match: still a valid document per format.
    assert json.loads(cli(daemon, "query", "--table", "events", "--filter", "id = 'none'", "--format", "json")) == []
    assert cli(daemon, "query", "--table", "events", "--filter", "id = 'none'", "--format", "jsonl") == ""
    assert "invalid value" in cli_fails(daemon, "query", "--table", "events", "--format", "xml")


def test_table_management_commands_and_completions(daemon, tmp_path):
    """tables, create-table with durability and columnar settings, truncate, checkpoint,
    drop-table; enum-like flags refuse other values; completion scripts for three shells."""
    created = json.loads(cli(daemon, "create-table", "logs", "--durability", "group_commit", "--group-commit-ms", "3",
                             "--on-invalid-json", "skip", "--columnar", "false"))
    assert created["created"] is True
    assert json.loads(cli(daemon, "create-table", "logs", "--if-not-exists"))["created"] is False
    assert "already exists" in cli_fails(daemon, "create-table", "logs")
    assert "invalid value" in cli_fails(daemon, "create-table", "x", "--durability", "sometimes")
    assert "invalid value" in cli_fails(daemon, "create-table", "x", "--on-invalid-json", "maybe")
    cli(daemon, "create-table", "other", "--retention-bytes", "1000000", "--retention-secs", "3600")
    assert json.loads(cli(daemon, "stats", "--table", "other"))["retention"] == {"keep_bytes": 1000000, "max_age_secs": 3600}
    assert cli(daemon, "tables").split() == ["logs", "other"]
    stdin = '{"id": 1}\nnot json\n{"id": 2}\n'
    cli(daemon, "ingest", "--table", "logs", "-", stdin=stdin)
    stats = json.loads(cli(daemon, "stats", "--table", "logs"))
    assert stats["records"] == 2 and stats["skipped_records"] == 1 and stats["columnar"]["enabled"] is False
    checkpoints = [json.loads(line) for line in cli(daemon, "checkpoint").splitlines() if line.strip()]
    assert len(checkpoints) == 2
    assert "required" in cli_fails(daemon, "truncate", "logs")
    tail = json.loads(cli(daemon, "stats", "--table", "logs"))["tail_address"]
    truncated = json.loads(cli(daemon, "truncate", "logs", "--before-address", str(tail)))
    assert truncated["table"] == "logs" and truncated["begin_address"] >= truncated["previous_begin_address"]
    cli(daemon, "drop-table", "other")
    assert cli(daemon, "tables").split() == ["logs"]
    assert "does not exist (NotFound)" in cli_fails(daemon, "drop-table", "other")
    for shell, marker in (("bash", "complete -F"), ("zsh", "#compdef shoal"), ("fish", "complete -c shoal")):
        script = subprocess.run([str(shoal_binary()), "completions", shell], capture_output=True, text=True, check=True).stdout
        assert marker in script and "drop-table" in script, shell


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(shoal_binary()), *args], input=stdin, capture_output=True, text=True, timeout=120)


def test_the_cli_connects_the_first_time(start_daemon, tmp_path):
    """The first hour: `--endpoint HOST:PORT` without a scheme, an `openssl req -x509`
    certificate (a CA certificate) that pyarrow accepts, `serve --listen localhost:…`, and
    failures that name their cause instead of "transport error"."""
    plain = start_daemon(listen="localhost:0")
    assert run_cli("tables", "--endpoint", f"127.0.0.1:{plain.port}").returncode == 0
    assert run_cli("tables", "--endpoint", f"localhost:{plain.port}").returncode == 0
    bad = run_cli("tables", "--endpoint", "http://127.0.0.1:1")
    assert bad.returncode != 0 and 'unknown scheme "http"' in bad.stderr, bad.stderr
    missing = run_cli("query", "--table", "nope", "--endpoint", f"127.0.0.1:{plain.port}")
    assert missing.returncode != 0 and "create it with `shoal create-table nope`" in missing.stderr, missing.stderr
    refused = run_cli("tables", "--endpoint", f"127.0.0.1:{free_port()}")
    assert refused.returncode != 0 and "Connection refused" in refused.stderr and "nothing listens there" in refused.stderr, refused.stderr

    cert, key = self_signed_cert(tmp_path)
    tls = start_daemon("--tls-cert", str(cert), "--tls-key", str(key), "--auth-token", "s3cret", scheme="grpc+tls", host="localhost")
    for host in ("localhost", "127.0.0.1"):
        ok = run_cli("tables", "--endpoint", f"grpc+tls://{host}:{tls.port}", "--tls-ca", str(cert), "--token", "s3cret")
        assert ok.returncode == 0, ok.stderr
    # The certificate not given: the check is named, and what to do.
    untrusted = run_cli("tables", "--endpoint", f"grpc+tls://localhost:{tls.port}", "--token", "s3cret")
    assert untrusted.returncode != 0 and "certificate" in untrusted.stderr and "--tls-ca" in untrusted.stderr, untrusted.stderr
    # Trusted, but for another name: refused.
    other = tmp_path / "other"
    other.mkdir()
    other_cert, _ = self_signed_cert(other)
    wrong = run_cli("tables", "--endpoint", f"grpc+tls://localhost:{tls.port}", "--tls-ca", str(other_cert), "--token", "s3cret")
    assert wrong.returncode != 0 and "certificate" in wrong.stderr, wrong.stderr
    # No credentials: said so, with the flags that give them.
    anonymous = run_cli("tables", "--endpoint", f"grpc+tls://localhost:{tls.port}", "--tls-ca", str(cert))
    assert anonymous.returncode != 0 and "Unauthenticated" in anonymous.stderr and "--token" in anonymous.stderr, anonymous.stderr


def test_ingest_takes_json_as_people_have_it(daemon, tmp_path):
    """The first hour: a JSON array file was stored as one record, pretty-printed JSON and CSV
    failed with simdjson's "fatal and unrecoverable error", errors named "batch 0: record 1",
    and a failed `ingest --create` left its empty table behind."""
    client = daemon.client()

    def ids(table):
        result, _, _ = query(client, {"table": table, "columns": ["id"]})
        return sorted(result.column("id").to_pylist())

    array = tmp_path / "array.json"
    array.write_text(json.dumps([{"id": 1, "a": [1, 2]}, {"id": 2, "a": {"b": "]"}}], indent=1))
    out = cli(daemon, "ingest", "--table", "arr", "--create", str(array))
    assert "ingested 2 of 2 records" in out, out
    assert ids("arr") == [1, 2]
    # The table first, in every command (the first hour: --table in some, positional in others).
    assert " into pos in " in cli(daemon, "ingest", "pos", str(array), "--create")
    assert [json.loads(l)["id"] for l in cli(daemon, "query", "pos", "--columns", "id", "--format", "jsonl").splitlines()] == [1, 2]
    assert json.loads(cli(daemon, "stats", "pos"))["records"] == 2
    assert json.loads(cli(daemon, "psf", "add", "pos", "--name", "by_id", "--projection", "id"))["name"] == "by_id"
    assert [p["name"] for p in json.loads(cli(daemon, "psf", "list", "pos"))] == ["by_id"]
    both = run_cli("query", "pos", "--table", "arr", "--endpoint", daemon.location)
    assert both.returncode != 0 and "cannot be used with" in both.stderr, both.stderr

    pretty = tmp_path / "pretty.json"
    pretty.write_text("\n".join(json.dumps({"id": i, "nested": {"x": i}}, indent=2) for i in range(3)) + '{"id": 3}{"id": 4}\n')
    assert "ingested 5 of 5 records" in cli(daemon, "ingest", "--table", "pretty", "--create", str(pretty))
    assert ids("pretty") == [0, 1, 2, 3, 4]

    table_csv = tmp_path / "people.csv"
    table_csv.write_text("id,name,score,active\n1,ana,2.5,true\n2,bo,,false\n")
    assert "ingested 2 of 2 records" in cli(daemon, "ingest", "--table", "people", "--create", str(table_csv))
    result, _, _ = query(client, {"table": "people", "columns": ["id", "name", "score", "active"]})
    rows = sorted(result.to_pylist(), key=lambda r: r["id"])
    assert rows == [{"id": 1, "name": "ana", "score": 2.5, "active": True}, {"id": 2, "name": "bo", "score": None, "active": False}]

    # A syntax error in a pretty file: file, line and column, and the line's text.
    broken = tmp_path / "broken.json"
    broken.write_text('{\n  "id": 1\n}\n{\n  "id": 2,\n  "name": "x" "y"\n}\n')
    failed = run_cli("ingest", "--table", "broken", "--create", str(broken), "--endpoint", daemon.location)
    assert failed.returncode != 0
    assert f"{broken}:6:" in failed.stderr and '"name": "x" "y"' in failed.stderr, failed.stderr
    assert "dropped table" in failed.stderr, failed.stderr
    # A record the table rejects, in NDJSON: the input's line, not "batch 0: record 1".
    action(client, "create_table", {"name": "strict", "on_invalid_json": "reject"})
    lines = tmp_path / "lines.ndjson"
    lines.write_text('{"id": 1}\n\n{"id": 2\n{"id": 3}\n')
    rejected = run_cli("ingest", "--table", "strict", str(lines), "--endpoint", daemon.location)
    assert rejected.returncode != 0 and f"{lines}:3: " in rejected.stderr, rejected.stderr
    tables = cli(daemon, "tables").split()
    assert "broken" not in tables and "strict" in tables, tables


def test_sql_runs_statements_and_catalog_commands(daemon, tmp_path):
    """The first hour: the CLI had no SQL. `shoal sql -c`, statements on standard input with
    backslash commands, every output format, a DELETE answering the rows it changed, and an
    error naming the statement."""
    client = daemon.client()
    action(client, "create_table", {"name": "users", "primary_key": "id"})
    path = tmp_path / "users.ndjson"
    path.write_text("".join(json.dumps({"id": i, "team": "ab"[i % 2], "score": i * 10}) + "\n" for i in range(6)))
    cli(daemon, "ingest", "--table", "users", str(path))

    out = cli(daemon, "sql", "-c", "SELECT team, count(*) AS n FROM users GROUP BY team ORDER BY team")
    assert "| team | n |" in out.replace("  ", " ") or ("team" in out and "| a" in out), out
    assert "(2 rows)" in out, out
    rows = [json.loads(line) for line in cli(daemon, "sql", "--format", "jsonl", "-c", "SELECT id FROM users WHERE score >= 30 ORDER BY id").splitlines()]
    assert rows == [{"id": 3}, {"id": 4}, {"id": 5}]
    assert cli(daemon, "sql", "--format", "csv", "-c", "SELECT id, team FROM users WHERE id = 1").splitlines() == ["id,team", "1,b"]
    deleted = json.loads(cli(daemon, "sql", "--format", "json", "-c", "DELETE FROM users WHERE team = 'a'"))
    assert deleted == [{"rows_affected": 3}]

    script = "\\dt\n\\d users\nSELECT count(*)\n  AS n FROM users;\nSELECT max(score) AS top FROM users;\n"
    out = cli(daemon, "sql", "--format", "jsonl", stdin=script)
    lines = out.splitlines()
    assert lines[0] == "users", out
    assert any(line.startswith("id ") and "Int64" in line for line in lines), out
    assert '{"n":3}' in lines and '{"top":50}' in lines, out

    failed = run_cli("sql", "-c", "SELECT nope( FROM users", "--endpoint", daemon.location)
    assert failed.returncode != 0 and "SELECT nope( FROM" in failed.stderr, failed.stderr
