"""The remote store (`[storage] remote`, issue 47) against real stores: moto's S3 server
(from PyPI, started here; it honours `If-None-Match: *`, which the fencing needs, and is
checked for it below) through a TCP proxy that can refuse connections, and the local
filesystem backend (`file://`).

- SIGKILL a daemon with `durability = remote` mid-ingest, again and again, each next daemon
  on an EMPTY data directory: every acknowledged record is there exactly once, nothing never
  sent is, PSF answers equal full scans;
- fencing: the owner is paused (SIGSTOP), a second daemon claims the table and ingests, the
  first resumes and acknowledges nothing more;
- the store unavailable: batches are refused with a clear error after the grace, nothing
  acknowledged is lost, ingestion resumes with the store;
- a damaged object is named and never served;
- local durability policies upload behind the tail (`remote_lag_bytes`), a drop is kept;
- `shoal restore`: a clone at an address shares the source's objects, a table rolled back.
"""

import json
import os
import random
import signal
import socket
import subprocess
import threading
import time

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from conftest import Daemon, action, put, query_ids, shoal_binary
from test_crash import check_after_restart, ids_of, record, write_until_killed

BUCKET = "shoal-test"


class Proxy:
    """A TCP proxy in front of the S3 server that can refuse every connection (the store
    unavailable) and come back, and delay what it forwards (a slow store)."""

    def __init__(self, target_port: int):
        self.target = ("127.0.0.1", target_port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.blocked = threading.Event()
        self.delay = 0.0
        self.connections: list[socket.socket] = []
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.blocked.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            self.connections += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self.pipe, args=(a, b), daemon=True).start()

    def pipe(self, source: socket.socket, sink: socket.socket):
        try:
            while data := source.recv(1 << 16):
                if self.blocked.is_set():
                    break
                if self.delay:
                    time.sleep(self.delay)
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            try:
                s.close()
            except OSError:
                pass

    def block(self):
        self.blocked.set()
        for s in self.connections:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.connections.clear()

    def unblock(self):
        self.blocked.clear()


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server on a free port, a bucket in it, and a proxy in front."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    _, port = server.get_host_and_port()
    proxy = Proxy(port)
    endpoint = f"http://127.0.0.1:{proxy.port}"
    client = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
    )
    client.create_bucket(Bucket=BUCKET)
    env = {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ALLOW_HTTP": "true",
    }
    yield {"client": client, "env": env, "proxy": proxy}
    server.stop()


def test_the_s3_server_honours_conditional_creates(s3):
    """The fencing rests on `If-None-Match: *`: a second create of one key fails (412)."""
    from botocore.exceptions import ClientError

    s3["client"].put_object(Bucket=BUCKET, Key="probe/once", Body=b"1", IfNoneMatch="*")
    with pytest.raises(ClientError) as refused:
        s3["client"].put_object(Bucket=BUCKET, Key="probe/once", Body=b"2", IfNoneMatch="*")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert s3["client"].get_object(Bucket=BUCKET, Key="probe/once")["Body"].read() == b"1"


def wait_until_uploaded(daemon: Daemon, table: str):
    """Waits until `stats` says the store holds the whole log of `table` (`remote_lag_bytes`
    0; absent until the table is claimed)."""
    deadline = time.monotonic() + 20
    while (lag := action(daemon.client(), "stats", {"table": table}).get("remote_lag_bytes")) != 0:
        assert time.monotonic() < deadline, f"remote_lag_bytes stays at {lag}:\n" + "\n".join(daemon.log_lines[-20:])
        time.sleep(0.1)


COLUMNAR = {"enabled": True, "file_log_bytes": 1 << 17, "idle_ms": 20, "codec": "lz4"}
TABLES = {
    "plain": {},
    "keyed": {"primary_key": "id"},
    "columnar": {"columnar": COLUMNAR},
}


def remote_args(backend: str, s3, tmp_path) -> tuple[list[str], dict]:
    if backend == "s3":
        return ["--remote", f"s3://{BUCKET}/{tmp_path.name}"], s3["env"]
    return ["--remote", f"file://{tmp_path / 'bucket'}"], {}


@pytest.mark.parametrize("backend,kills", [("s3", int(os.environ.get("SHOAL_REMOTE_KILLS", "20"))), ("file", 4)])
def test_sigkill_with_remote_durability_and_an_empty_directory_each_time_keeps_every_acknowledged_record(s3, tmp_path, backend, kills):
    rng = random.Random(47)
    args, env = remote_args(backend, s3, tmp_path)
    daemon = Daemon(tmp_path / "data0", *args, "--durability", "remote", "--remote-commit-ms", "20", env=env)
    client = daemon.client()
    for name, options in TABLES.items():
        action(client, "create_table", {"name": name, "page_size_bits": 14, **options})
        action(client, "register_psf", {"table": name, "name": "by_type", "kind": "projection", "field": "type"})
    present = {t: 0 for t in TABLES}
    for kill in range(kills):
        sent, acknowledged = write_until_killed(daemon, TABLES, present, rng.uniform(0.2, 0.8))
        # The next daemon starts on an empty directory: everything comes from the store.
        daemon = Daemon(tmp_path / f"data{kill + 1}", *args, "--durability", "remote", "--remote-commit-ms", "20", env=env)
        client = daemon.client()
        present = check_after_restart(client, TABLES, sent, acknowledged, f"{backend}, kill {kill}")
        t = list(TABLES)[kill % len(TABLES)]
        if present[t]:
            indexed, plan = query_ids(client, t, "type = 'T1'")
            full, _ = query_ids(client, t, "type = 'T1' OR n < 0")
            assert indexed == full, f"kill {kill}, table {t}: PSF answer differs from a full scan ({plan})"
    assert all(present[t] > 0 for t in TABLES), f"a table never got an acknowledged record: {present}"
    # A clean stop uploads the checkpoint; a daemon on another empty directory reads it.
    assert daemon.stop() == 0
    daemon = Daemon(tmp_path / "final", *args, env=env)
    client = daemon.client()
    for t in TABLES:
        assert sorted(ids_of(client, t)) == list(range(present[t])), t
    wait_until_uploaded(daemon, "columnar")
    assert daemon.stop() == 0
    print(f"{backend}: {kills} kills, records at the end: {present}")


def test_a_paused_owner_is_fenced_by_the_next_claim_and_acknowledges_nothing_more(s3, tmp_path):
    args, env = remote_args("s3", s3, tmp_path)
    first = Daemon(tmp_path / "first", *args, "--durability", "remote", env=env)
    client = first.client()
    action(client, "create_table", {"name": "events", "page_size_bits": 14})
    put(client, "events", [record("events", i) for i in range(200)], batch=50)
    # Paused mid-life (a long GC pause, a partitioned node): another process takes over.
    first.process.send_signal(signal.SIGSTOP)
    try:
        second = Daemon(tmp_path / "second", *args, "--durability", "remote", env=env)
        client2 = second.client()
        assert sorted(ids_of(client2, "events")) == list(range(200))
        put(client2, "events", [record("events", i) for i in range(200, 300)], batch=50)
    finally:
        first.process.send_signal(signal.SIGCONT)
    # The first one's next batch is refused (FAILED_PRECONDITION): it may not acknowledge
    # anything more.
    with pytest.raises(pa.ArrowInvalid) as refused:
        for _ in range(20):
            put(client, "events", [record("events", i) for i in range(1000, 1010)], batch=10)
            time.sleep(0.1)
    assert "fenced by epoch 2" in str(refused.value), refused.value
    stats = action(client, "stats", {"table": "events"})
    put(client2, "events", [record("events", i) for i in range(300, 350)], batch=50)
    assert second.stop() == 0
    assert first.stop() == 0
    # The store holds the second's records and the first's acknowledged before the claim.
    third = Daemon(tmp_path / "third", *args, env=env)
    assert sorted(ids_of(third.client(), "events")) == list(range(350)), stats
    assert third.stop() == 0


def test_a_slow_or_unavailable_store_refuses_batches_clearly_and_loses_nothing(s3, tmp_path):
    args, env = remote_args("s3", s3, tmp_path)
    daemon = Daemon(tmp_path / "data", *args, "--durability", "remote", env=env)
    client = daemon.client()
    action(client, "create_table", {"name": "events", "page_size_bits": 14})
    # A slow store (100 ms on every read of either direction): batches wait for it, none fails.
    s3["proxy"].delay = 0.1
    try:
        started = time.monotonic()
        acks = put(client, "events", [record("events", i) for i in range(100)], batch=50)
        assert all(a["durable_address"] >= a["end_address"] for a in acks), acks
        assert time.monotonic() - started >= 0.2, "each acknowledgement waited for the store"
    finally:
        s3["proxy"].delay = 0.0
    s3["proxy"].block()
    try:
        started = time.monotonic()
        with pytest.raises(flight.FlightError) as refused:
            put(client, "events", [record("events", i) for i in range(100, 110)], batch=10)
        assert "remote store is unavailable" in str(refused.value), refused.value
        assert time.monotonic() - started < 30
        # Refused at once from now on (UNAVAILABLE: a client retries later).
        with pytest.raises(flight.FlightUnavailableError):
            put(client, "events", [record("events", i) for i in range(110, 120)], batch=10)
    finally:
        s3["proxy"].unblock()
    deadline = time.monotonic() + 30
    while True:
        try:
            put(client, "events", [record("events", i) for i in range(120, 130)], batch=10)
            break
        except flight.FlightError:
            assert time.monotonic() < deadline, "ingestion did not resume with the store"
            time.sleep(0.5)
    daemon.process.send_signal(signal.SIGKILL)
    daemon.process.wait(30)
    again = Daemon(tmp_path / "again", *args, env=env)
    got = set(ids_of(again.client(), "events"))
    assert set(range(100)) <= got and set(range(120, 130)) <= got, sorted(got)
    assert again.stop() == 0


def test_a_damaged_object_is_named_and_never_served(s3, tmp_path):
    args, env = remote_args("file", s3, tmp_path)
    daemon = Daemon(tmp_path / "data", *args, "--durability", "remote", env=env)
    client = daemon.client()
    action(client, "create_table", {"name": "events", "page_size_bits": 14})
    put(client, "events", [record("events", i) for i in range(500)], batch=100)
    assert daemon.stop() == 0
    runs = sorted((tmp_path / "bucket").rglob("pages-*"))
    assert runs, list((tmp_path / "bucket").rglob("*"))
    damaged = runs[0]
    data = bytearray(damaged.read_bytes())
    data[100] ^= 0x01
    damaged.write_bytes(bytes(data))
    with pytest.raises(RuntimeError) as refused:
        Daemon(tmp_path / "empty", *args, env=env)
    message = str(refused.value)
    assert "is damaged: checksum mismatch" in message and damaged.name in message, message


def test_local_durability_uploads_behind_the_tail_and_a_drop_is_kept(s3, tmp_path):
    args, env = remote_args("s3", s3, tmp_path)
    daemon = Daemon(tmp_path / "data", *args, "--durability", "group_commit", "--remote-sync-ms", "100", env=env)
    client = daemon.client()
    action(client, "create_table", {"name": "kept", "page_size_bits": 14})
    action(client, "create_table", {"name": "gone", "page_size_bits": 14})
    action(client, "register_psf", {"table": "kept", "name": "by_type", "kind": "projection", "field": "type"})
    put(client, "kept", [record("kept", i) for i in range(1000)], batch=100)
    put(client, "gone", [record("gone", i) for i in range(10)], batch=10)
    wait_until_uploaded(daemon, "kept")
    action(client, "drop_table", {"name": "gone"})
    time.sleep(0.5)
    daemon.process.send_signal(signal.SIGKILL)
    daemon.process.wait(30)
    again = Daemon(tmp_path / "again", *args, env=env)
    client = again.client()
    assert sorted(ids_of(client, "kept")) == list(range(1000))
    indexed, plan = query_ids(client, "kept", "type = 'T2'")
    assert len(indexed) == len([i for i in range(1000) if i % 3 == 2]) and "by_type" in json.dumps(plan), plan
    names = [f.descriptor.path[0].decode() for f in client.list_flights()]
    assert names == ["kept"], names
    assert again.stop() == 0


def test_restore_clones_a_table_at_an_address_sharing_its_objects_and_rolls_one_back(s3, tmp_path):
    args, env = remote_args("s3", s3, tmp_path)
    daemon = Daemon(tmp_path / "data", *args, "--durability", "remote", env=env)
    client = daemon.client()
    action(client, "create_table", {"name": "events", "page_size_bits": 14})
    action(client, "register_psf", {"table": "events", "name": "by_type", "kind": "projection", "field": "type"})
    acks = put(client, "events", [record("events", i) for i in range(700)], batch=100)
    cut = acks[3]["end_address"]  # after records 0..399
    put(client, "events", [record("events", i) for i in range(700, 800)], batch=100)
    assert daemon.stop() == 0

    def restore(*extra: str) -> dict:
        done = subprocess.run([str(shoal_binary()), "restore", *args, *extra], capture_output=True, text=True, env={**os.environ, **env})
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    clone = restore("events", "--as", "events_at", "--until-address", str(cut))
    assert clone["log_end"] == cut and clone["objects_written"] <= 2 and clone["objects_shared"] >= 3, clone
    whole = restore("events", "--as", "events_copy")
    assert whole["objects_written"] == 0, whole
    refused = subprocess.run([str(shoal_binary()), "restore", *args, "events", "--as", "events_copy"], capture_output=True, text=True, env={**os.environ, **env})
    assert refused.returncode != 0 and "holds a table \"events_copy\" already" in refused.stderr, refused.stderr

    def gc(*extra: str) -> dict:
        done = subprocess.run([str(shoal_binary()), "gc", *args, "--keep-secs", "0", *extra], capture_output=True, text=True, env={**os.environ, **env})
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def objects() -> int:
        return s3["client"].list_objects_v2(Bucket=BUCKET, Prefix=tmp_path.name).get("KeyCount", 0)

    # Garbage (superseded manifests, the open page's chunks the closed pages replaced) goes;
    # what any table's newest manifest names stays, the clones' shared objects too.
    before = objects()
    dry = gc("--dry-run")
    assert dry["manifests_deleted"] > 0 and dry["objects_deleted"] > 0 and objects() == before, dry
    collected = gc()
    assert collected["tables"] == 3 and collected["manifests_kept"] == 3, collected
    assert objects() == before - collected["manifests_deleted"] - collected["objects_deleted"], collected
    assert gc()["objects_deleted"] == 0
    again = Daemon(tmp_path / "empty", *args, env=env)
    client = again.client()
    assert sorted(ids_of(client, "events_at")) == list(range(400))
    assert sorted(ids_of(client, "events_copy")) == list(range(800))
    assert sorted(ids_of(client, "events")) == list(range(800))
    indexed, plan = query_ids(client, "events_at", "type = 'T1'")
    assert len(indexed) == len([i for i in range(400) if i % 3 == 1]) and "by_type" in json.dumps(plan), plan
    # The clone is a table of its own from now on: writes to it do not reach the source.
    put(client, "events_at", [record("events_at", i) for i in range(5)], batch=5)
    assert again.stop() == 0
    # A point in time in place: the table itself rolled back (its daemon stopped first).
    restore("events", "--until-address", str(cut))
    last = Daemon(tmp_path / "data", *args, env=env)  # the old directory: an older epoch, replaced
    client = last.client()
    assert sorted(ids_of(client, "events")) == list(range(400))
    assert len(ids_of(client, "events_at")) == 405
    assert last.stop() == 0
    # The pages the roll-back dropped are the whole copy's still: collected, it is whole.
    assert gc()["manifests_kept"] == 3
    final = Daemon(tmp_path / "empty-after-gc", *args, env=env)
    client = final.client()
    assert sorted(ids_of(client, "events_copy")) == list(range(800))
    assert sorted(ids_of(client, "events")) == list(range(400))
    assert len(ids_of(client, "events_at")) == 405
    assert final.stop() == 0


def test_a_cluster_node_replaced_on_an_empty_directory_serves_its_shards_again(s3, tmp_path):
    from test_cluster import Cluster, read_all

    args, env = remote_args("file", s3, tmp_path)
    cluster = Cluster(tmp_path, 3, *args, "--durability", "remote")
    try:
        client = cluster.client(0)
        action(client, "create_table", {"name": "events", "shard_key": "id"})
        records = [record("events", i) for i in range(3000)]
        put(client, "events", records, batch=250)
        # Node 2 and its volume are lost; its replacement (the same node id, an empty directory)
        # opens its shard and the sharded table's definition from the store.
        cluster.daemons[2].process.send_signal(signal.SIGKILL)
        cluster.daemons[2].process.wait(30)
        cluster.daemons[2] = Daemon(tmp_path / "node2-replacement", "--cluster-nodes", cluster.nodes, "--node-id", "2",
                                    "--cluster-secret", cluster.secret, *args, "--durability", "remote",
                                    listen=f"127.0.0.1:{cluster.ports[2]}", env=env)
        rows, _, _ = read_all(client, {"table": "events", "columns": ["id"]})
        assert sorted(rows.column("id").to_pylist()) == sorted(json.loads(r)["id"] for r in records)
        # And it takes writes for its shard again.
        put(cluster.client(2), "events", [record("events", i) for i in range(3000, 3100)], batch=100)
        rows, _, _ = read_all(cluster.client(1), {"table": "events", "columns": ["id"]})
        assert rows.num_rows == 3100
    finally:
        cluster.stop()


def test_a_shard_moves_to_another_node_under_load_and_stays_there(s3, tmp_path):
    """`move_shard` (and `shoal cluster move-shard`): a shard changes nodes through the store
    while a writer keeps writing through another node; batches refused during the hand-over
    (UNAVAILABLE) are retried; every record is there once; the placement outlives restarts and
    the old node does not open its old copy again."""
    from test_cluster import Cluster, read_all

    args, _ = remote_args("file", s3, tmp_path)
    cluster = Cluster(tmp_path, 3, *args, "--durability", "remote", "--remote-commit-ms", "20")
    try:
        client = cluster.client(0)
        # Keyed: a batch refused for one shard after the others took their part is retried
        # whole, and its keys are written again, not twice.
        action(client, "create_table", {"name": "events", "primary_key": "id", "shards": 3})
        stop, written, refusals = threading.Event(), [], []

        def writer():
            writer_client = cluster.client(0)
            n = 0
            while not stop.is_set():
                batch = [record("events", i) for i in range(n, n + 100)]
                while True:
                    try:
                        put(writer_client, "events", batch, batch=100)
                        break
                    except flight.FlightError as e:
                        refusals.append(str(e))
                        time.sleep(0.05)
                n += 100
                written.append(n)

        thread = threading.Thread(target=writer)
        thread.start()
        time.sleep(1.0)
        moved = action(client, "move_shard", {"table": "events", "shard": 1, "to": 2})
        time.sleep(0.5)
        stop.set()
        thread.join(60)
        assert moved["moved"] and moved["from"] == 1 and moved["to"] == 2, moved
        assert all("moving to node 2" in r or "is held by node" in r for r in refusals), refusals[:3]
        count = written[-1]
        assert count >= 500, f"the writer wrote {count} records"
        print(f"moved in {moved['elapsed_ms']} ms while {count} records were written; {len(refusals)} batches refused and retried")
        for node in range(3):
            shard_map = action(cluster.client(node), "cluster", {})["tables"][0]["shard_map"]
            assert [s["node"] for s in shard_map] == [0, 2, 2], (node, shard_map)
        assert not (tmp_path / "node1" / "tables" / "events.shard-1").exists(), "the old node keeps its copy"
        rows, _, _ = read_all(cluster.client(1), {"table": "events", "columns": ["id"]})
        assert sorted(rows.column("id").to_pylist()) == [f"events-{i:07d}" for i in range(count)]

        # Every node restarted on its own directory: the placement and every record stay.
        for node in range(3):
            cluster.daemons[node].stop()
        cluster.daemons = [cluster.start(node) for node in range(3)]
        rows, _, _ = read_all(cluster.client(2), {"table": "events", "columns": ["id"]})
        assert rows.num_rows == count
        assert not (tmp_path / "node1" / "tables" / "events.shard-1").exists()
        # A writer routing by key with the old shard map is told where the shard is now.
        with pytest.raises((flight.FlightError, pa.ArrowInvalid), match="is held by node 2"):
            put(cluster.client(1), "events.shard-1", [record("events", count)], batch=1)
        # Back to node 1 with the command line, then a write through node 1 lands there.
        out = subprocess.run([str(shoal_binary()), "cluster", "move-shard", "events", "1", "--to", "1", "--endpoint", cluster.daemons[0].location],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and "moved from node 2 to node 1" in out.stdout, out.stdout + out.stderr
        put(cluster.client(1), "events", [record("events", i) for i in range(count, count + 300)], batch=300)
        rows, _, _ = read_all(cluster.client(0), {"table": "events", "columns": ["id"]})
        assert sorted(rows.column("id").to_pylist()) == [f"events-{i:07d}" for i in range(count + 300)]
        assert action(cluster.client(1), "stats", {"table": "events.shard-1"})["records"] > 0
        assert not (tmp_path / "node2" / "tables" / "events.shard-1").exists()
    finally:
        cluster.stop()


def test_a_prepared_transaction_survives_a_shard_move_and_its_node_replaced_on_an_empty_directory(s3, tmp_path):
    """Durability `remote`: a transaction prepared before a shard moved commits after the move
    on the new node, replaced meanwhile on an empty directory (its staged records were in the
    store: `prepare_transaction` answers once they are; the definitions the replacement
    restored say where the shard is now)."""
    from test_cluster import Cluster, put_batch, read_all

    args, _ = remote_args("file", s3, tmp_path)
    cluster = Cluster(tmp_path, 3, *args, "--durability", "remote", "--remote-commit-ms", "20")
    try:
        client = cluster.client(0)
        action(client, "create_table", {"name": "t", "shards": 3, "shard_key": "k"})
        records = [json.dumps({"k": f"key-{i}", "v": i}) for i in range(600)]

        def send(metadata, rows):
            return put_batch(client, "t", rows, metadata)

        action(client, "begin_transaction", {"table": "t", "transaction": "tx1"})
        assert send({"transaction": "tx1"}, records[:300])["staged"] == 300
        assert action(client, "prepare_transaction", {"table": "t", "transaction": "tx1"})["records"] == 300
        action(client, "begin_transaction", {"table": "t", "transaction": "tx2"})
        assert send({"transaction": "tx2"}, records[300:600])["staged"] == 300
        moved = action(client, "move_shard", {"table": "t", "shard": 1, "to": 2})
        assert moved["moved"], moved
        # Node 2, which now holds shards 1 and 2, loses its disk right after.
        cluster.daemons[2].process.send_signal(signal.SIGKILL)
        cluster.daemons[2].process.wait(30)
        cluster.daemons[2] = Daemon(tmp_path / "node2-replacement", "--cluster-nodes", cluster.nodes, "--node-id", "2",
                                    "--cluster-secret", cluster.secret, *args, "--durability", "remote", "--remote-commit-ms", "20",
                                    listen=f"127.0.0.1:{cluster.ports[2]}")
        # The definitions node 2 restored say where shard 1 is (a node's definitions are in
        # the store before it answers for them); no call goes back and forth between nodes.
        committed = action(client, "commit_transaction", {"table": "t", "transaction": "tx1"}, options=flight.FlightCallOptions(timeout=60))
        assert committed["state"] == "committed", committed
        rows, _, _ = read_all(cluster.client(1), {"table": "t", "columns": ["v"]})
        assert sorted(rows.column("v").to_pylist()) == list(range(300))
        # tx2 was not prepared: its staged records may be gone with node 2's disk; a sink
        # finds out at its prepare (the count) and replays.
        listed = {t["transaction"]: t for t in action(client, "list_transactions", {"table": "t"})}
        assert listed["tx1"]["state"] == "committed", listed
    finally:
        cluster.stop()


def test_local_tables_move_into_a_new_store_and_a_name_in_both_is_refused(s3, tmp_path):
    args, env = remote_args("file", s3, tmp_path)
    # Tables made before the daemon had a store are uploaded when it gets one.
    local = Daemon(tmp_path / "local")
    action(local.client(), "create_table", {"name": "old", "page_size_bits": 14})
    put(local.client(), "old", [record("old", i) for i in range(300)], batch=100)
    assert local.stop() == 0
    moved = Daemon(tmp_path / "local", *args, env=env)
    wait_until_uploaded(moved, "old")
    assert moved.stop() == 0
    elsewhere = Daemon(tmp_path / "elsewhere", *args, env=env)
    assert sorted(ids_of(elsewhere.client(), "old")) == list(range(300))
    assert elsewhere.stop() == 0
    # A local-only table whose name the store holds too: neither replaces the other silently.
    other = Daemon(tmp_path / "other")
    action(other.client(), "create_table", {"name": "old", "page_size_bits": 14})
    assert other.stop() == 0
    with pytest.raises(RuntimeError) as refused:
        Daemon(tmp_path / "other", *args, env=env)
    assert 'table "old" is both in' in str(refused.value) and "move the local directory away" in str(refused.value), refused.value


def test_a_table_dropped_and_made_again_is_the_new_one_in_the_store(s3, tmp_path):
    args, env = remote_args("file", s3, tmp_path)
    daemon = Daemon(tmp_path / "data", *args, "--durability", "remote", env=env)
    client = daemon.client()
    action(client, "create_table", {"name": "t", "page_size_bits": 14})
    put(client, "t", [record("t", i) for i in range(100)], batch=50)
    action(client, "drop_table", {"name": "t"})
    action(client, "create_table", {"name": "t", "page_size_bits": 14})
    put(client, "t", [record("t", i) for i in range(1000, 1005)], batch=5)
    daemon.process.send_signal(signal.SIGKILL)
    daemon.process.wait(30)
    again = Daemon(tmp_path / "empty", *args, env=env)
    assert sorted(ids_of(again.client(), "t")) == list(range(1000, 1005))
    assert again.stop() == 0


def segment_disk_bytes(table_dir) -> int:
    """Bytes the table's segment files take on disk (holes take none)."""
    return sum(p.stat().st_blocks * 512 for p in table_dir.glob("segment-*.log"))


def local_bytes(table_dir) -> int:
    """Bytes the table's segment files and columnar files take on disk."""
    return segment_disk_bytes(table_dir) + sum(p.stat().st_size for p in (table_dir / "columnar").glob("*.parquet"))


def settles_within(table_dir, most: int, what: str):
    """Waits until the table's segment and columnar files take at most `most` bytes: pages not
    yet in the store, the open page and what a query fetches between two evictions (0.2 s
    apart) may go past the budget for a moment, never for long."""
    deadline = time.monotonic() + 10
    while (used := local_bytes(table_dir)) > most:
        assert time.monotonic() < deadline, f"{what}: the table takes {used} bytes here, at most {most} expected"
        time.sleep(0.1)


def sigkill_and_start_empty(daemon: Daemon, directory, options: list, env: dict) -> Daemon:
    """Another machine: `daemon` SIGKILLed, a daemon on the EMPTY `directory` with the same store."""
    daemon.process.send_signal(signal.SIGKILL)
    daemon.process.wait(30)
    return Daemon(directory, *options, env=env)


def test_a_table_four_times_the_local_cache_answers_exactly_and_stays_within_it(s3, tmp_path):
    """`local_cache_bytes`: pages the store holds are evicted beyond the budget and fetched
    again when read; a daemon on an empty directory restores no page run and fetches what
    recovery and queries read. The columnar tier is off so that every query reads the log."""
    args, env = remote_args("s3", s3, tmp_path)
    cache, page = 1 << 20, 1 << 14
    options = [*args, "--durability", "group_commit", "--remote-sync-ms", "100", "--local-cache-bytes", str(cache)]
    daemon = Daemon(tmp_path / "data", *options, env=env)
    client = daemon.client()
    # A small ring, so that reads go to the segment files (a ring holds pages of its own).
    action(client, "create_table", {"name": "big", "page_size_bits": 14, "memory_budget_bytes": 16 * page, "columnar": {"enabled": False}})
    action(client, "register_psf", {"table": "big", "name": "by_type", "kind": "projection", "field": "type"})
    count = 16_000  # ~4.3 MiB of log: more than 4x the cache
    put(client, "big", [record("big", i) for i in range(count)], batch=1000)
    wait_until_uploaded(daemon, "big")
    stats = action(client, "stats", {"table": "big"})
    assert stats["tail_address"] - stats["begin_address"] > 4 * cache, stats

    def settles_within_budget(directory, what: str):
        settles_within(directory, cache + 8 * page, what)

    def answers_exactly(client, what: str):
        assert ids_of(client, "big") == list(range(count)), what
        indexed, plan = query_ids(client, "big", "type = 'T1'")
        assert [int(i.rsplit("-", 1)[1]) for i in indexed] == [i for i in range(count) if i % 3 == 1], what
        assert "by_type" in json.dumps(plan), plan
        ranged, _ = query_ids(client, "big", "n >= 5000 AND n < 5100")
        assert len(ranged) == 100, what

    table_dir = tmp_path / "data" / "tables" / "big"
    settles_within_budget(table_dir, "after ingestion")
    answers_exactly(client, "the first daemon")
    settles_within_budget(table_dir, "after the queries")
    cached = action(client, "stats", {"table": "big"})["page_cache"]
    assert cached["evicted_pages"] > 0 and cached["fetched_pages"] > 0, cached

    # Another machine: an empty directory, the same store; no page run is restored.
    again = sigkill_and_start_empty(daemon, tmp_path / "again", options, env)
    client = again.client()
    table_dir = tmp_path / "again" / "tables" / "big"
    # Recovery replays the log from the store (no checkpoint before the SIGKILL): the pages
    # it fetched are evicted down to the budget, and the queries fetch them again.
    settles_within_budget(table_dir, "on the empty directory, after recovery")
    answers_exactly(client, "the daemon on an empty directory")
    settles_within_budget(table_dir, "on the empty directory, after the queries")
    assert action(client, "stats", {"table": "big"})["page_cache"]["fetched_pages"] > 0
    # It goes on taking writes, and they reach the store.
    put(client, "big", [record("big", i) for i in range(count, count + 500)], batch=500)
    count += 500
    wait_until_uploaded(again, "big")
    answers_exactly(client, "after more writes")
    assert again.stop() == 0


def test_a_page_damaged_on_the_local_disk_is_read_from_the_store_without_a_cache(s3, tmp_path):
    """Every table the store keeps has it as a page source, with or without
    `local_cache_bytes`: a bit flipped in a local segment file is replaced by the store's copy
    of the page (recovery, then reads), instead of cutting the log there."""
    args, env = remote_args("file", s3, tmp_path)
    options = [*args, "--durability", "group_commit", "--remote-sync-ms", "100"]
    daemon = Daemon(tmp_path / "data", *options, env=env)
    client = daemon.client()
    action(client, "create_table", {"name": "events", "page_size_bits": 14, "columnar": {"enabled": False}})
    put(client, "events", [record("events", i) for i in range(2000)], batch=500)
    wait_until_uploaded(daemon, "events")
    daemon.process.send_signal(signal.SIGKILL)
    daemon.process.wait(30)
    segment = sorted((tmp_path / "data" / "tables" / "events").glob("segment-*.log"))[0]
    assert segment.stat().st_size > 8 * (1 << 14), segment.stat()
    at = (1 << 14) + 500  # in page 1's records
    with open(segment, "r+b") as f:
        f.seek(at)
        original = f.read(1)
        f.seek(at)
        f.write(bytes([original[0] ^ 0x20]))
    again = Daemon(tmp_path / "data", *options, env=env)
    assert ids_of(again.client(), "events") == list(range(2000))
    assert any("replaced a damaged page" in line for line in again.log_lines), "\n".join(again.log_lines[-20:])
    with open(segment, "rb") as f:
        f.seek(at)
        assert f.read(1) == original, "the store's copy is written back"
    assert again.stop() == 0


def test_columnar_files_are_fetched_when_read_and_evicted_beyond_the_local_cache(s3, tmp_path):
    """`local_cache_bytes` bounds the columnar files with the log pages: files the store holds
    are deleted beyond the budget (after the pages) and fetched whole when a scan reads them;
    a daemon on an empty directory restores none of them and does not compact them again."""
    args, env = remote_args("s3", s3, tmp_path)
    cache, page = 1 << 20, 1 << 14
    options = [*args, "--durability", "group_commit", "--remote-sync-ms", "100", "--local-cache-bytes", str(cache)]
    daemon = Daemon(tmp_path / "data", *options, env=env)
    client = daemon.client()
    # No decoded columns kept in memory: every scan reads the files.
    columnar = {**COLUMNAR, "cache_bytes": 0}
    action(client, "create_table", {"name": "cols", "page_size_bits": 14, "memory_budget_bytes": 16 * page, "columnar": columnar})
    count = 16_000
    put(client, "cols", [record("cols", i) for i in range(count)], batch=1000)
    deadline = time.monotonic() + 60
    while (stats := action(client, "stats", {"table": "cols"}))["columnar"]["backlog_bytes"] > 0 or stats["columnar"]["files"] == 0:
        assert time.monotonic() < deadline, stats["columnar"]
        time.sleep(0.1)
    files = stats["columnar"]["files"]
    assert files >= 4 and stats["columnar"]["parquet_bytes"] > cache // 4, stats["columnar"]
    wait_until_uploaded(daemon, "cols")

    def settles_within_budget(directory, what: str):
        settles_within(directory, cache + 8 * page, what)

    def answers_exactly(client, what: str):
        ranged, plan = query_ids(client, "cols", "n >= 5000 AND n < 5100")
        assert [int(i.rsplit("-", 1)[1]) for i in ranged] == list(range(5000, 5100)), what
        assert "columnar" in json.dumps(plan), plan
        assert ids_of(client, "cols") == list(range(count)), what

    table_dir = tmp_path / "data" / "tables" / "cols"
    settles_within_budget(table_dir, "after ingestion")
    answers_exactly(client, "the first daemon")
    settles_within_budget(table_dir, "after the queries")
    cached = action(client, "stats", {"table": "cols"})["page_cache"]
    assert cached["evicted_files"] > 0 and cached["fetched_files"] > 0, cached

    # Another machine: no columnar file is restored; their footers are read at the open.
    again = sigkill_and_start_empty(daemon, tmp_path / "again", options, env)
    client = again.client()
    table_dir = tmp_path / "again" / "tables" / "cols"
    assert list((table_dir / "columnar").glob("*.parquet")) == []
    stats = action(client, "stats", {"table": "cols"})
    # The files are the table's, not compacted again (only the page recovery closed is new).
    assert stats["columnar"]["files"] >= files and stats["columnar"]["backlog_bytes"] <= page, stats["columnar"]
    assert stats["columnar"]["compacted_json_bytes"] <= page, stats["columnar"]
    answers_exactly(client, "the daemon on an empty directory")
    settles_within_budget(table_dir, "on the empty directory, after the queries")
    assert action(client, "stats", {"table": "cols"})["page_cache"]["fetched_files"] >= files
    assert again.stop() == 0


def test_a_table_made_by_flight_sql_bulk_ingest_is_in_the_store_when_the_ingest_answers(s3, tmp_path):
    """ADBC bulk ingest that creates (or replaces) its table goes on once the store holds
    the table, as `create_table` answers: a node lost right after still has it elsewhere."""
    import adbc_driver_flightsql.dbapi as flightsql

    args, env = remote_args("file", s3, tmp_path)
    # Uploads only when a change asks for one: the periodic upload would come too late.
    options = [*args, "--durability", "group_commit", "--remote-sync-ms", "600000"]
    daemon = Daemon(tmp_path / "data", *options, env=env)
    rows = pa.table({"id": [f"made-{i}" for i in range(10)]})
    with flightsql.connect(daemon.location) as conn, conn.cursor() as cur:
        assert cur.adbc_ingest("made", rows, mode="create") == 10
    daemon.process.send_signal(signal.SIGKILL)
    daemon.process.wait(30)
    again = Daemon(tmp_path / "again", *options, env=env)
    names = [f.descriptor.path[0].decode() for f in again.client().list_flights()]
    assert names == ["made"], names
    assert again.stop() == 0
