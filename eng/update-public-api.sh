#!/usr/bin/env bash
# Rewrites PublicAPI.Unshipped.txt of the packable projects (src/*) from what the build reports: symbols that are
# public but not listed (RS0016) are added, listed symbols that are no longer public (RS0017) are removed.
# A public change then shows as a diff of these files, which is what a reviewer reads; without running this the
# build fails on any public change (the analyzer's diagnostics are errors under TreatWarningsAsErrors).
#   eng/update-public-api.sh        (from anywhere; runs two builds, the second to confirm the files are complete)
set -euo pipefail
cd "$(dirname "$0")/.."

update_once() {
  local log
  log=$(mktemp)
  # Warnings, not errors, so that every project builds and reports (IoUring.AspNetCore needs IoUring built).
  dotnet build IoUring.sln --no-incremental -p:TreatWarningsAsErrors=false -nologo -v q >"$log" 2>&1 || true
  python3 - "$log" <<'PY'
import re, sys, collections
added, removed = collections.defaultdict(set), collections.defaultdict(set)
pattern = re.compile(r"(RS0016|RS0017): Symbol '(.*)' is (?:not part of the declared public API|part of the declared API, but is either not public or could not be found).* \[(.*)/[^/]*\.csproj\]$")
for line in open(sys.argv[1], encoding="utf-8"):
    m = pattern.search(line.rstrip())
    if m:
        (added if m.group(1) == "RS0016" else removed)[m.group(3)].add(m.group(2))
for project in sorted(set(added) | set(removed)):
    path = f"{project}/PublicAPI.Unshipped.txt"
    lines = [l.rstrip("\n") for l in open(path, encoding="utf-8")]
    header = [l for l in lines if l.startswith("#")] or ["#nullable enable"]
    body = {l for l in lines if l and not l.startswith("#")}
    body = (body | added[project]) - removed[project]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(header + sorted(body, key=str.lower)) + "\n")
    print(f"{path}: +{len(added[project])} -{len(removed[project])}")
PY
  grep -cE "RS00(16|17)" "$log" || true
  rm -f "$log"
}

update_once
echo "second pass (should report 0):"
update_once
