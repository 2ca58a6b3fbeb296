#!/usr/bin/env bash
# The UDP benchmarks (issues #21, #41), with what they need installed: ethtool (the ifb-nogso device turns its UDP
# segmentation off with it), as root. Each argument list goes to benchmarks/IoUring.Benchmarks as it is, e.g.
#   benchmarks/run-udp.sh --udp-bulk 5 3 1200,1450 ifb-nogso
#   benchmarks/run-udp.sh --udp-bulk-receive 5 3
#   benchmarks/run-udp.sh --udp-responder 7 3
#   UDP_RESPONDER_BASE=/path/to/other/IoUring.Benchmarks.dll benchmarks/run-udp.sh --udp-responder 15 3 64,512
# (docs/benchmarks.md, "UDP", has the numbers and what the arguments mean; about 5 minutes each). Run alone.
set -Eeuo pipefail
cd "$(dirname "$0")/.."
[[ $# -gt 0 ]] || { sed -n '2,8p' "$0"; exit 2; }
if ! command -v ethtool >/dev/null; then
    echo "installing ethtool"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ethtool >/dev/null
fi
dotnet build -c Release -nologo -v q benchmarks/IoUring.Benchmarks/IoUring.Benchmarks.csproj >/dev/null
exec dotnet benchmarks/IoUring.Benchmarks/bin/Release/net10.0/IoUring.Benchmarks.dll "$@"
