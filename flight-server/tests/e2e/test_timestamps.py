"""Time ranges through the daemon (docs/sql.md, "Timestamps"; docs/protocol.md, range PSFs with
"type": "timestamp"): `TIMESTAMP '…'` filters compare RFC 3339 strings of any spelling as
instants, a timestamp range PSF with one-hour buckets serves a bounded range (backfilled over
the records already there), epoch-millisecond numbers are bucketed by their unit, and the
answers equal a Python oracle (datetime.fromisoformat) through the native path, Flight SQL
and a bound timestamp parameter."""

import datetime as dt
import json
import random
import time

import adbc_driver_flightsql.dbapi as flightsql
import pyarrow as pa
import pytest

from conftest import Daemon, action, put, query, query_ids

START = dt.datetime(2021, 7, 21, 6, 0, tzinfo=dt.timezone.utc)
SPELLINGS = [
    lambda t: t.strftime("%Y-%m-%dT%H:%M:%SZ"),
    lambda t: t.astimezone(dt.timezone(dt.timedelta(hours=2))).isoformat(),
    lambda t: t.astimezone(dt.timezone(dt.timedelta(hours=-5, minutes=-30))).isoformat(),
    lambda t: t.strftime("%Y-%m-%d %H:%M:%S.%f"),  # no offset: UTC
    lambda t: t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z",
]


def events(count):
    """Records over twelve hours, `at` spelled five ways (offsets reorder them as text), `ms`
    the same instant in epoch milliseconds; a few with no time, `at` null or not a timestamp."""
    rng = random.Random(7)
    out = []
    for i in range(count):
        t = START + dt.timedelta(seconds=rng.randrange(12 * 3600), milliseconds=rng.randrange(1000))
        record = {"id": f"e{i:05d}", "at": rng.choice(SPELLINGS)(t), "ms": int(t.timestamp() * 1000) if i % 7 else None}
        if i % 97 == 0:
            record["at"] = rng.choice([None, "soon", 17])
        out.append(record)
    return out


def instant(value):
    """The oracle: Python's reading of an RFC 3339 string (naive means UTC)."""
    if not isinstance(value, str):
        return None
    try:
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def between(records, low, high):
    return sorted(r["id"] for r in records if (t := instant(r["at"])) is not None and low <= t < high)


def test_timestamp_filters_and_hour_buckets_answer_as_python(daemon):
    client = daemon.client()
    records = events(4000)
    action(client, "create_table", {"name": "ts", "page_size_bits": 16})
    put(client, "ts", [json.dumps(r) for r in records[:3000]])
    # Registered over records already there: its backfill indexes them.
    hour = action(client, "register_psf", {"table": "ts", "name": "hour", "kind": "range", "field": "at",
                                           "type": "timestamp", "bucket": "1h"})
    assert (hour["definition"]["type"], hour["definition"]["bucket"], hour["definition"]["unit"]) == ("timestamp", "1h", "s"), hour
    action(client, "register_psf", {"table": "ts", "name": "ms", "kind": "range", "field": "ms",
                                    "type": "timestamp", "bucket": "1h", "unit": "ms"})
    put(client, "ts", [json.dumps(r) for r in records[3000:]])
    for _ in range(200):
        if all((p.get("backfill") or {}).get("done", True) for p in action(client, "list_psfs", {"table": "ts"})):
            break
        time.sleep(0.05)

    low, high = START + dt.timedelta(hours=3), START + dt.timedelta(hours=4, minutes=30)
    text = f"at >= TIMESTAMP '{low.isoformat()}' AND at < TIMESTAMP '{high.strftime('%Y-%m-%d %H:%M:%S')}'"
    ids, meta = query_ids(client, "ts", text)
    expected = between(records, low, high)
    assert 200 < len(expected) < 1000
    assert ids == expected, (sorted(set(expected) ^ set(ids))[:5], meta["plan"])
    plan = meta["plan"]
    assert [s["psfs"] for s in plan["index_scans"]] == [["hour"]] and not plan["full_scans"], plan
    assert len(plan["index_scans"][0]["properties"]) == 2, plan  # the buckets of 09:00 and 10:00

    # The same range as a cast and as a string the cast reads; one side alone is scanned.
    cast = f"CAST(at AS TIMESTAMP) BETWEEN '{low.isoformat()}' AND '{(high - dt.timedelta(microseconds=1)).isoformat()}'"
    assert query_ids(client, "ts", cast)[0] == expected
    # date_trunc compared with an hour is that hour's range (served by the same PSF).
    hour = START + dt.timedelta(hours=5)
    ids, meta = query_ids(client, "ts", f"date_trunc('hour', at) = TIMESTAMP '{hour.isoformat()}'")
    assert ids == between(records, hour, hour + dt.timedelta(hours=1)), meta["plan"]
    assert [s["psfs"] for s in meta["plan"]["index_scans"]] == [["hour"]], meta["plan"]
    after = START + dt.timedelta(hours=11)
    ids, meta = query_ids(client, "ts", f"at > TIMESTAMP '{after.isoformat()}'")
    assert ids == sorted(r["id"] for r in records if (t := instant(r["at"])) is not None and t > after)
    assert not meta["plan"]["index_scans"], meta["plan"]

    # Epoch milliseconds: a numeric range served by the `ms` PSF's buckets.
    lo_ms, hi_ms = int(low.timestamp() * 1000), int(high.timestamp() * 1000)
    ids, meta = query_ids(client, "ts", f"ms >= {lo_ms} AND ms < {hi_ms}")
    assert ids == sorted(r["id"] for r in records if r["ms"] is not None and lo_ms <= r["ms"] < hi_ms)
    assert [s["psfs"] for s in meta["plan"]["index_scans"]] == [["ms"]], meta["plan"]

    # Flight SQL: a TIMESTAMP literal, and a timestamp bound as a parameter.
    with flightsql.connect(daemon.location) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT id FROM ts WHERE at >= TIMESTAMP '{low.isoformat()}' AND at < TIMESTAMP '{high.isoformat()}' ORDER BY id")
        assert [row[0] for row in cur.fetchall()] == expected
        cur.execute("SELECT count(*) FROM ts WHERE at >= ? AND at < ?", parameters=(low, high))
        assert cur.fetchone()[0] == len(expected)


def test_timestamp_and_function_psfs_survive_a_restart(tmp_path):
    records = events(2000)
    for r in records:
        r["who"] = r["id"].upper()
    low, high = START + dt.timedelta(hours=2), START + dt.timedelta(hours=3)
    window = f"at >= TIMESTAMP '{low.isoformat()}' AND at < TIMESTAMP '{high.isoformat()}'"
    definitions = None
    for start in range(2):
        d = Daemon(tmp_path / "data")
        try:
            client = d.client()
            if start == 0:
                action(client, "create_table", {"name": "keep", "page_size_bits": 16})
                put(client, "keep", [json.dumps(r) for r in records])
                action(client, "register_psf", {"table": "keep", "name": "hour", "kind": "range", "field": "at",
                                                "type": "timestamp", "bucket": "1h", "backfill": False})
                action(client, "register_psf", {"table": "keep", "name": "who", "kind": "projection", "field": "lower(who)",
                                                "backfill": False})
                put(client, "keep", [json.dumps(r) for r in records])
                definitions = [p["definition"] for p in action(client, "list_psfs", {"table": "keep"})]
            # The definitions and the chains come back with the table.
            assert [p["definition"] for p in action(client, "list_psfs", {"table": "keep"})] == definitions
            ids, meta = query_ids(client, "keep", window)
            assert ids == sorted(between(records, low, high) * 2), meta["plan"]
            assert [s["psfs"] for s in meta["plan"]["index_scans"]] == [["hour"]], meta["plan"]
            ids, meta = query_ids(client, "keep", "lower(who) = 'e00042'")
            assert ids == ["e00042", "e00042"] and [s["psfs"] for s in meta["plan"]["index_scans"]] == [["who"]], meta["plan"]
        finally:
            assert d.stop() == 0


def test_calendar_buckets_serve_date_trunc_by_month(daemon):
    """A timestamp range PSF with one bucket per calendar month serves `date_trunc('month', …)`
    over records of eight months, backfilled, as Python's calendar answers."""
    client = daemon.client()
    rng = random.Random(11)
    start = dt.datetime(2021, 1, 1, tzinfo=dt.timezone.utc)
    records = [{"id": f"m{i:05d}", "at": rng.choice(SPELLINGS)(start + dt.timedelta(seconds=rng.randrange(243 * 86400)))}
               for i in range(3000)]
    action(client, "create_table", {"name": "months", "page_size_bits": 16})
    put(client, "months", [json.dumps(r) for r in records])
    month = action(client, "register_psf", {"table": "months", "name": "month", "kind": "range", "field": "at",
                                            "type": "timestamp", "bucket": "Month"})
    assert month["definition"]["bucket"] == "month", month
    for _ in range(200):
        if all((p.get("backfill") or {}).get("done", True) for p in action(client, "list_psfs", {"table": "months"})):
            break
        time.sleep(0.05)
    for first, later in [(dt.datetime(2021, 2, 1, tzinfo=dt.timezone.utc), dt.datetime(2021, 3, 1, tzinfo=dt.timezone.utc)),
                         (dt.datetime(2021, 7, 1, tzinfo=dt.timezone.utc), dt.datetime(2021, 8, 1, tzinfo=dt.timezone.utc))]:
        ids, meta = query_ids(client, "months", f"date_trunc('month', at) = DATE '{first.date()}'")
        expected = between(records, first, later)
        assert ids == expected and len(expected) > 200, (len(ids), len(expected), meta["plan"])
        scans = meta["plan"]["index_scans"]
        # One bucket: the exclusive upper bound (the next month) begins a bucket, which is not read.
        assert [s["psfs"] for s in scans] == [["month"]] and len(scans[0]["properties"]) == 1, meta["plan"]
    # A quarter is three of the months' buckets.
    ids, meta = query_ids(client, "months", "date_trunc('quarter', at) = TIMESTAMP '2021-04-01T00:00:00Z'")
    assert ids == between(records, dt.datetime(2021, 4, 1, tzinfo=dt.timezone.utc), dt.datetime(2021, 7, 1, tzinfo=dt.timezone.utc))
    assert len(meta["plan"]["index_scans"][0]["properties"]) == 3, meta["plan"]


def test_bad_timestamp_psfs_and_literals_are_refused_by_name(daemon):
    client = daemon.client()
    action(client, "create_table", {"name": "bad"})
    for spec, message in [
        ({"type": "timestamp"}, "needs `boundaries` (instants) or `bucket`"),
        ({"type": "timestamp", "bucket": "1y"}, "is not a duration"),
        ({"type": "timestamp", "boundaries": ["2021-07-21", "yesterday"]}, "boundary `yesterday` is not a timestamp"),
        ({"boundaries": [1, 2], "bucket": "1h"}, "belong to a range PSF with \"type\": \"timestamp\""),
        ({"type": "timestamp", "bucket": "fortnight"}, "or a unit of the calendar"),
    ]:
        with pytest.raises(pa.ArrowInvalid) as error:
            action(client, "register_psf", {"table": "bad", "name": "t", "kind": "range", "field": "at", **spec})
        assert message in str(error.value), str(error.value)
    with pytest.raises(pa.ArrowInvalid) as error:
        action(client, "register_psf", {"table": "bad", "name": "d", "kind": "projection", "field": "date_trunc('day', at)"})
    assert '"kind": "range", "field": "at", "type": "timestamp", "bucket": "day"' in str(error.value), str(error.value)
    with pytest.raises(pa.ArrowInvalid) as error:
        query(client, {"table": "bad", "filter": "at > TIMESTAMP 'tomorrow'"})
    assert "'tomorrow' is not a timestamp" in str(error.value)
    assert action(client, "list_psfs", {"table": "bad"}) == []
