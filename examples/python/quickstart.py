"""A complete shoal session from Python with pyarrow.flight: create a table, ingest JSON
records, register a PSF, plan a query and read its rows.

Install:  pip install -r examples/python/requirements.txt
Daemon:   cargo build --release -p shoal-server
          target/release/shoal serve --data-dir /tmp/shoal-demo    (listens on 127.0.0.1:50051)
Run:      python examples/python/quickstart.py [ENDPOINT]

ENDPOINT defaults to $SHOAL_ENDPOINT, else grpc://127.0.0.1:50051 (a daemon started without
--auth-token, --basic-auth or TLS). Run again, the script drops the table `quickstart` it made
the last time and starts over, so every run prints the same answers.
"""

import argparse
import json
import os
import time

import pyarrow as pa
import pyarrow.flight as flight

parser = argparse.ArgumentParser(description="A complete shoal session: table, ingest, PSF, query.")
parser.add_argument("endpoint", nargs="?", default=os.environ.get("SHOAL_ENDPOINT", "grpc://127.0.0.1:50051"),
                    help="the daemon's Flight address (default: $SHOAL_ENDPOINT, else %(default)s)")
client = flight.FlightClient(parser.parse_args().endpoint)


def action(name, body):
    """DoAction with a JSON body; returns the JSON answer."""
    [result] = client.do_action(flight.Action(name, json.dumps(body).encode()))
    return json.loads(result.body.to_pybytes())


# A fresh table on every run: drop the one an earlier run left (ListFlights lists the tables).
if "quickstart" in [p.decode() for info in client.list_flights() for p in info.descriptor.path]:
    print(action("drop_table", {"name": "quickstart"}))
print(action("create_table", {"name": "quickstart"}))


def put(records):
    """DoPut: one JSON record per row of a column named "json"; one PutResult per batch."""
    schema = pa.schema([("json", pa.string())])
    writer, reader = client.do_put(flight.FlightDescriptor.for_path("quickstart"), schema)
    writer.write_batch(pa.record_batch([pa.array([json.dumps(r) for r in records])], schema=schema))
    print("ack:", json.loads(reader.read().to_pybytes()))
    writer.close()


put([
    {"id": 1, "type": "PushEvent", "actor": {"login": "alice"}},
    {"id": 2, "type": "IssuesEvent", "actor": {"login": "bob"}, "payload": {"action": "opened"}},
    {"id": 3, "type": "PushEvent", "actor": {"login": "carol"}},
])

# A PSF: from its safe register address on, `type = ...` is answered from its chains; the
# records already there are indexed in the background (its backfill; "backfill": false would
# leave them to full scans, as FishStore's PSFs do). Wait for it, as `shoal psf add --wait` does.
psf = action("register_psf", {"table": "quickstart", "name": "by_type", "kind": "projection", "field": "type"})
print({"name": psf["name"], "safe_register_address": psf["safe_register_address"]})
while not action("list_psfs", {"table": "quickstart"})[0]["backfill"]["done"]:
    time.sleep(0.05)
put([{"id": 4, "type": "PushEvent", "actor": {"login": "dave"}}])

# Query: plan with GetFlightInfo (one index scan over the whole table: the backfill's runs
# below the safe register address, the PSF's chains above it), read every endpoint with DoGet.
command = {"table": "quickstart", "filter": "type = 'PushEvent'", "columns": ["id", "actor.login"]}
info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(command)))
print("plan:", json.dumps(json.loads(info.app_metadata)["plan"], indent=2))
table = pa.concat_tables([client.do_get(e.ticket).read_all() for e in info.endpoints])
print(table.to_pylist())
