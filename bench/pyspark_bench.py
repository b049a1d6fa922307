"""The Spark targets' queries (bench/README.md, "Spark and PySpark") from PySpark, the analysts'
client: the point lookup through the `actor_id` projection PSF returning whole events (Q3, 641
columns) and two columns (Q3n), and the 1.8 %-selective registered predicate (Q2), over shoal
through the daemon, over `spark.read.json` of the same NDJSON with schema inference and with the
schema given, and over that DataFrame `cache()`d (Spark's own floor), timed the two ways PySpark
users fetch a result: `spark.sql(q).collect()` (Python `Row`s, pickled from the JVM) and
`.toPandas()` (Arrow).

    scripts/spark-venv.sh                                      # .venv-spark: PySpark 3.5, pyarrow, pandas, pytest
    mvn -B -ntp -pl spark-connector -am package -DskipTests    # the shaded connector jar
    cargo build --release --locked -p shoal-server
    .venv-spark/bin/python bench/pyspark_bench.py [--target-mb 1000] [--reps 3]

Data: data/github/events.ndjson repeated to --target-mb (ids unique per copy, as
bench/flight_bench.py), written to one NDJSON file for Spark and sent to the daemon through
DoPut after FishStore's six GitHub PSFs are registered. Every query runs once untimed on every
system, then --reps rounds in which each system runs it once (systems interleaved); medians and
min-max in ms, the ratios, and the targets (>= 20x the JSON reader for the point lookups,
>= 5x for Q2, within 1.5x of the cached DataFrame). Each system's row count and sorted ids must
equal the cached DataFrame's, or the script fails. bench/spark_bench.sh measures the same
queries from the JVM (collectAsList and the spark-sql shell's path).
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("SHOAL_BIN", str(REPO / "target/release/shoal"))
from flight_bench import replicated, timed_doput  # noqa: E402
from conftest import Daemon  # noqa: E402  (flight_bench put its folder on sys.path)

SYSTEMS = ["shoal daemon", "JSON inferred", "JSON given", "cached"]
FETCHES = {"collect()": lambda df: df.collect(), "toPandas()": lambda df: df.toPandas()}


def ids(result):
    """The sorted ids of a collect() or toPandas() result."""
    return sorted(result["id"].tolist()) if hasattr(result, "columns") else sorted(r["id"] for r in result)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target-mb", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--jar", type=Path, default=None, help="the shaded connector jar (default: spark-connector/target/*-shaded.jar)")
    args = parser.parse_args()
    jar = args.jar or next(iter(sorted((REPO / "spark-connector/target").glob("shoal-spark-connector-*-shaded.jar"))), None)
    if jar is None or not jar.exists():
        sys.exit("error: no shaded connector jar: run `mvn -B -ntp -pl spark-connector -am package -DskipTests` (or pass --jar)")
    if not Path(os.environ["SHOAL_BIN"]).exists():
        sys.exit(f"error: {os.environ['SHOAL_BIN']} is missing: run `cargo build --release --locked -p shoal-server`")
    from pyspark.sql import SparkSession  # noqa: E402  (after the checks: its import is slow)

    lines = [l for l in (REPO / "data/github/events.ndjson").read_text(encoding="utf-8").splitlines() if l.strip()]
    records, size = replicated(lines, args.target_mb * 10**6)
    actor = json.loads(lines[100])["actor"]["id"]
    queries = [
        ("Q3 actor.id point lookup, all columns", f"SELECT * FROM {{t}} WHERE actor.id = {actor}", 20),
        ("Q3n actor.id point lookup, id, type", f"SELECT id, type FROM {{t}} WHERE actor.id = {actor}", 20),
        ("Q2 opened issues (~2%): id, actor.login",
         "SELECT id, actor.login FROM {t} WHERE type = 'IssuesEvent' AND payload.action = 'opened'", 5),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        ndjson = Path(tmp) / "events.ndjson"
        ndjson.write_text("\n".join(records) + "\n", encoding="utf-8")
        budget = max(256, 2 * size // 2**20)
        daemon = Daemon(Path(tmp) / "data", "--memory-budget-mb", str(budget))
        try:
            schema = pa.schema([("json", pa.string())])
            batches = [pa.record_batch([pa.array(records[i:i + 4096], pa.string())], schema=schema)
                       for i in range(0, len(records), 4096)]
            (put,) = timed_doput(daemon.client(), schema, batches, len(records), 1)  # table events0
            del batches
            spark = (
                SparkSession.builder.master("local[2]").appName("shoal-pyspark-bench")
                .config("spark.driver.memory", "8g")
                .config("spark.jars", str(jar))
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.sql.shuffle.partitions", "2")
                .config("spark.sql.adaptive.enabled", "false")
                .config("spark.driver.host", "127.0.0.1")
                .config("spark.sql.execution.arrow.pyspark.enabled", "true")
                .config("spark.sql.catalog.shoal", "dev.shoal.spark.ShoalCatalog")
                .config("spark.sql.catalog.shoal.endpoint", daemon.location)
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("WARN")
            inferred = spark.read.json(str(ndjson)).schema
            spark.read.schema(inferred).json(str(ndjson)).createOrReplaceTempView("json_given")
            # An option at its default value makes the cached relation another one than
            # json_given's, so that Spark's CacheManager does not answer the JSON reads from it.
            cached = spark.read.schema(inferred).option("mode", "PERMISSIVE").json(str(ndjson)).cache()
            cached.count()
            cached.createOrReplaceTempView("json_cached")

            def view(system):
                if system == "JSON inferred":  # inference in every run, as spark.read.json(path) does
                    spark.read.json(str(ndjson)).createOrReplaceTempView("json_inferred")
                    return "json_inferred"
                return {"shoal daemon": "shoal.events0", "JSON given": "json_given", "cached": "json_cached"}[system]

            print(f"records {len(records)} ({size / 1e6:.0f} MB); Spark {spark.version} local[2] (PySpark); "
                  f"{args.reps} runs after one warm-up, systems interleaved; DoPut {size / 1e6 / put:.0f} MB/s; jar {jar.name}")
            print(f"\n{'query':42} {'fetch':11} {'system':14} {'median ms':>10} {'min-max ms':>14} {'rows':>6}")
            medians = {}
            for name, sql, _ in queries:
                for fetch_name, fetch in FETCHES.items():
                    times = {s: [] for s in SYSTEMS}
                    answers = {}
                    for r in range(-1, args.reps):
                        for system in SYSTEMS:
                            start = time.perf_counter()
                            result = fetch(spark.sql(sql.format(t=view(system))))
                            elapsed = time.perf_counter() - start
                            if r < 0:
                                answers[system] = ids(result)
                            else:
                                times[system].append(elapsed * 1e3)
                    for system in SYSTEMS:
                        if answers[system] != answers["cached"]:
                            sys.exit(f"{name} {fetch_name} on {system}: {len(answers[system])} rows, not the cached DataFrame's "
                                     f"{len(answers['cached'])} (or other ids)")
                    medians[(name, fetch_name)] = {s: statistics.median(t) for s, t in times.items()}
                    for i, system in enumerate(SYSTEMS):
                        t = times[system]
                        print(f"{name if i == 0 else '':42} {fetch_name if i == 0 else '':11} {system:14} {statistics.median(t):10.0f} "
                              f"{f'{min(t):.0f}-{max(t):.0f}':>14} {len(answers[system]):6}")
            print(f"\ntargets (~1 GB, local[2]); this run: {size / 1e6:.0f} MB")
            for name, _, faster in queries:
                for fetch_name in FETCHES:
                    m = medians[(name, fetch_name)]
                    shoal = m["shoal daemon"]
                    verdicts = [(f">= {faster}x JSON inferred", m["JSON inferred"] / shoal, m["JSON inferred"] / shoal >= faster),
                                (f">= {faster}x JSON given", m["JSON given"] / shoal, m["JSON given"] / shoal >= faster),
                                ("within 1.5x of cached", shoal / m["cached"], shoal / m["cached"] <= 1.5)]
                    print(f"{name:42} {fetch_name:11} " + "  ".join(
                        f"{label}: {ratio:5.1f}x {'met' if met else 'MISSED'}" for label, ratio, met in verdicts))
            spark.stop()
        finally:
            daemon.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
