"""SQL through Arrow Flight SQL with ADBC: no shoal-specific client code.

`adbc-driver-flightsql` (pip) speaks Flight SQL to the daemon's port: bulk ingest, queries whose
WHERE the planner maps onto PSFs, a prepared statement with a parameter, EXPLAIN and table
metadata. See docs/sql.md for what SQL is accepted (DELETE on a keyed table included: a keyed
table is made with the create_table action, as in keyed.py).

Install:  pip install -r examples/python/requirements.txt
Daemon:   cargo build --release -p shoal-server
          target/release/shoal serve --data-dir /tmp/shoal-demo    (listens on 127.0.0.1:50051)
Run:      python examples/python/flight_sql.py [ENDPOINT]

ENDPOINT defaults to $SHOAL_ENDPOINT, else grpc://127.0.0.1:50051 (a daemon started without
--auth-token, --basic-auth or TLS; docs/sql.md shows the driver's options for them). Run
again, the script's bulk ingest replaces the table `people_sql` (mode="replace"), so every run
prints the same answers.
"""

import argparse
import os
import warnings

import adbc_driver_flightsql.dbapi as flightsql
import pyarrow as pa

parser = argparse.ArgumentParser(description="SQL through Arrow Flight SQL with ADBC.")
parser.add_argument("endpoint", nargs="?", default=os.environ.get("SHOAL_ENDPOINT", "grpc://127.0.0.1:50051"),
                    help="the daemon's Flight address (default: $SHOAL_ENDPOINT, else %(default)s)")
location = parser.parse_args().endpoint
# (Flight SQL has no transactions: the DB-API wrapper warns that autocommit stays on.)
warnings.filterwarnings("ignore", message="Cannot disable autocommit")

with flightsql.connect(location) as conn:
    with conn.cursor() as cur:
        people = pa.table({"id": [1, 2, 3, 4], "city": ["Oslo", "Lima", "Oslo", "Pune"], "age": [34, 28, 45, 51]})
        print("ingested", cur.adbc_ingest("people_sql", people, mode="replace"), "rows")

    with conn.cursor() as cur:
        cur.execute("SELECT id, age FROM people_sql WHERE city = 'Oslo' ORDER BY id")
        print("Oslo:", cur.fetchall())
        cur.execute("SELECT city, count(*) AS n, avg(age) AS mean_age FROM people_sql GROUP BY city ORDER BY city")
        print("by city:", cur.fetchall())
        # A prepared statement: the parameter is bound into the filter.
        cur.execute("SELECT id FROM people_sql WHERE age > ? ORDER BY id", parameters=(40,))
        print("older than 40:", [row[0] for row in cur.fetchall()])
        cur.execute("EXPLAIN SELECT id FROM people_sql WHERE city = 'Lima'")
        print("plan steps:", [step for step, _ in cur.fetchall()])

    tables = conn.adbc_get_objects(depth="tables").read_all().to_pylist()
    names = sorted(t["table_name"] for c in tables for s in c["catalog_db_schemas"] for t in s["db_schema_tables"])
    print("tables:", names)
