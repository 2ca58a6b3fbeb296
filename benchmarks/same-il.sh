#!/usr/bin/env bash
# Does the working tree's library run the same code as BASE's? For changes to comments and docs only, this is the
# before/after check (identical IL cannot change speed); any code change fails it, and then benchmarks/compare.sh is.
#
#   benchmarks/same-il.sh BASE     BASE: a git revision (exported and built once in /tmp/iouring-compare/SHA, as
#                                  benchmarks/compare.sh does) or a directory holding IoUring.dll and IoUring.AspNetCore.dll
# Exit code 0 when both assemblies' IL, signatures and fields are equal member by member.
set -Eeuo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BASE=${1:?usage: benchmarks/same-il.sh BASE (a git revision or a directory with the two assemblies)}
if [[ -d $BASE ]]; then
    base_dir=$BASE
else
    sha=$(git -C "$ROOT" rev-parse --verify "$BASE^{commit}") || { echo "same-il.sh: '$BASE' is neither a revision nor a directory"; exit 2; }
    dir=/tmp/iouring-compare/$sha
    base_dir=$dir/src/IoUring.AspNetCore/bin/Release/net10.0
    if [[ ! -f $base_dir/IoUring.AspNetCore.dll ]]; then
        echo "building $BASE's libraries in $dir"
        rm -rf "$dir" && mkdir -p "$dir"
        git -C "$ROOT" archive "$sha" | tar -x -C "$dir"
        dotnet build -c Release -nologo -v q "$dir/src/IoUring.AspNetCore/IoUring.AspNetCore.csproj" >"$dir.build.log" 2>&1 ||
            { tail -20 "$dir.build.log"; echo "same-il.sh: $BASE did not build (log: $dir.build.log)"; exit 1; }
    fi
fi
dotnet build -c Release -nologo -v q "$ROOT/src/IoUring.AspNetCore/IoUring.AspNetCore.csproj" >/dev/null
dotnet build -c Release -nologo -v q "$ROOT/benchmarks/ILCompare/ILCompare.csproj" >/dev/null
tool=$ROOT/benchmarks/ILCompare/bin/Release/net10.0/ILCompare.dll
here=$ROOT/src/IoUring.AspNetCore/bin/Release/net10.0
status=0
for assembly in IoUring.dll IoUring.AspNetCore.dll; do
    dotnet "$tool" "$base_dir/$assembly" "$here/$assembly" || status=1
done
exit $status
