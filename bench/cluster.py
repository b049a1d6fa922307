"""The targets of a sharded table (bench/README.md, "A table sharded over three daemons"),
measured side by side in one run on this machine: one daemon holding a table against three
daemons (a cluster on loopback) holding it sharded by `id`.

* ingestion: DoPut of the same records — into the single daemon (one stream); into node 0 of
  the cluster, which splits each batch by the shard key and forwards two thirds of it (a plain
  Flight client's way in); and routed by key as the Flink sink and the Spark writer send it
  (each shard's records straight to its table at its node, one stream per shard, in parallel;
  the records' shards computed before the clock starts — in the JVM a streaming parse of the
  key on the writers' sender threads); records/s and the ratios;
* queries, each planned with GetFlightInfo and every endpoint read in parallel (at its location
  for the cluster): a point lookup on a PSF (`id = …`), a PSF subset (`type = 'ReleaseEvent'`),
  a full scan no PSF covers (`actor.login LIKE 'a%'`) and `count(*)`; median of `--reps`; the
  ratio cluster / single is the fan-out's cost (target ≤ 1.3);
* planning with many shards: GetFlightInfo's time for a table of 3, 30 and 100 shards on the
  same three nodes (what grows with the shard count).

This machine has 2 cores: the three nodes share them, so the cluster cannot be faster than one
daemon here; the ratios bound the fan-out's cost, not the speed-up of real machines.

    cargo build --release --locked -p shoal-server
    .venv/bin/python bench/cluster.py [--records 300000] [--reps 7] [--out bench/results/cluster-results.md]
"""

import argparse
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight

REPO = Path(__file__).resolve().parents[1]
READY = "shoal ready: listening on "
SCHEMA = pa.schema([("json", pa.string())])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    def __init__(self, binary: Path, data_dir: Path, port: int, *extra: str):
        self.process = subprocess.Popen(
            [str(binary), "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", str(data_dir), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        ready = threading.Event()

        def pump():
            for line in self.process.stdout:
                if line.startswith(READY):
                    ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(60):
            self.process.kill()
            raise RuntimeError("shoal did not start")
        self.location = f"grpc://127.0.0.1:{port}"

    def stop(self):
        self.process.terminate()
        self.process.wait(60)


def action(client, name, body):
    return json.loads(list(client.do_action(flight.Action(name, json.dumps(body).encode())))[0].body.to_pybytes())


def shard_of(record: str, shards: int) -> int:
    """The shard of a record sharded by `id` (a string): docs/deployment.md's routing hash."""
    h = 0xCBF29CE484222325
    for byte in json.loads(record)["id"].encode():
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h % shards


def load_routed(clients, table, parts):
    """DoPut of each shard's records into its table at its node (shard i on node i), the
    streams in parallel (as the connectors' writers send a batch's parts); the seconds it took."""
    started = time.perf_counter()
    with ThreadPoolExecutor(len(parts)) as pool:
        list(pool.map(lambda i: load(clients[i], f"{table}.shard-{i}", parts[i]), range(len(parts))))
    return time.perf_counter() - started


def load(client, table, records, batch=4096, window=4):
    """DoPut of `records`; up to `window` batches unacknowledged (as the Flink sink's writer
    keeps several batches in flight); the seconds it took."""
    writer, reader = client.do_put(flight.FlightDescriptor.for_path(table), SCHEMA)
    started = time.perf_counter()
    waiting = 0
    with writer:
        for i in range(0, len(records), batch):
            writer.write_batch(pa.record_batch([pa.array(records[i:i + batch], pa.string())], schema=SCHEMA))
            waiting += 1
            if waiting > window:
                reader.read()
                waiting -= 1
        writer.done_writing()
        for _ in range(waiting):
            reader.read()
    return time.perf_counter() - started


class Reader:
    """Plans on one client and reads every endpoint in parallel, at its location."""

    def __init__(self, location):
        self.client = flight.FlightClient(location)
        self.clients = {}
        self.pool = ThreadPoolExecutor(16)

    def at(self, endpoint):
        if not endpoint.locations:
            return self.client
        uri = endpoint.locations[0].uri.decode()
        if uri not in self.clients:
            self.clients[uri] = flight.FlightClient(uri)
        return self.clients[uri]

    def run(self, command):
        info = self.client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(command)))
        parts = list(self.pool.map(lambda e: self.at(e).do_get(e.ticket).read_all(), info.endpoints))
        return sum(p.num_rows for p in parts)

    def plan(self, command):
        started = time.perf_counter()
        self.client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(command)))
        return time.perf_counter() - started


def median_ms(work, reps):
    work()  # warm-up
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        work()
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--binary", default=str(REPO / "target" / "release" / "shoal"))
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "cluster-results.md"))
    args = parser.parse_args()
    binary = Path(args.binary)
    source = [line for line in (REPO / "data" / "github" / "events.ndjson").read_text().splitlines() if line.strip()]
    records = []
    for i in range(args.records):
        event = json.loads(source[i % len(source)])
        event["id"] = f"{event['id']}-{i // len(source)}"
        records.append(json.dumps(event))
    probe_id = json.loads(records[len(records) // 2])["id"]
    mb = sum(len(r) for r in records) / 1e6
    print(f"{len(records)} records, {mb:.0f} MB", file=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="shoal-cluster-bench-") as tmp:
        tmp = Path(tmp)
        common = ["--memory-budget-mb", "1024", "--columnar", "false", "--checkpoint-interval-secs", "0"]
        single = Daemon(binary, tmp / "single", free_port(), *common)
        ports = [free_port() for _ in range(3)]
        nodes = ",".join(f"grpc://127.0.0.1:{p}" for p in ports)
        secret = secrets.token_hex(32)  # the nodes' shared secret (cluster.secret)
        cluster = [Daemon(binary, tmp / f"node{i}", ports[i], *common, "--cluster-nodes", nodes, "--node-id", str(i), "--cluster-secret", secret) for i in range(3)]
        try:
            one, node0 = flight.FlightClient(single.location), flight.FlightClient(cluster[0].location)
            nodes_clients = [node0] + [flight.FlightClient(d.location) for d in cluster[1:]]
            action(one, "create_table", {"name": "events"})
            action(node0, "create_table", {"name": "events", "shard_key": "id"})
            action(node0, "create_table", {"name": "routed", "shard_key": "id"})
            for client in (one, node0):
                action(client, "register_psf", {"table": "events", "name": "by_type", "kind": "projection", "field": "type"})
                action(client, "register_psf", {"table": "events", "name": "by_id", "kind": "projection", "field": "id"})
            # Ingestion: alternate the three, twice, and keep each one's best.
            half = len(records) // 2
            ingest = {"single": [], "cluster": [], "routed": []}
            for part in (records[:half], records[half:]):
                by_shard = [[], [], []]
                for record in part:
                    by_shard[shard_of(record, 3)].append(record)
                ingest["single"].append(len(part) / load(one, "events", part))
                ingest["cluster"].append(len(part) / load(node0, "events", part))
                ingest["routed"].append(len(part) / load_routed(nodes_clients, "routed", by_shard))
            assert action(node0, "stats", {"table": "routed"})["records"] == len(records)
            rates = {k: max(v) for k, v in ingest.items()}
            stats = action(node0, "stats", {"table": "events"})
            spread = [s["records"] for s in stats["shards"]]

            readers = {"single": Reader(single.location), "cluster": Reader(cluster[0].location)}
            queries = {
                "point lookup (PSF on id)": {"table": "events", "columns": ["id", "type"], "filter": f"id = '{probe_id}'"},
                "PSF subset (type = 'ReleaseEvent')": {"table": "events", "columns": ["id", "actor.login"], "filter": "type = 'ReleaseEvent'"},
                "full scan (actor.login LIKE 'a%')": {"table": "events", "columns": ["id"], "filter": "actor.login LIKE 'a%'"},
                "count(*)": {"table": "events", "aggregates": [{"function": "count"}]},
            }
            rows = []
            for name, command in queries.items():
                counts = {k: r.run(command) for k, r in readers.items()}
                assert counts["single"] == counts["cluster"], (name, counts)
                ms = {k: median_ms(lambda r=r: r.run(command), args.reps) for k, r in readers.items()}
                rows.append((name, counts["single"], ms["single"], ms["cluster"]))
                print(f"{name}: {ms}", file=sys.stderr)

            planning = []
            small = records[:30_000]
            for shards in (3, 30, 100):
                table = f"plan{shards}"
                action(node0, "create_table", {"name": table, "shards": shards, "shard_key": "id", "memory_budget_bytes": 16 << 20})
                load(node0, table, small)
                command = {"table": table, "columns": ["id"], "filter": "type = 'ReleaseEvent'"}
                planning.append((shards, median_ms(lambda c=command: readers["cluster"].plan(c), args.reps),
                                 median_ms(lambda c=command: readers["cluster"].run(c), args.reps)))
                print(f"plan {shards} shards: {planning[-1]}", file=sys.stderr)
        finally:
            single.stop()
            for d in cluster:
                d.stop()

    out = [
        f"# Cluster benchmark ({time.strftime('%Y-%m-%d')})",
        "",
        f"`bench/cluster.py --records {args.records} --reps {args.reps}`: {len(records):,} GitHub events ({mb:.0f} MB, ids made unique), "
        f"one daemon against three on loopback sharing this machine's {os.cpu_count()} cores; the table sharded by `id` "
        f"(records per shard {spread}); PSFs `by_type`, `by_id`; columnar tier off on both (raw log scans).",
        "",
        "| ingestion (DoPut, one client, 4,096-record batches, 4 unacknowledged at most) | records/s |",
        "|---|---:|",
        f"| one daemon | {rates['single']:,.0f} |",
        f"| cluster, through node 0 (split + forwarded) | {rates['cluster']:,.0f} |",
        f"| cluster, routed by key (one stream per shard at its node, as the connectors send) | {rates['routed']:,.0f} |",
        f"| ratio through node 0 / single | **{rates['cluster'] / rates['single']:.2f}** |",
        f"| ratio routed / single (target ≥ 0.9) | **{rates['routed'] / rates['single']:.2f}** |",
        "",
        "| query (GetFlightInfo + every endpoint in parallel) | rows | one daemon ms | 3 shards ms | ratio (target ≤ 1.3) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, count, a, b in rows:
        out.append(f"| {name} | {count:,} | {a:.1f} | {b:.1f} | **{b / a:.2f}** |")
    out += [
        "",
        "| shards of a table on the 3 nodes (30,000 records) | GetFlightInfo ms | PSF subset, planned and read, ms |",
        "|---:|---:|---:|",
    ]
    for shards, plan_ms, run_ms in planning:
        out.append(f"| {shards} | {plan_ms:.1f} | {run_ms:.1f} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(out) + "\n")
    print("\n".join(out))


if __name__ == "__main__":
    main()
