#!/usr/bin/env bash
# PostgreSQL for the TechEmpower database scenarios (issue #48): Debian's postgresql package, a cluster of its own in
# DB_DIR listening on 127.0.0.1:DB_PORT only (and a unix socket in DB_DIR), holding TechEmpower's database hello_world:
# user benchmarkdbuser, password benchmarkdbpass, table world (id 1..10,000, randomnumber 1..10,000 at random) and table
# fortune (TechEmpower's 12 fortunes, ids 1-12).
#
#   benchmarks/db/postgres.sh start     installs postgresql with apt-get if missing, creates the cluster (initdb, as the
#                                       postgres user when run as root) and the database if missing, starts the server
#                                       if it is not running, prints the connection string; safe to repeat
#   benchmarks/db/postgres.sh stop      stops the server (the cluster stays in DB_DIR for the next start)
#   benchmarks/db/postgres.sh status    running or not, the rows held, the connection string; exit code 0 if running
#   benchmarks/db/postgres.sh url       the connection string alone (the Kestrel sample's --db)
#   benchmarks/db/postgres.sh ticks     utime+stime of the whole server so far, in clock ticks (getconf CLK_TCK): the
#                                       postmaster, its live children (the backends) and the children it has reaped
#   benchmarks/db/postgres.sh psql ...  psql on hello_world as benchmarkdbuser (over the unix socket)
#   benchmarks/db/postgres.sh destroy   stops the server and deletes DB_DIR
#
# Environment: DB_DIR (default /tmp/iouring-postgres), DB_PORT (default 5433), DB_CPU (a CPU list for taskset, e.g. 1:
# start pins the server there, and every backend it forks inherits it; a server already running is moved there, all
# its processes), DB_POOL (the connection string's Maximum Pool Size, default 64: one per connection of the harness's
# 64-connection scenarios, so no request waits for a pooled connection).
#
#   benchmarks/db/postgres.sh start && dotnet run -c Release --project samples/KestrelSample -- --db "$(benchmarks/db/postgres.sh url)"
#   curl http://127.0.0.1:5000/fortunes
set -Eeuo pipefail
trap 'echo "postgres.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

DB_DIR=${DB_DIR:-/tmp/iouring-postgres}
DB_PORT=${DB_PORT:-5433}
DB_CPU=${DB_CPU:-}
DB_POOL=${DB_POOL:-64}
DATA="$DB_DIR/data"

# The server refuses to run as root: as root every server-side command runs as the package's postgres user.
as_owner() { if ((EUID == 0)); then runuser -u postgres -- "$@"; else "$@"; fi; }

bin_dir() { # the newest installed server's binaries (Debian: /usr/lib/postgresql/VERSION/bin)
    local dir
    dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
    [[ -n $dir && -x $dir/pg_ctl ]] && echo "$dir"
}

install() {
    bin_dir >/dev/null && return
    ((EUID == 0)) || { echo "postgresql is not installed and installing it needs root: apt-get install postgresql" >&2; exit 1; }
    echo "installing postgresql with apt-get" >&2
    apt-get update -qq
    # The package would start Debian's own cluster on 5432: this script runs its own, so that one stays off.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    bin_dir >/dev/null || { echo "apt-get installed postgresql but no /usr/lib/postgresql/*/bin/pg_ctl was found" >&2; exit 1; }
}

running() { [[ -n ${BIN:-} && -f $DATA/postmaster.pid ]] && as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; }
port() { # the running server's port (postmaster.pid's 4th line), else DB_PORT
    if running; then sed -n 4p "$DATA/postmaster.pid"; else echo "$DB_PORT"; fi
}
url() {
    # No Reset On Close: the pool skips DISCARD ALL when a connection goes back (nothing here changes session
    # state), as TechEmpower's aspnetcore entries run it; Max Auto Prepare: the few statements get prepared.
    echo "Host=127.0.0.1;Port=$(port);Database=hello_world;Username=benchmarkdbuser;Password=benchmarkdbpass;Maximum Pool Size=$DB_POOL;No Reset On Close=true;Max Auto Prepare=4;SSL Mode=Disable"
}
psql_as() { # role database args...: psql over the unix socket (trusted locally)
    local role=$1 db=$2
    shift 2
    as_owner "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$DB_DIR" -p "$(port)" -U "$role" -d "$db" "$@"
}

init_cluster() {
    [[ -f $DATA/PG_VERSION ]] && return
    mkdir -p "$DB_DIR"
    ((EUID == 0)) && chown postgres: "$DB_DIR"
    chmod 700 "$DB_DIR"
    # Local (unix socket) connections are trusted, TCP ones need the password, as a client on another machine would.
    as_owner "$BIN/initdb" -D "$DATA" -U postgres -E UTF8 --locale=C --auth-local=trust --auth-host=scram-sha-256 \
        >"$DB_DIR/initdb.log" 2>&1 || { cat "$DB_DIR/initdb.log" >&2; exit 1; }
    # max_connections: every sample server of a harness run holds up to DB_POOL backends; synchronous_commit off as
    # TechEmpower's own PostgreSQL runs it (an update then waits for no WAL flush to disk).
    cat >>"$DATA/postgresql.conf" <<EOF

# benchmarks/db/postgres.sh
listen_addresses = '127.0.0.1'
unix_socket_directories = '$DB_DIR'
max_connections = 512
shared_buffers = 128MB
synchronous_commit = off
EOF
}

start_server() {
    running && return
    local pin=()
    [[ -n $DB_CPU ]] && pin=(taskset -c "$DB_CPU")
    as_owner "${pin[@]}" "$BIN/pg_ctl" -D "$DATA" -l "$DB_DIR/server.log" -o "-p $DB_PORT" -w -t 60 start >/dev/null ||
        { echo "PostgreSQL did not start (port $DB_PORT taken? set DB_PORT):" >&2; tail -20 "$DB_DIR/server.log" >&2; exit 1; }
}

pids() { # the postmaster and its children
    local pm stat p
    pm=$(head -1 "$DATA/postmaster.pid")
    echo "$pm"
    for p in /proc/[0-9]*; do
        { read -r stat <"$p/stat"; } 2>/dev/null || continue   # read: $(<...) of a gone process ends the script
        stat=${stat##*) }
        set -- $stat
        [[ $2 == "$pm" ]] && echo "${p#/proc/}"
    done
    return 0
}

pin_running() { # moves every process of the running server to DB_CPU (backends forked later inherit the postmaster's)
    [[ -z $DB_CPU ]] && return
    local p
    for p in $(pids); do taskset -a -p -c "$DB_CPU" "$p" >/dev/null 2>&1 || true; done
}

ticks() {
    local pm total=0 p stat
    running || { echo "PostgreSQL is not running in $DB_DIR" >&2; exit 1; }
    pm=$(head -1 "$DATA/postmaster.pid")
    for p in $(pids); do
        # read, not $(<...): a backend that exited since pids listed it makes $(<...) end the script under set -e
        { read -r stat <"/proc/$p/stat"; } 2>/dev/null || continue
        stat=${stat##*) }
        set -- $stat
        total=$((total + ${12} + ${13}))                         # utime, stime (fields 14, 15)
        [[ $p == "$pm" ]] && total=$((total + ${14} + ${15}))   # cutime, cstime: the backends that exited
    done
    echo "$total"
}

seed() {
    local have
    have=$(psql_as postgres postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'hello_world'")
    if [[ $have != 1 ]]; then
        psql_as postgres postgres <<'EOF'
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'benchmarkdbuser') THEN
    CREATE ROLE benchmarkdbuser LOGIN PASSWORD 'benchmarkdbpass';
  END IF;
END $$;
CREATE DATABASE hello_world OWNER benchmarkdbuser ENCODING 'UTF8' TEMPLATE template0;
EOF
    fi
    have=$(psql_as benchmarkdbuser hello_world -tAc \
        "SELECT (SELECT count(*) FROM world) || ' ' || (SELECT count(*) FROM fortune)" 2>/dev/null || true)
    [[ $have == "10000 12" ]] && return
    # TechEmpower's data (toolset/databases/postgres/create-postgres.sql), created by the user that owns the database.
    psql_as benchmarkdbuser hello_world <<'EOF'
SET client_encoding = 'UTF8';
SET client_min_messages = warning;
BEGIN;
DROP TABLE IF EXISTS world;
DROP TABLE IF EXISTS fortune;
CREATE TABLE world (id integer NOT NULL PRIMARY KEY, randomnumber integer NOT NULL DEFAULT 0);
INSERT INTO world (id, randomnumber)
SELECT x.id, least(floor(random() * 10000 + 1), 10000) FROM generate_series(1, 10000) AS x(id);
CREATE TABLE fortune (id integer NOT NULL PRIMARY KEY, message varchar(2048) NOT NULL);
INSERT INTO fortune (id, message) VALUES
(1, 'fortune: No such file or directory'),
(2, 'A computer scientist is someone who fixes things that aren''t broken.'),
(3, 'After enough decimal places, nobody gives a damn.'),
(4, 'A bad random number generator: 1, 1, 1, 1, 1, 4.33e+67, 1, 1, 1'),
(5, 'A computer program does what you tell it to do, not what you want it to do.'),
(6, 'Emacs is a nice operating system, but I prefer UNIX. — Tom Christaensen'),
(7, 'Any program that runs right is obsolete.'),
(8, 'A list is only as strong as its weakest link. — Donald Knuth'),
(9, 'Feature: A bug with seniority.'),
(10, 'Computers make very fast, very accurate mistakes.'),
(11, '<script>alert("This should not be displayed in a browser alert box.");</script>'),
(12, 'フレームワークのベンチマーク');
COMMIT;
VACUUM ANALYZE world;
VACUUM ANALYZE fortune;
EOF
}

command=${1:-}
[[ $# -gt 0 ]] && shift
case $command in
    start)
        install
        BIN=$(bin_dir)
        init_cluster
        start_server
        pin_running
        seed
        url ;;
    stop)
        BIN=$(bin_dir) || exit 0
        running && as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
        echo "stopped" ;;
    status)
        BIN=$(bin_dir) || { echo "postgresql is not installed"; exit 1; }
        if running; then
            echo "running in $DB_DIR on 127.0.0.1:$(port), pid $(head -1 "$DATA/postmaster.pid")"
            psql_as benchmarkdbuser hello_world -tAc \
                "SELECT 'world ' || (SELECT count(*) FROM world) || ' rows, fortune ' || (SELECT count(*) FROM fortune) || ' rows'"
            url
        else
            echo "not running (DB_DIR $DB_DIR)"
            exit 1
        fi ;;
    url)
        BIN=$(bin_dir) || BIN=""
        url ;;
    ticks)
        BIN=$(bin_dir)
        ticks ;;
    psql)
        BIN=$(bin_dir)
        psql_as benchmarkdbuser hello_world "$@" ;;
    destroy)
        if BIN=$(bin_dir) && running; then as_owner "$BIN/pg_ctl" -D "$DATA" -m immediate -w stop >/dev/null; fi
        rm -rf "$DB_DIR"
        echo "deleted $DB_DIR" ;;
    *)
        echo "usage: benchmarks/db/postgres.sh start|stop|status|url|ticks|psql|destroy (see its header)" >&2
        exit 2 ;;
esac
