# shellcheck shell=bash
# PostgreSQL from Debian's packages: a cluster of our own (initdb) in .services/postgres/data,
# run by pg_ctl as the `postgres` system user, on 127.0.0.1:TWOPC_POSTGRES_PORT (15432).
# A postmaster plus one backend per connection: kill takes them all at once, and pause
# (common) stops the postmaster first, then every descendant.

service_unit postgres 20 quick

POSTGRES_PORT=${TWOPC_POSTGRES_PORT:-15432}
PG_DIR="$SERVICES_DIR/postgres"
PG_DATA="$PG_DIR/data"
PG_LOG="$PG_DIR/postgres.log"
PG_RUN="$PG_DIR/run"
PG_BIN=

pg_find_bin() {
    local d
    # shellcheck disable=SC2012  # version directories have plain names
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [[ -x "$d/postgres" && -x "$d/initdb" && -x "$d/pg_ctl" && -x "$d/pg_isready" && -x "$d/psql" ]]; then
            PG_BIN=$d
            return 0
        fi
    done
    return 1
}

pg_user() { system_user postgres /var/lib/postgresql /bin/bash; }

postgres_port() { echo "$POSTGRES_PORT"; }
postgres_pid() { read_pid "$PG_DATA/postmaster.pid"; }
postgres_where() { echo "on 127.0.0.1:$POSTGRES_PORT"; }
postgres_data() { echo "$PG_DATA"; }
postgres_log() { echo "$PG_LOG"; }
postgres_ready() { "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$POSTGRES_PORT" -d postgres -t 2; }

postgres_env() {
    echo "POSTGRES_DSN=postgresql://$DB_USER:$DB_PASSWORD@127.0.0.1:$POSTGRES_PORT/$DB_NAME"
}

postgres_launch() {
    pg_find_bin || { apt_install postgresql; pg_find_bin || die "no PostgreSQL binaries after install"; }
    local user
    user=$(pg_user)
    mkdir -p "$PG_DIR"
    if [[ ! -f "$PG_DIR/.initialized" ]]; then
        log "postgres: creating a new cluster in $PG_DATA"
        rm -rf "$PG_DATA" "$PG_RUN"
        mkdir -p "$PG_DATA" "$PG_RUN"
        [[ $EUID -ne 0 ]] || chown -R "$user" "$PG_DIR"
        chmod 700 "$PG_DATA"
        run_as "$user" "$PG_BIN/initdb" -D "$PG_DATA" -U postgres -E UTF8 --locale=C.UTF-8 \
            --auth-local=trust --auth-host=scram-sha-256 >"$PG_DIR/initdb.log" 2>&1 ||
            { tail_log "$PG_DIR/initdb.log"; die "postgres: initdb failed"; }
        cat >>"$PG_DATA/postgresql.conf" <<EOF

# --- twopc test settings (scripts/services) ---
max_prepared_transactions = 64
max_connections = 100
shared_buffers = 64MB
listen_addresses = '127.0.0.1'
log_min_messages = warning
log_line_prefix = '%m [%p] %u@%d '
EOF
    fi
    [[ $EUID -ne 0 ]] || chown "$user" "$PG_DIR" "$PG_RUN"
    local sockdir=$PG_RUN
    if ((${#sockdir} > 90)); then  # unix socket paths are limited to ~107 bytes
        sockdir=/tmp/twopc-pg-$POSTGRES_PORT
        mkdir -p "$sockdir"
        [[ $EUID -ne 0 ]] || chown "$user" "$sockdir"
    fi
    echo "$sockdir" >"$PG_DIR/socket_dir"
    log "postgres: starting on 127.0.0.1:$POSTGRES_PORT"
    touch "$PG_LOG"
    [[ $EUID -ne 0 ]] || chown "$user" "$PG_LOG"
    run_as "$user" "$PG_BIN/pg_ctl" start -w -t "$START_TIMEOUT" -D "$PG_DATA" -l "$PG_LOG" \
        -o "-p $POSTGRES_PORT -c listen_addresses=127.0.0.1 -k $sockdir -c max_prepared_transactions=${TWOPC_POSTGRES_MAX_PREPARED:-64}" 9>&- >>"$PG_DIR/pg_ctl.log" 2>&1 ||
        { tail_log "$PG_DIR/pg_ctl.log"; tail_log "$PG_LOG"; die "postgres: pg_ctl start failed"; }
}

postgres_initialise() {  # the test role and database, once per cluster
    [[ ! -f "$PG_DIR/.initialized" ]] || return 0
    local sockdir
    sockdir=$(cat "$PG_DIR/socket_dir")
    log "postgres: creating role/database $DB_USER"
    run_as "$(pg_user)" "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$sockdir" -p "$POSTGRES_PORT" \
        -U postgres -d postgres >>"$PG_DIR/initdb.log" 2>&1 <<EOF ||
CREATE ROLE $DB_USER LOGIN CREATEDB PASSWORD '$DB_PASSWORD';
CREATE DATABASE $DB_NAME OWNER $DB_USER;
EOF
        { tail_log "$PG_DIR/initdb.log"; die "postgres: creating the test role failed"; }
    touch "$PG_DIR/.initialized"
}

postgres_stop() {
    local pid
    pid=$(postgres_pid)
    if ! pid_alive "$pid"; then
        log "postgres: not running"
        return 0
    fi
    pg_find_bin || true
    log "postgres: stopping (pid $pid)"
    run_as "$(pg_user)" "$PG_BIN/pg_ctl" stop -D "$PG_DATA" -m fast -w -t 60 9>&- >>"$PG_DIR/pg_ctl.log" 2>&1 ||
        die "postgres: pg_ctl stop failed; see $PG_DIR/pg_ctl.log"
}

postgres_kill() {
    local pid children
    pid=$(postgres_pid)
    if ! pid_alive "$pid"; then
        log "postgres: not running"
        return 0
    fi
    # Kill the postmaster and its backends at the same instant, like a crash of the machine.
    # Stop the postmaster first: a backend it forked between the listing and the kill would
    # outlive it, hold the shared memory and keep every later start from working.
    kill -STOP "$pid" 2>/dev/null || true
    children=$(pgrep -P "$pid" || true)
    log "postgres: SIGKILL postmaster $pid and its children"
    # shellcheck disable=SC2086
    kill -KILL "$pid" $children 2>/dev/null || true
    # shellcheck disable=SC2086
    wait_pid_gone 30 "$pid" $children || die "postgres: processes still alive after SIGKILL"
    wait_port_closed "$POSTGRES_PORT" 10 || true
}
