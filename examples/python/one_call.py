"""Point lookups in one round trip: the query command as the DoGet ticket.

`GetFlightInfo` + `DoGet` is two calls; for a lookup that returns a few records, `DoGet` with a
ticket that *is* the query command (the same JSON as GetFlightInfo's) plans and answers in one.
`"output": "json"` returns each record's bytes exactly as they were put, in a `json` column.

Start a daemon first:   target/release/shoal serve --data-dir /tmp/shoal-demo
Then run:               python examples/python/one_call.py [grpc://127.0.0.1:50051]
"""

import json
import sys

import pyarrow as pa
import pyarrow.flight as flight

location = sys.argv[1] if len(sys.argv) > 1 else "grpc://127.0.0.1:50051"
client = flight.FlightClient(location)


def action(name, body):
    [result] = client.do_action(flight.Action(name, json.dumps(body).encode()))
    return json.loads(result.body.to_pybytes())


def one_call(command):
    """The whole answer of a query command, in one DoGet."""
    return client.do_get(flight.Ticket(json.dumps(command).encode())).read_all()


action("create_table", {"name": "lookups", "if_not_exists": True})
action("register_psf", {"table": "lookups", "name": "login", "kind": "projection", "field": "actor.login"}) \
    if not any(p["name"] == "login" for p in action("list_psfs", {"table": "lookups"})) else None

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
