"""pyarrow client check of the end-to-end test (FlinkShoalSparkEndToEndTest).

Reads the table the Flink job wrote with a plain pyarrow.flight client, independently of the
JVM connectors, and checks it against the NDJSON file:

  - ListFlights shows the table with one record per event of the file;
  - the PSFs registered mid-stream are listed (list_psfs) with their safe register addresses;
  - GetFlightInfo for the opened-issues predicate plans an index scan on that PSF, and DoGet on
    every endpoint returns exactly the ids json.loads + the predicate finds in the file.

Usage: python check_table.py grpc://HOST:PORT TABLE NDJSON_FILE
Prints one line per check; exits non-zero (AssertionError) on the first that fails.
"""
import json
import sys

import pyarrow.flight as flight


def action(client, name, body):
    results = list(client.do_action(flight.Action(name, json.dumps(body).encode())))
    return json.loads(results[0].body.to_pybytes())


def main(endpoint, table, path):
    with open(path, encoding="utf-8") as f:
        events = [json.loads(line) for line in f if line.strip()]
    client = flight.FlightClient(endpoint)

    flights = {fi.descriptor.path[0].decode(): fi for fi in client.list_flights()}
    assert table in flights, f"ListFlights has no table {table!r}: {sorted(flights)}"
    assert flights[table].total_records == len(events), (flights[table].total_records, len(events))
    print(f"pyarrow: ListFlights: {table} has {flights[table].total_records} records = the file's {len(events)} events")

    psfs = {p["name"]: p for p in action(client, "list_psfs", {"table": table})}
    expected_psfs = {"id", "actor_id", "repo_id", "type", "issues_opened", "cpp_pull_requests"}
    assert expected_psfs <= set(psfs), sorted(psfs)
    print("pyarrow: list_psfs: " + ", ".join(f"{n} from {psfs[n]['safe_register_address']}" for n in sorted(expected_psfs)))

    predicate = "type = 'IssuesEvent' AND payload.action = 'opened'"
    command = {"table": table, "filter": predicate, "columns": ["id"]}
    info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(command).encode()))
    plan = json.loads(info.app_metadata)["plan"]
    index_psfs = [p for scan in plan["index_scans"] for p in scan["psfs"]]
    assert "issues_opened" in index_psfs, plan
    ids = []
    for endpoint_info in info.endpoints:
        ids.extend(client.do_get(endpoint_info.ticket).read_all().column("id").to_pylist())
    expected = sorted(e["id"] for e in events
                      if e.get("type") == "IssuesEvent" and (e.get("payload") or {}).get("action") == "opened")
    assert sorted(ids) == expected, (len(ids), len(expected))
    print(f"pyarrow: {predicate}: {len(ids)} ids = json.loads over the file; plan: {plan['reason']}")


if __name__ == "__main__":
    main(*sys.argv[1:])
