"""A keyed table: upserts, partial updates (JSON merge patch) and deletes by primary key.

A table created with a `primary_key` keeps one live version per key: a DoPut batch may carry an
`op` column next to `json` (`upsert`, the default; `delete`; `merge`, RFC 7386), every query sees
each key's latest version, `to_address` queries the table as it was at a log address, and the
`compact` action drops the versions that updates and deletes left behind.

Install:  pip install -r examples/python/requirements.txt
Daemon:   cargo build --release -p shoal-server
          target/release/shoal serve --data-dir /tmp/shoal-demo    (listens on 127.0.0.1:50051)
Run:      python examples/python/keyed.py [ENDPOINT]

ENDPOINT defaults to $SHOAL_ENDPOINT, else grpc://127.0.0.1:50051 (a daemon started without
--auth-token, --basic-auth or TLS). Run again, the script drops the table `tickets` it made the
last time and starts over, so every run prints the same answers.
"""

import argparse
import json
import os

import pyarrow as pa
import pyarrow.flight as flight

parser = argparse.ArgumentParser(description="A keyed table: upserts, merge patches, deletes, time travel, compaction.")
parser.add_argument("endpoint", nargs="?", default=os.environ.get("SHOAL_ENDPOINT", "grpc://127.0.0.1:50051"),
                    help="the daemon's Flight address (default: $SHOAL_ENDPOINT, else %(default)s)")
client = flight.FlightClient(parser.parse_args().endpoint)


def action(name, body):
    [result] = client.do_action(flight.Action(name, json.dumps(body).encode()))
    return json.loads(result.body.to_pybytes())


def put(table, ops):
    """DoPut of (op, document) pairs; returns the PutResult of the batch."""
    schema = pa.schema([("json", pa.string()), ("op", pa.string())])
    writer, reader = client.do_put(flight.FlightDescriptor.for_path(table), schema)
    writer.write_batch(pa.record_batch([pa.array([json.dumps(d) for _, d in ops]), pa.array([op for op, _ in ops])], schema=schema))
    ack = json.loads(reader.read().to_pybytes())
    writer.close()
    return ack


def rows(table, **command):
    """Every row of a query, as {id: document}, in one DoGet."""
    ticket = flight.Ticket(json.dumps({"table": table, "output": "json", **command}).encode())
    return {d["id"]: d for d in map(json.loads, client.do_get(ticket).read_all().column("json").to_pylist())}


# A fresh table on every run: drop the one an earlier run left (ListFlights lists the tables).
if "tickets" in [p.decode() for info in client.list_flights() for p in info.descriptor.path]:
    print(action("drop_table", {"name": "tickets"}))
action("create_table", {"name": "tickets", "primary_key": "id"})

put("tickets", [("upsert", {"id": i, "status": "open", "owner": {"name": f"u{i}"}}) for i in range(5)])
before = action("stats", {"table": "tickets"})["complete_until"]
# Close ticket 1 and drop its owner (a merge patch: null removes a field), delete ticket 3,
# replace ticket 4 entirely (an upsert).
put("tickets", [("merge", {"id": 1, "status": "closed", "owner": None}), ("delete", {"id": 3}), ("upsert", {"id": 4, "status": "new"})])

for key, document in sorted(rows("tickets").items()):
    print(key, document)
print("open:", sorted(rows("tickets", filter="status = 'open'")))
print("as of address", before, "->", sorted(rows("tickets", to_address=before)))

action("checkpoint", {"table": "tickets"})
report = action("compact", {"table": "tickets"})
print("compacted: versions copied", report["versions_copied"], "- live rows", action("stats", {"table": "tickets"})["keys"]["live"])
