"""The filters people write first (docs/protocol.md, "Filters"): `lower`/`upper`/`length`/`substr`
of a field, `date_trunc` over calendar units, `array_contains(path, literal)` and `path[*].field = literal` over arrays, and a
projection PSF over `lower(actor.login)` — through the native path and Flight SQL, on GitHub
events, against a Python oracle."""

import json

import adbc_driver_flightsql.dbapi as flightsql

from conftest import action, dig, github_events, put, query_ids


def labels(record):
    return [label.get("name") for label in (dig(record, "payload.issue.labels") or [])]


def test_functions_and_array_membership_answer_as_python(daemon):
    client = daemon.client()
    events = github_events(3000)
    records = [json.loads(e) for e in events]
    action(client, "create_table", {"name": "fx"})
    put(client, "fx", events[:2000])
    lowered = action(client, "register_psf", {"table": "fx", "name": "login_lower", "kind": "projection",
                                              "field": "LOWER(actor.login)"})
    assert lowered["definition"] == {"kind": "projection", "field": "lower(actor.login)"}, lowered
    prefixed = action(client, "register_psf", {"table": "fx", "name": "repo_prefix", "kind": "projection",
                                               "field": "substring(repo.name, 1, 4)"})
    assert prefixed["definition"] == {"kind": "projection", "field": "substr(repo.name, 1, 4)"}, prefixed
    put(client, "fx", events[2000:])
    login = next(r["actor"]["login"] for r in records if any(c.isupper() for c in r["actor"]["login"]))

    def ids(test):
        return sorted(r["id"] for r in records if test(r))

    cases = {
        f"lower(actor.login) = '{login.lower()}'": ids(lambda r: r["actor"]["login"].lower() == login.lower()),
        f"upper(actor.login) IN ('{login.upper()}', 'NOBODY')": ids(lambda r: r["actor"]["login"].upper() == login.upper()),
        "length(repo.name) > 30": ids(lambda r: len(r["repo"]["name"]) > 30),
        # Spark's substring: 1-based; a negative start counts from the end.
        f"substr(repo.name, 1, 4) = '{records[5]['repo']['name'][:4]}'": ids(
            lambda r: r["repo"]["name"][:4] == records[5]["repo"]["name"][:4]),
        "SUBSTRING(actor.login FROM -3) = 'bot'": ids(lambda r: r["actor"]["login"][-3:] == "bot"),
        # Calendar truncations: the events' ISO week (2018-01-01 is a Monday), none before 2018.
        "date_trunc('week', created_at) = DATE '2018-01-01'": ids(lambda r: "2018-01-01" <= r["created_at"] < "2018-01-08"),
        "date_trunc('year', created_at) < DATE '2018-01-01'": ids(lambda r: r["created_at"] < "2018"),
        "array_contains(payload.issue.labels[*].name, 'bug')": ids(lambda r: "bug" in labels(r)),
        "payload.commits[*].distinct = FALSE": ids(
            lambda r: any(c.get("distinct") is False for c in (dig(r, "payload.commits") or []))),
        # NOT: an issue with an array of labels, all named, none 'bug' (no array: unknown).
        "type = 'IssuesEvent' AND NOT array_contains(payload.issue.labels[*].name, 'bug')": ids(
            lambda r: r["type"] == "IssuesEvent" and isinstance(dig(r, "payload.issue.labels"), list)
            and "bug" not in labels(r) and None not in labels(r)),
    }
    for text, expected in cases.items():
        got, meta = query_ids(client, "fx", text)
        assert got == expected, (text, sorted(set(got) ^ set(expected))[:5], meta["plan"]["reason"])
        assert expected or "NOT" in text or "year" in text, f"{text} selects something"
    _, meta = query_ids(client, "fx", f"lower(actor.login) = '{login.lower()}'")
    assert [s["psfs"] for s in meta["plan"]["index_scans"]] == [["login_lower"]], meta["plan"]
    _, meta = query_ids(client, "fx", f"substr(repo.name, 1, 4) = '{records[5]['repo']['name'][:4]}'")
    assert [s["psfs"] for s in meta["plan"]["index_scans"]] == [["repo_prefix"]], meta["plan"]

    with flightsql.connect(daemon.location) as conn, conn.cursor() as cur:
        cur.execute("SELECT id FROM fx WHERE array_contains(payload.issue.labels[*].name, 'bug') OR lower(actor.login) = ? ORDER BY id",
                    parameters=(login.lower(),))
        assert [row[0] for row in cur.fetchall()] == sorted(
            set(cases["array_contains(payload.issue.labels[*].name, 'bug')"]) | set(cases[f"lower(actor.login) = '{login.lower()}'"]))
