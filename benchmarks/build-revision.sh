#!/usr/bin/env bash
# Builds a git revision's samples/KestrelSample (and with it the libraries) once, in /tmp/iouring-compare/SHA, from
# `git archive`; prints that directory. Used by benchmarks/compare.sh and benchmarks/same-il.sh.
#   benchmarks/build-revision.sh REVISION
set -Eeuo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REV=${1:?usage: benchmarks/build-revision.sh REVISION}
sha=$(git -C "$ROOT" rev-parse --verify "$REV^{commit}") || { echo "build-revision.sh: '$REV' is not a revision" >&2; exit 2; }
dir=/tmp/iouring-compare/$sha
if [[ ! -x $dir/samples/KestrelSample/bin/Release/net10.0/KestrelSample ]]; then
    echo "building $REV's KestrelSample in $dir" >&2
    rm -rf "$dir" && mkdir -p "$dir"
    git -C "$ROOT" archive "$sha" | tar -x -C "$dir"
    dotnet build -c Release -nologo -v q "$dir/samples/KestrelSample/KestrelSample.csproj" >"$dir.build.log" 2>&1 ||
        { tail -20 "$dir.build.log" >&2; echo "build-revision.sh: $REV did not build (log: $dir.build.log)" >&2; exit 1; }
fi
echo "$dir"
