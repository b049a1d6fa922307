"""The `shoal` CLI's client commands and the metrics endpoint, against a real daemon."""

import json
import subprocess
import urllib.request

from conftest import free_port, github_events, shoal_binary


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
    registered = json.loads(cli(daemon, "psf", "add", "--table", "events", "--name", "opened",
                                "--predicate", "type = 'IssuesEvent' AND payload.action = 'opened'"))
    assert registered["safe_register_address"] > 0
    cli(daemon, "ingest", "--table", "events", "-", stdin="\n".join(events[:100]) + "\n")
    listed = json.loads(cli(daemon, "psf", "list", "--table", "events"))
    assert [p["name"] for p in listed] == ["opened"]
    out = cli(daemon, "query", "--table", "events", "--filter", "type = 'IssuesEvent' AND payload.action = 'opened'",
              "--columns", "id,actor.login", "--show", "3")
    expected = sum(
        1 for e in events + events[:100]
        if (r := json.loads(e))["type"] == "IssuesEvent" and r["payload"].get("action") == "opened"
    )
    assert f"\n{expected} rows in" in "\n" + out
    assert '"index_scans"' in out and '"opened"' in out
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
