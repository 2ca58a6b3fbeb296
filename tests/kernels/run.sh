#!/usr/bin/env bash
# Runs IoUring.Tests (or another test project: TESTS) on another Linux kernel: a stock distribution kernel booted under qemu (software emulation, TCG,
# so it also works on machines without KVM), with the host's root filesystem as the guest's root.
#
#   tests/kernels/run.sh                                   Debian 12's current 6.1 kernel (linux-image-amd64's
#                                                          dependency, e.g. linux-image-6.1.0-56-amd64), all tests
#   KERNEL_PKG=linux-image-6.12.107+deb12-amd64-unsigned tests/kernels/run.sh
#   FILTER="FullyQualifiedName~Rings" tests/kernels/run.sh      a vstest /TestCaseFilter expression
#   ARCH=arm64 tests/kernels/run.sh                        Debian 12's arm64 kernel under qemu-system-aarch64
#   ARCH=arm64 KERNEL_PKG=linux-image-6.12.117+deb12-arm64-16k-unsigned tests/kernels/run.sh     16 KiB pages
#
# Environment:
#   ARCH         amd64 (default) or arm64. arm64 emulates an aarch64 machine (qemu virt, -cpu max) and has no host
#                filesystem to borrow: its root is a few arm64 Debian packages (libc, libstdc++, ICU, OpenSSL, busybox)
#                extracted into CACHE, and the tests are a self-contained linux-arm64 publish of $TESTS run by the
#                project's own in-process runner (tests/IoUring.Tests/Program.cs), since the SDK is x64 only. FILTER
#                is then INCLUDE/EXCLUDE instead (substrings of test names, space-separated); EXCLUDE defaults to the
#                tests that need gcc, the SDK or chromium in the guest (ARM64_EXCLUDES below; the ABI tests' arm64
#                half runs on the host under qemu-user).
#   KERNEL_PKG   Debian package holding /boot/vmlinuz-* and its modules (apt-get download + dpkg -x into CACHE; the
#                host's /boot is not touched). Default: what linux-image-amd64 depends on.
#   FILTER       test filter (vstest syntax), default empty: the whole suite.
#   TESTS        the test project under tests/, default IoUring.Tests; IoUring.AspNetCore.Tests runs the Kestrel
#                transport's tests (they use the host's curl, h2load and openssl, as on the host).
#   TIMEOUT      overall limit in minutes for the guest, default 90; the tests inside get TIMEOUT - 5.
#   SMP, MEM     guest CPUs and memory, default 2 and 4G.
#   TEST_ENV     "NAME=value ..." for the test process in the guest. Default IOURING_SOAK_SECONDS=15: the soak test
#                wants > 100 connections in its window, and under TCG 5 s gave 69 once. arm64 adds
#                DOTNET_EnableWriteXorExecute=0: under qemu-system-aarch64 (7.2, TCG) the runtime's double-mapped
#                (W^X) code died within 20 s in every run, SIGILL or SIGSEGV in freshly generated stubs, and just the same
#                with io_uring switched off (io_uring_disabled=2, no ring made); without W^X the suite passes.
#   OUT          directory for the results (default a new /tmp/iouring-kernel.XXXXXX): console.log (serial console:
#                kernel and test output), results.trx, uname, rc, guest.sh.
#   CACHE        where kernels are downloaded and extracted, default /var/cache/iouring-kernels.
#   BUILD=0      skip `dotnet build -c $CONFIG tests/$TESTS` on the host.
#   CONFIG       amd64's build configuration, Release (default) or Debug: Debug runs the library's Debug.Asserts, some
#                of which guard paths only older kernels take (single-shot and vectored receives before 6.17).
#   VERBOSE=1    also stream the serial console to the terminal (arm64: and name each test as it starts).
#
# How the guest is set up: a small initramfs (busybox-static + the virtio/9p/overlay modules of the kernel package)
# loads the modules, mounts the host's / read-only over virtio-9p (cache=loose: the host must not change the test
# binaries during the run), puts a tmpfs overlay on top (the guest can write anywhere; nothing reaches the host),
# mounts /proc, /sys, /dev, /dev/shm, /tmp, /run, brings up lo, mounts OUT read-write over a second 9p share at
# /kernel-out and chroots into guest.sh, which runs `dotnet vstest` on the built $TESTS.dll. The guest then
# powers off. Exit status: 0 when the guest finished and every selected test passed; 1 when tests failed; 2 when the
# guest did not finish (timeout, panic, boot failure): look at OUT/console.log.
set -Eeuo pipefail
trap 'echo "run.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ARCH=${ARCH:-amd64}
case $ARCH in amd64|arm64) ;; *) echo "ARCH is amd64 or arm64, not '$ARCH'"; exit 2 ;; esac
INCLUDE=${INCLUDE:-}
[[ $ARCH == arm64 && -z ${TEST_ENV+set} ]] && TEST_ENV="IOURING_SOAK_SECONDS=15 DOTNET_EnableWriteXorExecute=0"
# What needs a tool the arm64 root lacks: gcc (the ABI tests, the child-process launcher), the SDK (packaging, the
# dotnet host the child processes run on), chromium, postgresql, and iproute2's ip with network namespaces and veth
# (busybox's ip has neither) and tc: the tests that make a veth pair between two namespaces of their own.
ARM64_EXCLUDES="IoUring.Tests.Abi. VethNamespacesTests. LocalAddressTests.An_IPv6_wildcard_socket_tells_its_addresses_apart"
ARM64_EXCLUDES+=" SegmentOffloadLimitTests.Over_a_1500_byte_MTU UdpTests.A_send_waiting_in_the_kernel_for_room"
for t in Browser. Packaging. Reliability.FdExhaustionTests. Reliability.IoUringSwitchedOffTests. \
         Reliability.LockedMemoryLimitTests. Reliability.KestrelSampleHttpsTests. Samples.DatabaseSampleTests.; do
    ARM64_EXCLUDES+=" IoUring.AspNetCore.Tests.$t"
done
EXCLUDE=${EXCLUDE-$ARM64_EXCLUDES}
FILTER=${FILTER:-}
TESTS=${TESTS:-IoUring.Tests}
TIMEOUT=${TIMEOUT:-90}
SMP=${SMP:-2}
MEM=${MEM:-4G}
TEST_ENV=${TEST_ENV-IOURING_SOAK_SECONDS=15}
CACHE=${CACHE:-/var/cache/iouring-kernels}
BUILD=${BUILD:-1}
VERBOSE=${VERBOSE:-0}
OUT=${OUT:-$(mktemp -d /tmp/iouring-kernel.XXXXXX)}
mkdir -p "$OUT" "$CACHE"
OUT=$(cd "$OUT" && pwd)
(( TIMEOUT > 10 )) || { echo "TIMEOUT is in minutes and must be > 10"; exit 2; }
[[ $(id -u) == 0 ]] || { echo "run as root (apt-get, and the guest's root filesystem is the host's, read as root)"; exit 2; }

# ---- tools ----
need=()
if [[ $ARCH == amd64 ]]; then
    command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
    [[ -x /bin/busybox ]] || need+=(busybox-static)
    command -v gcc >/dev/null || need+=(build-essential linux-libc-dev)   # the ABI test compiles abi_dump.c in the guest
else
    command -v qemu-system-aarch64 >/dev/null || need+=(qemu-system-arm)
    if ! dpkg --print-foreign-architectures | grep -qx arm64; then   # arm64 kernels and libraries come from apt
        echo "adding the arm64 architecture to dpkg (apt-get downloads arm64 packages; nothing arm64 is installed)"
        dpkg --add-architecture arm64
        apt-get update -qq
    fi
fi
command -v cpio >/dev/null || need+=(cpio)
command -v depmod >/dev/null || need+=(kmod)
if (( ${#need[@]} )); then
    echo "installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v dotnet >/dev/null || { echo "needs the .NET 10 SDK (dotnet) on PATH"; exit 2; }
DOTNET=$(readlink -f "$(command -v dotnet)")

# ---- the kernel ----
if [[ -z ${KERNEL_PKG:-} ]]; then
    KERNEL_PKG=$(apt-cache depends "linux-image-$ARCH:$ARCH" | awk '/Depends: linux-image-/ { sub(/:.*/, "", $2); print $2; exit }')
    [[ -n $KERNEL_PKG ]] || { apt-get update -qq; KERNEL_PKG=$(apt-cache depends "linux-image-$ARCH:$ARCH" | awk '/Depends: linux-image-/ { sub(/:.*/, "", $2); print $2; exit }'); }
fi
KDIR="$CACHE/$KERNEL_PKG"
if [[ ! -d $KDIR/x/boot ]]; then
    echo "downloading $KERNEL_PKG"
    rm -rf "$KDIR"; mkdir -p "$KDIR"
    (cd "$KDIR" && chown _apt "$KDIR" 2>/dev/null; apt-get download "$KERNEL_PKG:$ARCH" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
    deb=$(ls "$KDIR"/*.deb 2>/dev/null | head -1)
    [[ -n $deb ]] || { echo "apt-get download $KERNEL_PKG failed (apt-get update? apt-cache search linux-image)"; exit 2; }
    dpkg -x "$deb" "$KDIR/x.tmp" && mv "$KDIR/x.tmp" "$KDIR/x" && rm -f "$deb"
fi
VMLINUZ=$(ls "$KDIR"/x/boot/vmlinuz-* | head -1)
KVER=${VMLINUZ##*/vmlinuz-}
MODDIR="$KDIR/x/lib/modules/$KVER"
[[ -f $MODDIR/modules.dep ]] || depmod -b "$KDIR/x" "$KVER"   # the package's postinst would have run it
echo "kernel: $KERNEL_PKG ($KVER)"

# ---- the guest's root: the host's own / (amd64), or a few arm64 packages extracted into CACHE (arm64) ----
GUEST_ROOT=/
BUSYBOX=/bin/busybox
if [[ $ARCH == arm64 ]]; then
    packages=(libc6 libgcc-s1 libstdc++6 zlib1g libicu72 libssl3 busybox-static)   # what .NET's runtime loads, and a shell
    versions=$(for p in "${packages[@]}"; do apt-cache policy "$p:arm64" | awk -v p="$p" '/Candidate:/ { print p "=" $2 }'; done)
    GUEST_ROOT="$CACHE/arm64-root-$(echo "$versions" | md5sum | cut -c1-8)"
    if [[ ! -d $GUEST_ROOT/bin ]]; then
        echo "building the arm64 root from: $(echo $versions)"
        rm -rf "$GUEST_ROOT.tmp" && mkdir -p "$GUEST_ROOT.tmp/debs" && chown _apt "$GUEST_ROOT.tmp/debs" 2>/dev/null || true
        (cd "$GUEST_ROOT.tmp/debs" && apt-get download $(echo "$versions" | sed 's/=/:arm64=/') 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
        for deb in "$GUEST_ROOT.tmp"/debs/*.deb; do dpkg -x "$deb" "$GUEST_ROOT.tmp"; done
        rm -rf "$GUEST_ROOT.tmp/debs"
        [[ -x $GUEST_ROOT.tmp/bin/busybox ]] || { echo "the arm64 packages did not download (apt-get update?)"; exit 2; }
        for a in sh cat date echo grep ls mkdir nproc rm sed sleep sync timeout touch uname; do ln -s busybox "$GUEST_ROOT.tmp/bin/$a"; done
        mkdir -p "$GUEST_ROOT.tmp"/{proc,sys,dev,tmp,run,root,tests}
        printf '127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n' >"$GUEST_ROOT.tmp/etc/hosts"
        echo 'root:x:0:0:root:/root:/bin/sh' >"$GUEST_ROOT.tmp/etc/passwd"
        mv "$GUEST_ROOT.tmp" "$GUEST_ROOT"
    fi
    BUSYBOX=$GUEST_ROOT/bin/busybox
fi

# ---- initramfs: busybox, the modules 9p, overlayfs and the veth tests need (in dependency order), /init ----
INITRD="$KDIR/initrd-iouring.cpio.gz"
ordered=()
declare -A seen=()
add_module() { # name (as in modules.dep, - and _ equivalent): its dependencies first, then itself
    local name=${1//-/_} line path dep
    [[ -n ${seen[$name]:-} ]] && return 0
    seen[$name]=1
    line=$(awk -v n="$name" -F: '{ f = $1; sub(/.*\//, "", f); sub(/\.ko.*/, "", f); gsub(/-/, "_", f); if (f == n) { print; exit } }' "$MODDIR/modules.dep")
    [[ -n $line ]] || return 0    # built in
    path=${line%%:*}
    for dep in ${line#*:}; do
        dep=${dep##*/}; dep=${dep%%.ko*}
        add_module "$dep"
    done
    ordered+=("$path")
}
# veth and sch_tbf: the tests that join two network namespaces of their own by a veth pair (one shaped with tc tbf).
for m in virtio_pci 9pnet_virtio 9p overlay veth sch_tbf; do add_module "$m"; done
rm -rf "$KDIR/initrd" && mkdir -p "$KDIR/initrd"/{bin,dev,proc,sys,mnt/lower,mnt/rw,newroot,modules}
cp "$BUSYBOX" "$KDIR/initrd/bin/busybox"
for a in sh mount umount mkdir insmod ip poweroff chroot sync sleep cat echo xzcat zstdcat gunzip; do ln -s busybox "$KDIR/initrd/bin/$a"; done
: >"$KDIR/initrd/modules/order"
for p in "${ordered[@]}"; do
    f=${p##*/}
    cp "$MODDIR/$p" "$KDIR/initrd/modules/$f"
    echo "$f" >>"$KDIR/initrd/modules/order"
done
cat >"$KDIR/initrd/init" <<'EOF'
#!/bin/sh
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
fail() { echo "KERNEL-RUN: $*"; echo o >/proc/sysrq-trigger; poweroff -f; }
for f in $(cat /modules/order); do
    case $f in
        *.ko.xz) xzcat /modules/$f >/tmp.ko && insmod /tmp.ko ;;
        *.ko.zst) zstdcat /modules/$f >/tmp.ko && insmod /tmp.ko ;;
        *) insmod /modules/$f ;;
    esac || echo "KERNEL-RUN: insmod $f failed"
done
mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=512000,cache=loose hostroot /mnt/lower || fail "mounting the host root over 9p failed"
mount -t tmpfs -o mode=755 rw /mnt/rw && mkdir -p /mnt/rw/upper /mnt/rw/work
mount -t overlay -o lowerdir=/mnt/lower,upperdir=/mnt/rw/upper,workdir=/mnt/rw/work overlay /newroot || fail "overlay mount failed"
mount -t proc proc /newroot/proc
mount -t sysfs sys /newroot/sys
mount -t devtmpfs dev /newroot/dev
mkdir -p /newroot/dev/shm /newroot/dev/pts /newroot/kernel-out
mount -t tmpfs -o mode=1777 shm /newroot/dev/shm
mount -t devpts devpts /newroot/dev/pts
# A fresh /tmp hides the host's; a checkout under it (where many clone) is bound back over the new one.
checkout=$(cat /checkout)
case $checkout in /tmp/*) mkdir -p /mnt/checkout && mount -o bind "/newroot$checkout" /mnt/checkout || fail "binding $checkout failed" ;; esac
mount -t tmpfs -o mode=1777 tmp /newroot/tmp
case $checkout in /tmp/*) mkdir -p "/newroot$checkout" && mount -o bind /mnt/checkout "/newroot$checkout" || fail "binding $checkout back failed" ;; esac
mount -t tmpfs -o mode=755 run /newroot/run
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=none out /newroot/kernel-out || fail "mounting OUT over 9p failed"
if [ -f /tests-share ]; then   # arm64: the self-contained publish of the tests
    mkdir -p /newroot/tests
    mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=512000,cache=loose tests /newroot/tests || fail "mounting the tests over 9p failed"
fi
ip link set lo up
chroot /newroot /bin/sh /kernel-out/guest.sh
sync
umount /newroot/kernel-out
echo "KERNEL-RUN: powering off"
echo o >/proc/sysrq-trigger
poweroff -f
EOF
if [[ $ARCH == amd64 ]]; then
    echo "$ROOT" >"$KDIR/initrd/checkout"   # the init keeps it visible if it lies under /tmp
else
    : >"$KDIR/initrd/checkout"; : >"$KDIR/initrd/tests-share"
fi
chmod +x "$KDIR/initrd/init"
(cd "$KDIR/initrd" && find . | cpio -o -H newc --quiet | gzip -1 >"$INITRD")
echo "initramfs: ${#ordered[@]} modules (${ordered[*]##*/})"

# ---- the tests, built on the host: a build for vstest (amd64), a self-contained publish (arm64) ----
PUBLISH="$ROOT/tests/$TESTS/bin/Release/net10.0/linux-arm64/publish"
CONFIG=${CONFIG:-Release}
if [[ $BUILD == 1 && $ARCH == amd64 ]]; then
    echo "building tests/$TESTS ($CONFIG)"
    dotnet build -c "$CONFIG" "$ROOT/tests/$TESTS" -v q -nologo >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 2; }
elif [[ $BUILD == 1 ]]; then
    echo "publishing tests/$TESTS for linux-arm64 (Release, self-contained)"
    rm -rf "$PUBLISH"
    dotnet publish -c Release -r linux-arm64 --self-contained -p:UseAppHost=true -o "$PUBLISH" "$ROOT/tests/$TESTS" \
        -v q -nologo >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 2; }
fi
DLL="$ROOT/tests/$TESTS/bin/$CONFIG/net10.0/$TESTS.dll"
[[ $ARCH == arm64 ]] && DLL="$PUBLISH/$TESTS"
[[ -f $DLL ]] || { echo "$DLL is missing: build it (BUILD=1)"; exit 2; }

# ---- what runs in the guest (chrooted into GUEST_ROOT, as root; busybox sh on arm64, so POSIX sh) ----
rm -f "$OUT/rc" "$OUT/uname" "$OUT/results.trx" "$OUT/done"
GUEST_LIMIT=$(( TIMEOUT - 5 ))
{
    echo '#!/bin/sh'
    echo 'set -u'
    echo "export PATH=$(dirname "$DOTNET"):/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    echo 'export HOME=/root TMPDIR=/tmp DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_NOLOGO=1 DOTNET_SKIP_FIRST_TIME_EXPERIENCE=1'
    echo 'export DOTNET_CLI_HOME=/tmp/dotnet-home DOTNET_gcServer=0 LANG=C.UTF-8'
    for kv in $TEST_ENV; do printf 'export %q\n' "$kv"; done
    echo 'cd /kernel-out'
    echo 'uname -r >uname; uname -a'
    echo 'echo "KERNEL-RUN: $(uname -r), $(nproc) CPUs, $(grep MemTotal /proc/meminfo), page size $(getconf PAGESIZE 2>/dev/null || echo ?)"'
    echo 'ls /proc/sys/kernel/io_uring_disabled >/dev/null 2>&1 && echo "KERNEL-RUN: io_uring_disabled=$(cat /proc/sys/kernel/io_uring_disabled)"'
    echo 'start=$(date +%s)'
    printf '{ timeout -k 30 %d ' $(( GUEST_LIMIT * 60 ))
    if [[ $ARCH == amd64 ]]; then
        printf 'dotnet vstest %q --logger:%q --logger:%q --ResultsDirectory:/kernel-out' \
            "$DLL" 'console;verbosity=normal' 'trx;LogFileName=results.trx'
        [[ -n $FILTER ]] && printf ' %q' "--TestCaseFilter:$FILTER"
    else
        printf '/tests/%q' "$TESTS"
        for t in $INCLUDE; do printf ' --include %q' "$t"; done
        for t in $EXCLUDE; do printf ' --exclude %q' "$t"; done
        [[ $VERBOSE == 1 ]] && printf ' --trace'
    fi
    printf ' </dev/null; echo $? >rc.tmp; } 2>&1'
    [[ $ARCH == amd64 ]] && printf " | sed -u 's/\\x1b\\[[0-9;]*m//g'"   # vstest's console logger colours its lines
    echo
    echo 'rc=$(cat rc.tmp)'
    echo 'echo "KERNEL-RUN: tests exited with $rc after $(( $(date +%s) - start )) s"'
    echo 'echo $rc >rc'
    echo 'touch done; sync'
} >"$OUT/guest.sh"

# ---- boot ----
if [[ $ARCH == amd64 ]]; then
    qemu=(qemu-system-x86_64 -cpu max)
    APPEND="console=ttyS0"
else
    # pauth-impdef: QEMU's own pointer-authentication hash, much cheaper to emulate than the architected one.
    qemu=(qemu-system-aarch64 -machine virt -cpu max,pauth-impdef=on)
    APPEND="console=ttyAMA0"
fi
APPEND+=" rdinit=/init panic=-1 loglevel=4 mitigations=off"
echo "booting $KVER ($ARCH) under qemu (TCG, $SMP CPUs, $MEM); limit $TIMEOUT min; console: $OUT/console.log"
start=$(date +%s)
qemu+=(-accel tcg -smp "$SMP" -m "$MEM" -nographic -no-reboot -monitor none
      -serial stdio -kernel "$VMLINUZ" -initrd "$INITRD" -append "$APPEND"
      -virtfs "local,path=$GUEST_ROOT,mount_tag=hostroot,security_model=passthrough,readonly=on,multidevs=remap,id=hostroot"
      -virtfs "local,path=$OUT,mount_tag=out,security_model=passthrough,id=out")
[[ $ARCH == arm64 ]] && qemu+=(-virtfs "local,path=$PUBLISH,mount_tag=tests,security_model=passthrough,readonly=on,id=tests")
set +e
if [[ $VERBOSE == 1 ]]; then
    timeout -k 30 "${TIMEOUT}m" "${qemu[@]}" </dev/null 2>&1 | tee "$OUT/console.log"
    qrc=${PIPESTATUS[0]}
else
    timeout -k 30 "${TIMEOUT}m" "${qemu[@]}" </dev/null >"$OUT/console.log" 2>&1
    qrc=$?
fi
set -e
wall=$(( $(date +%s) - start ))

# ---- verdict ----
summary=$(grep -aE '^(Test Run (Successful|Failed|Aborted)|Total tests:|\s+(Passed|Failed|Skipped): [0-9]|\s*Total time:)' "$OUT/console.log" | sed 's/\r$//' | tail -8 || true)
echo "wall time: $(( wall / 60 )) min $(( wall % 60 )) s (qemu exit $qrc); guest uname -r: $(cat "$OUT/uname" 2>/dev/null || echo '?')"
[[ -n $summary ]] && echo "$summary"
grep -aE '^\s+Failed [A-Za-z][^ ]* \[' "$OUT/console.log" | sed 's/\r$//' || true
if [[ ! -f $OUT/done ]]; then
    echo "the guest did not finish (qemu exit $qrc; 124 = timeout): see $OUT/console.log"; tail -20 "$OUT/console.log"; exit 2
fi
rc=$(cat "$OUT/rc")
[[ -n $summary ]] || { echo "the tests printed no summary (exit $rc): see $OUT/console.log"; exit 2; }
echo "results: $OUT (console.log, results.trx)"
[[ $rc == 0 ]] || { echo "tests failed (exit $rc)"; exit 1; }
echo "all selected tests passed"
