#!/usr/bin/env bash
# Starts and stops the PostgreSQL and Redis servers that the store tests use: loopback only,
# non-default ports, a fresh data directory each start, nothing persisted. Shared by .ci/run and
# developers.
#
#   eval "$(scripts/test-servers.sh start)"   # starts both; prints the `export …_URL=…` lines
#   scripts/test-servers.sh stop              # stops both and deletes their data
#
# Needs the PostgreSQL server binaries (initdb, pg_ctl; Debian: `postgresql`) and redis-server
# (Debian: `redis-server`). As root, PostgreSQL runs as the `postgres` user (it refuses root).
# Ports: IDEMKIT_TEST_PG_PORT (55432), IDEMKIT_TEST_REDIS_PORT (56379).
set -euo pipefail

PG_PORT="${IDEMKIT_TEST_PG_PORT:-55432}"
REDIS_PORT="${IDEMKIT_TEST_REDIS_PORT:-56379}"
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

case "${1:-}" in
    start)
        stop_all # a fresh data directory every time
        mkdir -p "$STATE"
        chmod 755 "$STATE"
        start_postgres
        start_redis
        echo "export IDEMKIT_TEST_POSTGRES_URL='postgres://postgres@127.0.0.1:$PG_PORT/postgres'"
        echo "export IDEMKIT_TEST_REDIS_URL='redis://127.0.0.1:$REDIS_PORT/'"
        ;;
    stop)
        stop_all
        log "stopped"
        ;;
    *)
        die "usage: $0 start|stop"
        ;;
esac
