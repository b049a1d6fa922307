"""Point lookups in one round trip: the query command as the DoGet ticket.

`GetFlightInfo` + `DoGet` is two calls; for a lookup that returns a few records, `DoGet` with a
ticket that *is* the query command (the same JSON as GetFlightInfo's) plans and answers in one.
`"output": "json"` returns each record's bytes exactly as they were put, in a `json` column.

Install:  pip install -r examples/python/requirements.txt
Daemon:   cargo build --release -p shoal-server
          target/release/shoal serve --data-dir /tmp/shoal-demo    (listens on 127.0.0.1:50051)
Run:      python examples/python/one_call.py [ENDPOINT]

ENDPOINT defaults to $SHOAL_ENDPOINT, else grpc://127.0.0.1:50051 (a daemon started without
--auth-token, --basic-auth or TLS). Run again, the script drops the table `lookups` it made the
last time and starts over, so every run prints the same answers.
"""

import argparse
import json
import os

import pyarrow as pa
import pyarrow.flight as flight

parser = argparse.ArgumentParser(description="Point lookups in one DoGet: the query command as the ticket.")
parser.add_argument("endpoint", nargs="?", default=os.environ.get("SHOAL_ENDPOINT", "grpc://127.0.0.1:50051"),
                    help="the daemon's Flight address (default: $SHOAL_ENDPOINT, else %(default)s)")
client = flight.FlightClient(parser.parse_args().endpoint)


def action(name, body):
    [result] = client.do_action(flight.Action(name, json.dumps(body).encode()))
    return json.loads(result.body.to_pybytes())


def one_call(command):
    """The whole answer of a query command, in one DoGet."""
    return client.do_get(flight.Ticket(json.dumps(command).encode())).read_all()


# A fresh table on every run: drop the one an earlier run left (ListFlights lists the tables).
if "lookups" in [p.decode() for info in client.list_flights() for p in info.descriptor.path]:
    print(action("drop_table", {"name": "lookups"}))
action("create_table", {"name": "lookups"})
action("register_psf", {"table": "lookups", "name": "login", "kind": "projection", "field": "actor.login"})

schema = pa.schema([("json", pa.string())])
lines = [json.dumps({"id": i, "actor": {"login": f"user{i % 50}"}, "note": "caf\u00e9"}) for i in range(1000)]
writer, reader = client.do_put(flight.FlightDescriptor.for_path("lookups"), schema)
writer.write_batch(pa.record_batch([pa.array(lines)], schema=schema))
reader.read()
writer.close()

# Whole records of one actor, as ingested (NDJSON-ready), from the PSF's chain.
records = one_call({"table": "lookups", "filter": "actor.login = 'user7'", "output": "json", "limit": 5})
for record in records.column("json").to_pylist():
    print(record)

# Typed columns and aggregates work the same way; aggregates come back as one row.
print(one_call({"table": "lookups", "filter": "actor.login = 'user7'", "columns": ["id"]}).num_rows, "rows")
print(one_call({"table": "lookups", "aggregates": [{"function": "count"}, {"function": "max", "column": "id"}]}).to_pylist())
