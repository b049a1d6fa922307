"""Reads a shoal table through the shaded connector jar with a real spark-submit.

    spark-submit --jars shoal-spark-connector-VERSION-shaded.jar read_events.py \
        ENDPOINT TABLE EVENTS_NDJSON PSF_NAME

Run by scripts/spark-submit-test.sh, which starts the daemon, ingests EVENTS_NDJSON into
TABLE (half before and half after registering the predicated subset function PSF_NAME on
`type`) and passes the same file here as the oracle. The script checks that

- the filter `type = 'ReleaseEvent'` (0.2 % of the events) is pushed down: the EXPLAIN of
  the query names the ShoalScan, the pushed filter and an index scan over PSF_NAME (a
  denser type may be read from the columnar tier's files instead, once they cover the log:
  from 1 % of the records, `COLUMNAR_INDEX_SHARE`);
- the rows the connector returns equal what Spark's own JSON reader returns on the same
  NDJSON, for that query and for a few others (nested columns, a range, a count);

prints the results, and exits non-zero on any difference.
"""

import sys
import time

from pyspark.sql import SparkSession


def rows(df):
    return sorted(tuple(r) for r in df.collect())


def main():
    endpoint, table, events_path, psf_name = sys.argv[1:5]
    spark = (
        SparkSession.builder.appName("shoal-spark-submit-test")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.catalog.shoal", "dev.shoal.spark.ShoalCatalog")
        .config("spark.sql.catalog.shoal.endpoint", endpoint)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    print(f"Spark {spark.version}, endpoint {endpoint}, table {table}")

    shoal = spark.read.format("shoal").option("endpoint", endpoint).option("table", table).load()
    oracle = spark.read.json(events_path)
    shoal.createOrReplaceTempView("shoal_events")
    oracle.createOrReplaceTempView("json_events")

    failures = []

    # 1. The pushed-down filter, visible in EXPLAIN: a selective one stays on the PSF's chain.
    rare = "SELECT id, actor.login FROM {} WHERE type = 'ReleaseEvent'"
    plan = spark.sql("EXPLAIN " + rare.format("shoal_events")).collect()[0][0]
    print("EXPLAIN:\n" + plan)
    for needle in ("ShoalScan", "filter=[\"type\" = 'ReleaseEvent']", "index scans [PSFs", psf_name):
        if needle not in plan:
            failures.append(f"EXPLAIN does not contain {needle!r}")

    # 2. Same rows as Spark's JSON reader.
    query = "SELECT id, actor.login, payload.action FROM {} WHERE type = 'IssuesEvent'"
    queries = {
        "releases (PSF on type)": rare,
        "issues (PSF on type)": query,
        "opened issues, nested filter": "SELECT id, repo.name FROM {} "
        "WHERE type = 'IssuesEvent' AND payload.action = 'opened'",
        "push sizes > 20": "SELECT id, payload.size FROM {} WHERE payload.size > 20",
        "count per type": "SELECT type, count(*) FROM {} GROUP BY type",
        "count(*)": "SELECT count(*) FROM {}",
    }
    for name, sql in queries.items():
        start = time.monotonic()
        got = rows(spark.sql(sql.format("shoal_events")))
        took = (time.monotonic() - start) * 1000
        want = rows(spark.sql(sql.format("json_events")))
        status = "ok" if got == want else "DIFFERENT"
        print(f"{status:9} {name}: {len(got)} rows via shoal in {took:.0f} ms (json reader: {len(want)} rows)")
        if got != want:
            failures.append(f"{name}: shoal {len(got)} rows, json reader {len(want)} rows")

    # 3. Show a few results, as a user would see them.
    spark.sql("SELECT type, count(*) AS n FROM shoal.{} GROUP BY type ORDER BY n DESC".format(table)).show(5)
    shoal.where("type = 'IssuesEvent' AND payload.action = 'opened'").select(
        "id", "actor.login", "repo.name"
    ).orderBy("id").show(5, truncate=False)

    spark.stop()
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("spark-submit test passed")


if __name__ == "__main__":
    main()
