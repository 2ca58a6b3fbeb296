#!/usr/bin/env bash
# Does the working tree's library run the same code as BASE's? For changes to comments and docs only, this is the
# before/after check (identical IL cannot change speed); any code change fails it, and then benchmarks/compare.sh is.
#
#   benchmarks/same-il.sh BASE     BASE: a git revision (built once by benchmarks/build-revision.sh) or a directory
#                                  holding IoUring.dll and IoUring.AspNetCore.dll
# Exit code 0 when both assemblies' IL, signatures and fields are equal member by member.
set -Eeuo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BASE=${1:?usage: benchmarks/same-il.sh BASE (a git revision or a directory with the two assemblies)}
if [[ -d $BASE ]]; then
    base_dir=$BASE
else
    base_dir=$("$ROOT/benchmarks/build-revision.sh" "$BASE")/src/IoUring.AspNetCore/bin/Release/net10.0
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
