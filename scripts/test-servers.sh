#!/usr/bin/env bash
# Starts and stops the PostgreSQL and Redis servers (and PgBouncer in front of that PostgreSQL,
# when installed) that the store tests use: loopback only,
# non-default ports, a fresh data directory each start, nothing persisted. Shared by .ci/run and
# developers.
#
#   eval "$(scripts/test-servers.sh start)"   # starts them; prints the `export …_URL=…` lines
#   eval "$(scripts/test-servers.sh start redis)"   # only Redis (or postgres, pgbouncer)
#   scripts/test-servers.sh stop              # stops them and deletes their data
#
# Needs the PostgreSQL server binaries (initdb, pg_ctl; Debian: `postgresql`) and redis-server
# (Debian: `redis-server`); PgBouncer (Debian: `pgbouncer`) is started when installed.
# `scripts/test.sh`, the README's test command, calls it with the servers that are installed. As root, PostgreSQL and PgBouncer run as
# the `postgres` user (they refuse root).
# Ports: IDEMKIT_TEST_PG_PORT (55432), IDEMKIT_TEST_REDIS_PORT (56379),
# IDEMKIT_TEST_PGBOUNCER_PORT (56432). The state lives under $TMPDIR, so a second set of servers
# (other ports, another TMPDIR) can run beside the first.
set -euo pipefail

PG_PORT="${IDEMKIT_TEST_PG_PORT:-55432}"
REDIS_PORT="${IDEMKIT_TEST_REDIS_PORT:-56379}"
PGBOUNCER_PORT="${IDEMKIT_TEST_PGBOUNCER_PORT:-56432}"
STATE="${TMPDIR:-/tmp}/idemkit-test-servers-$(id -u)"

log() { echo "test-servers: $*" >&2; }
die() { log "$*"; exit 1; }

# The newest installed PostgreSQL server's bin directory (Debian keeps it off PATH).
pg_bindir() {
    local dir
    dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
    if [[ -n "$dir" && -x "$dir/pg_ctl" ]]; then
        echo "$dir"
    elif command -v pg_ctl >/dev/null; then
        dirname "$(command -v pg_ctl)"
    else
        die "PostgreSQL server binaries not found; install them (Debian: apt-get install postgresql)"
    fi
}

# Runs a command as the user PostgreSQL runs as: `postgres` when we are root, else ourselves.
as_pg() {
    if [[ "$(id -u)" == 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

start_postgres() {
    local bin dir="$STATE/pg"
    bin="$(pg_bindir)"
    mkdir -p "$dir"
    [[ "$(id -u)" == 0 ]] && chown postgres: "$dir"
    as_pg "$bin/initdb" -D "$dir/data" -U postgres -A trust --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; die "initdb failed"; }
    as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start -o \
        "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=400" \
        >/dev/null || { cat "$dir/server.log" >&2; die "PostgreSQL did not start"; }
    for _ in $(seq 1 100); do
        if "$bin/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"; then
            log "PostgreSQL ($bin) accepts connections on 127.0.0.1:$PG_PORT"
            return
        fi
        sleep 0.1
    done
    cat "$dir/server.log" >&2
    die "PostgreSQL does not accept connections on 127.0.0.1:$PG_PORT"
}

pgbouncer_bin() {
    command -v pgbouncer 2>/dev/null || { [[ -x /usr/sbin/pgbouncer ]] && echo /usr/sbin/pgbouncer; } || true
}

# PgBouncer in transaction mode in front of the PostgreSQL above: few server connections, so
# clients' statements interleave on them, and no tracking of prepared statements (the
# `max_prepared_statements` of PgBouncer >= 1.21, set to 0; older ones have no such tracking and
# refuse the setting).
start_pgbouncer() {
    local bin dir="$STATE/pgbouncer" version tracking=""
    bin="$(pgbouncer_bin)"
    if [[ -z "$bin" ]]; then
        log "pgbouncer not found: its tests will be skipped (Debian: apt-get install pgbouncer)"
        return 1
    fi
    version="$("$bin" --version | head -n 1 | awk '{print $2}')"
    if [[ "$(printf '%s\n' 1.21 "$version" | sort -V | head -n 1)" == 1.21 ]]; then
        tracking="max_prepared_statements = 0"
    fi
    mkdir -p "$dir"
    printf '"postgres" ""\n' >"$dir/users.txt"
    cat >"$dir/pgbouncer.ini" <<EOF
[databases]
* = host=127.0.0.1 port=$PG_PORT
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PGBOUNCER_PORT
unix_socket_dir =
auth_type = trust
auth_file = $dir/users.txt
pool_mode = transaction
default_pool_size = 4
max_client_conn = 400
$tracking
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
EOF
    [[ "$(id -u)" == 0 ]] && chown -R postgres: "$dir"
    as_pg "$bin" -d -q "$dir/pgbouncer.ini" >"$dir/start.log" 2>&1 \
        || { cat "$dir/start.log" "$dir/pgbouncer.log" >&2 2>/dev/null; die "PgBouncer did not start"; }
    for _ in $(seq 1 100); do
        if "$(pg_bindir)/pg_isready" -q -h 127.0.0.1 -p "$PGBOUNCER_PORT" -U postgres -d postgres; then
            log "PgBouncer $version (transaction mode) accepts connections on 127.0.0.1:$PGBOUNCER_PORT"
            return 0
        fi
        sleep 0.1
    done
    cat "$dir/pgbouncer.log" >&2
    die "PgBouncer does not accept connections on 127.0.0.1:$PGBOUNCER_PORT"
}

start_redis() {
    local dir="$STATE/redis"
    command -v redis-server >/dev/null || die "redis-server not found; install it (Debian: apt-get install redis-server)"
    mkdir -p "$dir"
    redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no \
        --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --dir "$dir" \
        || die "redis-server did not start"
    for _ in $(seq 1 100); do
        if redis_ping; then
            log "Redis accepts connections on 127.0.0.1:$REDIS_PORT"
            return
        fi
        sleep 0.1
    done
    cat "$dir/redis.log" >&2
    die "Redis does not accept connections on 127.0.0.1:$REDIS_PORT"
}

redis_ping() {
    if command -v redis-cli >/dev/null; then
        [[ "$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" == PONG ]]
    else
        (exec 3<>"/dev/tcp/127.0.0.1/$REDIS_PORT" && printf 'PING\r\n' >&3 && read -r -t 1 reply <&3 && [[ "$reply" == +PONG* ]]) 2>/dev/null
    fi
}

stop_all() {
    if [[ -f "$STATE/pgbouncer/pgbouncer.pid" ]]; then
        local bouncer
        bouncer="$(cat "$STATE/pgbouncer/pgbouncer.pid")"
        kill "$bouncer" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$bouncer" 2>/dev/null || break; sleep 0.1; done
    fi
    if [[ -d "$STATE/pg/data" ]]; then
        as_pg "$(pg_bindir)/pg_ctl" -D "$STATE/pg/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    if [[ -f "$STATE/redis/redis.pid" ]]; then
        local pid
        pid="$(cat "$STATE/redis/redis.pid")"
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -rf "$STATE"
}

# `start` with no names starts all three; `start postgres redis` only those (PgBouncer needs the
# PostgreSQL started with it).
case "${1:-}" in
    start)
        shift
        servers=("$@")
        ((${#servers[@]})) || servers=(postgres redis pgbouncer)
        want() { [[ " ${servers[*]} " == *" $1 "* ]]; }
        stop_all # a fresh data directory every time
        mkdir -p "$STATE"
        chmod 755 "$STATE"
        if want postgres; then
            start_postgres
            echo "export IDEMKIT_TEST_POSTGRES_URL='postgres://postgres@127.0.0.1:$PG_PORT/postgres'"
        fi
        if want redis; then
            start_redis
            echo "export IDEMKIT_TEST_REDIS_URL='redis://127.0.0.1:$REDIS_PORT/'"
        fi
        if want pgbouncer && want postgres && start_pgbouncer; then
            echo "export IDEMKIT_TEST_PGBOUNCER_URL='postgres://postgres@127.0.0.1:$PGBOUNCER_PORT/postgres'"
        fi
        ;;
    stop)
        stop_all
        log "stopped"
        ;;
    *)
        die "usage: $0 start [postgres] [redis] [pgbouncer] | stop"
        ;;
esac
