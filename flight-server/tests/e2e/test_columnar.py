"""The columnar tier through the daemon: queries over compacted data agree with a
pure-Python oracle and with a table whose tier is off; the plan shows the columnar
scans; after a SIGKILL with a damaged file, the daemon gives the same answers and
rebuilds it."""

import json
import signal
import time

import pytest

from conftest import action, dig, github_events, put, query

SMALL_FILES = {"file_log_bytes": 1 << 18, "row_group_rows": 200, "idle_ms": 0}


def number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def cmp(record, path, op, literal):
    """SQL three-valued `path op literal`: None when unknown (missing, null, other type)."""
    v = dig(record, path)
    if isinstance(literal, str):
        if not isinstance(v, str):
            return None
        a, b = v.encode(), literal.encode()
    elif number(literal):
        if not number(v):
            return None
        a, b = v, literal
    else:
        return None
    return {"=": a == b, "<>": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def and3(*terms):
    return False if False in terms else (None if None in terms else True)


def or3(*terms):
    return True if True in terms else (None if None in terms else False)


def not3(x):
    return None if x is None else not x


def is_null(record, path):
    return dig(record, path) is None


FILTERS = {
    "type = 'PushEvent'": lambda r: cmp(r, "type", "=", "PushEvent"),
    "payload.size > 5": lambda r: cmp(r, "payload.size", ">", 5),
    "type = 'IssuesEvent' AND payload.action = 'opened'":
        lambda r: and3(cmp(r, "type", "=", "IssuesEvent"), cmp(r, "payload.action", "=", "opened")),
    "payload.size >= 2 OR payload.action IS NULL":
        lambda r: or3(cmp(r, "payload.size", ">=", 2), is_null(r, "payload.action")),
    "NOT (actor.login < 'm')": lambda r: not3(cmp(r, "actor.login", "<", "m")),
    "repo.id > 30000000 AND payload.size IS NOT NULL":
        lambda r: and3(cmp(r, "repo.id", ">", 30000000), not is_null(r, "payload.size")),
}


def wait_compacted(client, table, timeout=60):
    deadline = time.time() + timeout
    while True:
        stats = action(client, "stats", {"table": table})["columnar"]
        if stats["backlog_bytes"] == 0 and stats["files"] > 0:
            return stats
        assert time.time() < deadline, f"compaction did not catch up: {stats}"
        time.sleep(0.05)


def create(client, name, columnar):
    action(client, "create_table", {"name": name, "page_size_bits": 18, "columnar": columnar})


def ids_and_logins(client, table, text):
    result, _, meta = query(client, {"table": table, "filter": text, "columns": ["id", "actor.login"]})
    rows = sorted(zip(result.column("id").to_pylist(), result.column("actor.login").to_pylist())) if result else []
    return rows, meta


def count(client, table, text):
    result, _, _ = query(client, {"table": table, "filter": text, "aggregates": [{"function": "count"}]})
    return sum(result.column(0).to_pylist())


def test_columnar_scans_agree_with_a_python_oracle_and_with_the_tier_off(daemon):
    lines = github_events(3000)
    records = [json.loads(line) for line in lines]
    client = daemon.client()
    create(client, "cols", SMALL_FILES)
    create(client, "raw", {"enabled": False})
    for table in ("cols", "raw"):
        put(client, table, lines)
    stats = wait_compacted(client, "cols")
    assert stats["rows"] > 2000 and stats["parquet_bytes"] > 0, stats
    assert action(client, "stats", {"table": "raw"})["columnar"]["files"] == 0

    columnar_plans = 0
    for text, predicate in FILTERS.items():
        expected = sorted((r["id"], r["actor"]["login"]) for r in records if predicate(r) is True)
        got, meta = ids_and_logins(client, "cols", text)
        assert got == expected, text
        assert ids_and_logins(client, "raw", text)[0] == expected, text
        assert count(client, "cols", text) == len(expected), text
        columnar_plans += bool(meta["plan"].get("columnar_scans"))
        # Whole events as JSON: the ingested bytes, matched on columns, read by address.
        result, _, _ = query(client, {"table": "cols", "filter": text, "output": "json"})
        got_json = sorted(result.column("json").to_pylist()) if result else []
        assert got_json == sorted(line for line, r in zip(lines, records) if predicate(r) is True), text
    assert columnar_plans == len(FILTERS)
    # Struct columns are rebuilt from their leaves' columns: the same dicts as the records'.
    for text, predicate in FILTERS.items():
        result, _, _ = query(client, {"table": "cols", "filter": text, "columns": ["id", "actor", "repo"]})
        assert result is not None and result.num_rows > 0, text
        names = {c: [f.name for f in result.schema.field(c).type] for c in ("actor", "repo")}
        got = sorted(zip(result.column("id").to_pylist(), result.column("actor").to_pylist(), result.column("repo").to_pylist()), key=str)
        expected = sorted(((r["id"], *({k: r[c].get(k) for k in names[c]} for c in ("actor", "repo"))) for r in records if predicate(r) is True), key=str)
        assert got == expected, text
        raw, _, _ = query(client, {"table": "raw", "filter": text, "columns": ["id", "actor", "repo"]})
        assert sorted(zip(*(raw.column(c).to_pylist() for c in ("id", "actor", "repo"))), key=str) == got, text
    # Every filter ran over the same files several times: the decoded columns were kept.
    decoded = action(client, "stats", {"table": "cols"})["columnar"]
    assert decoded["decoded_hits"] > decoded["decoded_misses"] > 0, decoded
    assert 0 < decoded["decoded_bytes"] <= 64 << 20, decoded

    # A one-call query with a limit stops exactly, across the columnar part too.
    result, _, _ = query(client, {"table": "cols", "filter": "payload.size > 0", "columns": ["id"], "limit": 7})
    assert result.num_rows == 7


def test_a_damaged_file_after_sigkill_is_rebuilt_and_answers_stay_the_same(start_daemon, tmp_path):
    lines = github_events(2000)
    first = start_daemon()
    client = first.client()
    create(client, "ev", SMALL_FILES)
    put(client, "ev", lines)
    wait_compacted(client, "ev")
    action(client, "checkpoint", {"table": "ev"})
    expected = {text: ids_and_logins(client, "ev", text)[0] for text in FILTERS}
    first.process.send_signal(signal.SIGKILL)
    first.process.wait(30)

    columnar = tmp_path / "data0" / "tables" / "ev" / "columnar"
    files = sorted(columnar.glob("*.parquet"))
    assert len(files) >= 2, files
    files[0].write_bytes(files[0].read_bytes()[:100])  # torn
    (columnar / "x.parquet.tmp").write_bytes(b"half")  # killed before the rename

    # The same data directory again.
    from conftest import Daemon
    second = Daemon(tmp_path / "data0")
    try:
        client = second.client()
        for text, rows in expected.items():
            assert ids_and_logins(client, "ev", text)[0] == rows, text
        wait_compacted(client, "ev")
        assert files[0].stat().st_size > 100, "the damaged file was rebuilt"
        assert not (columnar / "x.parquet.tmp").exists()
        for text, rows in expected.items():
            assert ids_and_logins(client, "ev", text)[0] == rows, text
    finally:
        assert second.stop() == 0


def test_columnar_settings_are_checked(daemon):
    client = daemon.client()
    with pytest.raises(Exception, match="unknown field"):
        action(client, "create_table", {"name": "bad", "columnar": {"codec": "zstd", "nope": 1}})
    with pytest.raises(Exception, match="codec"):
        action(client, "create_table", {"name": "bad", "columnar": {"codec": "brotli"}})
    with pytest.raises(Exception, match="columnar.cache_bytes"):
        action(client, "create_table", {"name": "bad", "columnar": {"cache_bytes": 1 << 41}})
    for threads in (0, 65):
        with pytest.raises(Exception, match="columnar.threads"):
            action(client, "create_table", {"name": "bad", "columnar": {"threads": threads}})
    action(client, "create_table", {"name": "uncached", "columnar": {"cache_bytes": 0}})


def test_several_compactor_threads_answer_as_one(daemon):
    """A table with `"threads": 3` compacts every flushed page once (no backlog; a record in
    two files would come back twice) and answers every filter as the Python oracle does."""
    client = daemon.client()
    records = github_events(4000)
    create(client, "threaded", {"file_log_bytes": 1 << 19, "idle_ms": 100, "threads": 3})
    put(client, "threaded", records)
    stats = wait_compacted(client, "threaded")
    # (The open page at the tail stays raw.)
    assert 0.9 * len(records) <= stats["rows"] <= len(records) and stats["files"] >= 4, stats
    parsed = [json.loads(r) for r in records]
    for text, oracle in FILTERS.items():
        rows, meta = ids_and_logins(client, "threaded", text)
        assert sorted(i for i, _ in rows) == sorted(r["id"] for r in parsed if oracle(r)), text
        assert meta["plan"]["columnar_scans"], meta


def oracle_value(value, arrow_type):
    """What a column of `arrow_type` holds for the JSON value `value` (the conversion's
    table in schema/arrow_batch.rs, for the kinds of value these tests make)."""
    import pyarrow as pa
    if pa.types.is_struct(arrow_type):
        if not isinstance(value, dict):
            return None
        return {f.name: oracle_value(value.get(f.name), f.type) for f in arrow_type}
    if pa.types.is_list(arrow_type):
        return [oracle_value(v, arrow_type.value_type) for v in value] if isinstance(value, list) else None
    if pa.types.is_int64(arrow_type):
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if pa.types.is_float64(arrow_type):
        return float(value) if number(value) else None
    if pa.types.is_boolean(arrow_type):
        return value if isinstance(value, bool) else None
    return value if isinstance(value, str) else None


def test_structs_and_arrays_of_scalars_come_from_columns_as_from_raw_records(daemon):
    """Objects (nested, empty, null, missing) and arrays of scalars (strings with null
    items, integers beside floats, empty, null) read from a compacted table's columns give
    the rows the raw records give and a Python oracle computes."""
    records = []
    for i in range(3000):
        r = {"id": i}
        if i % 10 == 0:
            r["st"] = None
        elif i % 10 == 1:
            r["st"] = {}
        elif i % 10 != 2:
            r["st"] = {"n": (i % 9) + (0.25 if i % 4 == 0 else 0), "s": f"s{i % 7}", "b": i % 2 == 0,
                       "in": {"k": i, "é": {}}}
        if i % 5 == 0:
            r["tags"] = [f"t{i % 4}", None, "ü"]
        elif i % 5 == 1:
            r["tags"] = []
        elif i % 5 == 2:
            r["tags"] = None
        if i % 6 == 0:
            r["nums"] = [i, (i % 9) + 0.5, None]
        records.append(r)
    lines = [json.dumps(r, ensure_ascii=i % 2 == 0) for i, r in enumerate(records)]
    client = daemon.client()
    create(client, "nested", SMALL_FILES)
    create(client, "nested_raw", {"enabled": False})
    for table in ("nested", "nested_raw"):
        put(client, table, lines)
    wait_compacted(client, "nested")
    columns = ["id", "st", "tags", "nums"]
    filters = {"id < 1000": lambda r: r["id"] < 1000,
               "st.n > 3": lambda r: cmp(r, "st.n", ">", 3),
               "st.in.k >= 2500": lambda r: cmp(r, "st.in.k", ">=", 2500)}
    for text, predicate in filters.items():
        result, _, meta = query(client, {"table": "nested", "filter": text, "columns": columns})
        assert meta["plan"].get("columnar_scans"), meta
        # The plan counts the row groups under its columnar scans and those the filter's
        # statistics rule out (ids grow with the log: most of them for `id < 1000`).
        groups = meta["plan"]["columnar_row_groups"]
        assert groups["total"] > 0 and (groups["skipped"] > groups["total"] // 2 if text == "id < 1000" else True), groups
        got = sorted(zip(*(result.column(c).to_pylist() for c in columns)), key=lambda row: row[0])
        raw, _, _ = query(client, {"table": "nested_raw", "filter": text, "columns": columns})
        assert sorted(zip(*(raw.column(c).to_pylist() for c in columns)), key=lambda row: row[0]) == got, text
        types = [result.schema.field(c).type for c in columns]
        expected = [tuple(oracle_value(r.get(c), t) for c, t in zip(columns, types)) for r in records if predicate(r) is True]
        assert got == expected, text
