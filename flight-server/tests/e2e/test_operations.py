"""Operations: the gRPC health service on the Flight port."""

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
import pyarrow.flight as flight

FLIGHT_SERVICE = "arrow.flight.protocol.FlightService"


def health(port: int, service: str):
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)


def test_grpc_health_answers_without_credentials_while_flight_requires_them(start_daemon):
    """grpc.health.v1 (Kubernetes' gRPC probes) on the Flight port: SERVING for the server and
    the Flight service, NOT_FOUND for a service it does not have; probes carry no token, so the
    health service is outside authentication, while Flight calls still need the token."""
    d = start_daemon("--auth-token", "s3cret")
    for service in ("", FLIGHT_SERVICE):
        assert health(d.port, service).status == health_pb2.HealthCheckResponse.SERVING, service
    with pytest.raises(grpc.RpcError) as error:
        health(d.port, "no.such.Service")
    assert error.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(flight.FlightUnauthenticatedError):
        list(d.client().list_flights())


def test_documented_metrics_are_exported(start_daemon):
    """docs/operations.md's metrics table lists exactly names the daemon exports: after a table is
    created, written to and queried, a scrape of --metrics-listen holds every documented name
    (the timings as summaries: `name{...,quantile=...}`, `name_sum`, `name_count`); and the
    Grafana dashboard parses and its expressions use only documented names."""
    import json
    import re
    import time
    import urllib.request

    from conftest import REPO, action, free_port, put, query

    doc = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
    section = doc.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    # The per-table series (all present after the calls below), then the daemon-wide ones,
    # present once the event they count happened (one is made to happen below).
    per_table, daemon_wide = section.split("\nDaemon-wide series", 1)

    def rows(text):
        found = {}
        for line in text.splitlines():
            row = re.match(r"\|\s*`(shoal_[a-z_]+)`\s*\|\s*([a-z]+)\s*\|", line)
            if row:
                found[row.group(1)] = row.group(2)
        return found

    documented = rows(per_table)
    events = rows(daemon_wide)
    assert set(events) >= {"shoal_stalled_streams_total", "shoal_cluster_refused_node_calls_total"}, events
    assert len(documented) >= 15, f"the metrics table was not found or is short: {sorted(documented)}"
    assert set(documented.values()) <= {"counter", "gauge", "summary", "histogram"}, documented

    metrics_port = free_port()
    d = start_daemon("--metrics-listen", f"127.0.0.1:{metrics_port}")
    client = d.client()
    action(client, "create_table", {"name": "ops"})
    put(client, "ops", ['{"a": %d, "kind": "k%d"}' % (i, i % 3) for i in range(200)])
    result, _, _ = query(client, {"table": "ops", "filter": "a >= 100", "columns": ["a"]})
    assert result is not None and result.num_rows == 100
    # A daemon-wide event: a call between nodes without the cluster's secret, refused.
    with pytest.raises(flight.FlightUnauthorizedError):
        action(client, "cluster_define", {"name": "x", "shards": 1, "shard_key": [], "nodes": 1, "options": {}})
    documented["shoal_cluster_refused_node_calls_total"] = "counter"

    def exported(text: str) -> set[str]:
        names = set()
        for line in text.splitlines():
            if line and not line.startswith("#"):
                names.add(re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0))
        return names

    def present(name: str, kind: str, names: set[str]) -> bool:
        if kind in ("summary", "histogram"):
            # A summary has `name` (quantiles), a histogram `name_bucket`; both `_sum` and `_count`.
            return {name + "_sum", name + "_count"} <= names and (name in names or name + "_bucket" in names)
        return name in names

    # Gauges are set once a second: poll a little.
    deadline = time.monotonic() + 15
    while True:
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
        names = exported(text)
        missing = sorted(n for n, kind in documented.items() if not present(n, kind, names))
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not missing, f"documented but not exported: {missing}\n{text}"
    assert 'shoal_ingested_records_total{table="ops"} 200' in text
    undocumented = sorted(n for n in names if n.startswith("shoal_") and n not in documented and n not in events
                          and re.sub(r"_(sum|count|bucket)$", "", n) not in documented)
    assert not undocumented, f"exported but not documented: {undocumented}"

    dashboard = json.loads((REPO / "docs" / "grafana" / "shoal-dashboard.json").read_text(encoding="utf-8"))
    assert dashboard["schemaVersion"] >= 36 and dashboard["panels"]
    assert any(i["name"] == "DS_PROMETHEUS" for i in dashboard["__inputs"])

    def expressions(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("expr", "definition") and isinstance(value, str):
                    yield value
                else:
                    yield from expressions(value)
        elif isinstance(node, list):
            for value in node:
                yield from expressions(value)

    used = {n for e in expressions(dashboard) for n in re.findall(r"shoal_[a-z_]+", e)}
    assert used, "the dashboard has no shoal expressions"
    unknown = sorted(n for n in used if n not in documented
                     and not (re.sub(r"_(sum|count|bucket)$", "", n) in documented
                              and documented[re.sub(r"_(sum|count|bucket)$", "", n)] in ("summary", "histogram")))
    assert not unknown, f"the dashboard uses names that are not documented: {unknown}"
