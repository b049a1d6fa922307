"""A complete shoal session from Python with pyarrow.flight.

Start a daemon first:   target/release/shoal serve --data-dir /tmp/shoal-demo
Then run:               python examples/python/quickstart.py [grpc://127.0.0.1:50051]
"""

import json
import sys

import pyarrow as pa
import pyarrow.flight as flight

location = sys.argv[1] if len(sys.argv) > 1 else "grpc://127.0.0.1:50051"
client = flight.FlightClient(location)


def action(name, body):
    """DoAction with a JSON body; returns the JSON answer."""
    [result] = client.do_action(flight.Action(name, json.dumps(body).encode()))
    return json.loads(result.body.to_pybytes())


print(action("create_table", {"name": "quickstart", "if_not_exists": True}))

# Ingest: one JSON record per row of a column named "json"; one PutResult per batch.
schema = pa.schema([("json", pa.string())])
records = [
    {"id": 1, "type": "PushEvent", "actor": {"login": "alice"}},
    {"id": 2, "type": "IssuesEvent", "actor": {"login": "bob"}, "payload": {"action": "opened"}},
    {"id": 3, "type": "PushEvent", "actor": {"login": "carol"}},
]
writer, reader = client.do_put(flight.FlightDescriptor.for_path("quickstart"), schema)
writer.write_batch(pa.record_batch([pa.array([json.dumps(r) for r in records])], schema=schema))
print("ack:", json.loads(reader.read().to_pybytes()))
writer.close()

# A PSF: from its safe register address on, `type = ...` is answered from its chains.
print(action("register_psf", {"table": "quickstart", "name": "by_type", "kind": "projection", "field": "type"}))

# Query: plan with GetFlightInfo, read every endpoint with DoGet.
command = {"table": "quickstart", "filter": "type = 'PushEvent'", "columns": ["id", "actor.login"]}
info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(command)))
print("plan:", json.dumps(json.loads(info.app_metadata)["plan"], indent=2))
table = pa.concat_tables([client.do_get(e.ticket).read_all() for e in info.endpoints])
print(table.to_pylist())
