# shellcheck shell=bash disable=SC2034  # the settings here are read by the units
# The shared machinery of scripts/services: the settings every unit reads, logging,
# readiness polling, process control (graceful stop, SIGKILL, pause/resume of whole process
# trees), the lock, apt installs, checked downloads, the table of units and the generic
# steps of every command. scripts/services sources this file, then every unit (at top level:
# a unit's variables are globals), then calls check_units.
#
# A service is one unit, scripts/services.d/<name>.sh. It calls
#
#   service_unit NAME POSITION slow|quick
#
# and defines the functions of UNIT_INTERFACE below as NAME_<op>. POSITION orders the names
# in `env` and in messages; `slow` units (JVMs: seconds to start) are launched first so that
# start-ups overlap; `quick` ones come first in `status` and in the default list of `start`
# and `stop`. Optional: NAME_startup_pid (the process watched while it starts; default
# NAME_pid), NAME_initialise (runs once it answers, before "ready"), `misnamed NAME WRONG`
# (the error for a likely wrong name) and `service_command COMMAND FUNCTION` (a command of
# its own: `scripts/services COMMAND ARGS...` runs `FUNCTION ARGS...`, without the lock).

SERVICES_DIR="${TWOPC_SERVICES_DIR:-$REPO_DIR/.services}"
CACHE_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/twopc
MAVEN_CENTRAL=${TWOPC_MAVEN_CENTRAL:-https://repo1.maven.org/maven2}
START_TIMEOUT=${TWOPC_SERVICES_TIMEOUT:-120}

# the fixed credentials of the SQL services
DB_USER=twopc
DB_PASSWORD=twopc
DB_NAME=twopc

log() { printf '[services] %s\n' "$*" >&2; }
die() { printf '[services] ERROR: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------
# the units

UNIT_INTERFACE=(port pid where data log launch ready stop kill env)
# port: the TCP port on 127.0.0.1      pid: the main process (empty when none)
# where: "on 127.0.0.1:PORT" or "at URL", for the ready and status lines
# data: the data directory status shows  log: the log to show when start fails
# launch: install what is missing and start in the background (the port is known free)
# ready: succeed once it answers real requests    stop / kill: graceful stop / SIGKILL
# env: its KEY=VALUE connection settings

declare -A UNIT_POSITION=() UNIT_SPEED=() MISNAMED=() COMMANDS=()
SERVICES_NAMED=()  # by POSITION: env, messages
ALL_SERVICES=()    # quick ones first: status, default of start and stop
LAUNCH_ORDER=()    # slow ones first: start launches in this order, then waits

service_unit() {  # service_unit NAME POSITION slow|quick
    [[ "$3" == slow || "$3" == quick ]] || die "service_unit $1: speed must be slow or quick"
    UNIT_POSITION[$1]=$2
    UNIT_SPEED[$1]=$3
}

misnamed() { MISNAMED[$2]=$1; }  # misnamed NAME WRONG: `WRONG` is an error naming NAME

service_command() { COMMANDS[$1]=$2; }  # service_command COMMAND FUNCTION

check_units() {  # after the units are sourced: check each one's interface, derive the orders
    local name op speed i j
    for name in "${!UNIT_POSITION[@]}"; do
        for op in "${UNIT_INTERFACE[@]}"; do
            declare -F "${name}_$op" >/dev/null || die "unit $name: no function ${name}_$op"
        done
    done
    SERVICES_NAMED=()
    for name in "${!UNIT_POSITION[@]}"; do  # insertion by POSITION (a handful of units)
        i=${#SERVICES_NAMED[@]}
        while ((i > 0)); do
            j=${SERVICES_NAMED[i - 1]}
            ((UNIT_POSITION[$j] > UNIT_POSITION[$name])) || break
            SERVICES_NAMED[i]=$j
            ((i -= 1))
        done
        SERVICES_NAMED[i]=$name
    done
    ALL_SERVICES=() LAUNCH_ORDER=()
    for speed in quick slow; do
        for name in "${SERVICES_NAMED[@]}"; do
            if [[ "${UNIT_SPEED[$name]}" == "$speed" ]]; then ALL_SERVICES+=("$name"); fi
        done
    done
    for speed in slow quick; do
        for name in "${SERVICES_NAMED[@]}"; do
            if [[ "${UNIT_SPEED[$name]}" == "$speed" ]]; then LAUNCH_ORDER+=("$name"); fi
        done
    done
}

check_names() {
    local s expected
    for s in "$@"; do
        [[ -n "${UNIT_POSITION[$s]:-}" ]] && continue
        [[ -z "${MISNAMED[$s]:-}" ]] || die "unknown service '$s': the service is called ${MISNAMED[$s]}"
        expected=${SERVICES_NAMED[-1]}
        if ((${#SERVICES_NAMED[@]} > 1)); then
            expected=$(printf '%s, ' "${SERVICES_NAMED[@]:0:${#SERVICES_NAMED[@]}-1}")
            expected="${expected%, } or ${SERVICES_NAMED[-1]}"
        fi
        die "unknown service '$s' (expected $expected)"
    done
}

service_dir() { echo "$SERVICES_DIR/$1"; }

# ---------------------------------------------------------------------------------------
# generic helpers

port_open() {  # port_open PORT: something accepts TCP connections on 127.0.0.1:PORT
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

pid_alive() { [[ -n "${1:-}" ]] && kill -0 "$1" 2>/dev/null; }

read_pid() {  # read_pid FILE: the number on the first line of FILE, or nothing
    if [[ -s "$1" ]]; then head -n1 "$1" | tr -dc '0-9'; fi
}

tail_log() {  # tail_log FILE: print the end of a log after a failure
    if [[ -f "$1" ]]; then
        printf '[services] ---- last lines of %s ----\n' "$1" >&2
        tail -n 40 "$1" >&2 || true
        printf '[services] ----\n' >&2
    fi
}

wait_for() {  # wait_for DESCRIPTION TIMEOUT LOGFILE PID_OR_EMPTY CMD...: poll until CMD succeeds
    local what=$1 timeout=$2 logfile=$3 pid=$4
    shift 4
    local deadline=$((SECONDS + timeout))
    while ! "$@" >/dev/null 2>&1; do
        if [[ -n "$pid" ]] && ! pid_alive "$pid"; then
            tail_log "$logfile"
            die "$what: the process ($pid) exited during startup; log: $logfile"
        fi
        if ((SECONDS >= deadline)); then
            tail_log "$logfile"
            die "$what: not ready after ${timeout}s; log: $logfile"
        fi
        sleep 0.3
    done
}

wait_pid_gone() {  # wait_pid_gone TIMEOUT PID...
    local deadline=$((SECONDS + $1)) p
    shift
    for p in "$@"; do
        while pid_alive "$p"; do
            ((SECONDS < deadline)) || return 1
            sleep 0.2
        done
    done
}

wait_port_closed() {  # wait_port_closed PORT TIMEOUT
    local deadline=$((SECONDS + $2))
    while port_open "$1"; do
        ((SECONDS < deadline)) || return 1
        sleep 0.2
    done
}

# Daemons run as an unprivileged user when we are root (postgres refuses to run as root).
run_as() {  # run_as USER CMD...
    local user=$1
    shift
    if [[ $EUID -eq 0 && -n "$user" ]]; then
        runuser -u "$user" -- "$@"
    else
        "$@"
    fi
}

system_user() {  # system_user NAME HOME SHELL: NAME (created if missing) as root, else ourselves
    [[ $EUID -eq 0 ]] || { id -un; return; }
    if ! id "$1" >/dev/null 2>&1; then
        useradd --system --home-dir "$2" --shell "$3" "$1"
    fi
    echo "$1"
}

python3_bin() {
    if [[ -x /usr/bin/python3 ]]; then echo /usr/bin/python3; else command -v python3 || command -v python; fi
}

# ---------------------------------------------------------------------------------------
# installing: apt packages, a JRE, checked downloads from Maven Central

APT_UPDATED=
apt_install() {
    [[ $EUID -eq 0 ]] || die "need root to install $* (or install them yourself: apt-get install $*)"
    command -v apt-get >/dev/null || die "apt-get not found; install $* by hand"
    local own_policy=
    # Debian packages start their service on install; we run our own instances instead.
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        own_policy=1
    fi
    if [[ -z "$APT_UPDATED" ]]; then
        log "apt-get update"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
        APT_UPDATED=1
    fi
    log "apt-get install $*"
    local rc=0
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2 || rc=$?
    [[ -z "$own_policy" ]] || rm -f /usr/sbin/policy-rc.d
    ((rc == 0)) || die "apt-get install $* failed"
}

need_java() { command -v java >/dev/null || apt_install openjdk-17-jre-headless; }

download() {  # download URL FILE: fetch URL into FILE (curl, or python when curl is missing)
    if command -v curl >/dev/null; then
        curl -fsSL --retry 3 --connect-timeout 20 -o "$2" "$1"
    else
        "$(python3_bin)" -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$1" "$2"
    fi
}

download_checked() {  # download_checked NAME URL FILE: URL into FILE, checked against URL.sha1
    local name=$1 url=$2 file=$3 expected actual
    download "$url.sha1" "$file.sha1.tmp" || die "$name: cannot download $url.sha1"
    expected=$(tr -dc '0-9a-f' <"$file.sha1.tmp" | head -c 40)
    rm -f "$file.sha1.tmp"
    ((${#expected} == 40)) || die "$name: $url.sha1 holds no SHA-1"
    download "$url" "$file.tmp" || { rm -f "$file.tmp"; die "$name: cannot download $url"; }
    actual=$(sha1sum "$file.tmp" | cut -d' ' -f1)
    if [[ "$actual" != "$expected" ]]; then
        rm -f "$file.tmp"
        die "$name: SHA-1 mismatch for $(basename "$file") (got $actual, Maven Central says $expected)"
    fi
    mv "$file.tmp" "$file"
}

# ---------------------------------------------------------------------------------------
# the generic steps of every unit

REUSED=3  # what launch_service returns when the service already answers on its port

launch_service() {  # launch_service NAME: start it in the background, or return REUSED
    local name=$1 port
    port=$("${name}_port")
    if port_open "$port"; then
        log "$name: port $port already answers; reusing it"
        return "$REUSED"
    fi
    "${name}_launch"
}

wait_service() {  # wait_service NAME: poll until ready, initialise once, say where it is
    local name=$1 pid
    if declare -F "${name}_startup_pid" >/dev/null; then
        pid=$("${name}_startup_pid")
    else
        pid=$("${name}_pid")
    fi
    wait_for "$name" "$START_TIMEOUT" "$("${name}_log")" "$pid" "${name}_ready"
    if declare -F "${name}_initialise" >/dev/null; then "${name}_initialise"; fi
    log "$name: ready $("${name}_where")"
}

service_status() {  # service_status NAME: one line
    local name=$1 pid port
    pid=$("${name}_pid")
    port=$("${name}_port")
    if pid_alive "$pid"; then
        echo "$name: $(run_state "$pid") (pid $pid) $("${name}_where"), data $("${name}_data")"
    elif port_open "$port"; then
        echo "$name: port 127.0.0.1:$port answers (not started by this checkout)"
    else
        echo "$name: stopped"
    fi
}

stop_by_signal() {  # stop_by_signal NAME SECONDS [PIDFILE]: SIGTERM, SIGKILL after SECONDS
    local name=$1 seconds=$2 pidfile=${3:-} pid
    pid=$("${name}_pid")
    if ! pid_alive "$pid"; then
        log "$name: not running"
        return 0
    fi
    log "$name: stopping (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_pid_gone "$seconds" "$pid"; then
        log "$name: still running after ${seconds}s; SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        wait_pid_gone 10 "$pid" || true
    fi
    [[ -z "$pidfile" ]] || rm -f "$pidfile"
}

kill_by_signal() {  # kill_by_signal NAME [PIDFILE]: SIGKILL the main process, like a crash
    local name=$1 pidfile=${2:-} pid
    pid=$("${name}_pid")
    if ! pid_alive "$pid"; then
        log "$name: not running"
        return 0
    fi
    log "$name: SIGKILL $pid"
    kill -KILL "$pid" 2>/dev/null || true
    wait_pid_gone 30 "$pid" || die "$name: still alive after SIGKILL"
    [[ -z "$pidfile" ]] || rm -f "$pidfile"
    wait_port_closed "$("${name}_port")" 10 || true
}

# ---------------------------------------------------------------------------------------
# pause / resume: a stalled service (SIGSTOP), not a dead one. The kernel still accepts
# connections and buffers requests, so clients hang until their own timeouts fire.

tree_pids() {  # tree_pids PID: PID and all its descendants, parents first
    local p
    echo "$1"
    for p in $(pgrep -P "$1" || true); do tree_pids "$p"; done
}

is_stopped() {  # is_stopped PID: the process is in state T (stopped by a signal)
    local state
    state=$(ps -o stat= -p "$1" 2>/dev/null || true)
    [[ "$state" == T* ]]
}

is_settled() {  # is_settled PID: stopped, or gone (a zombie: a PostgreSQL backend whose
    # client disconnected while the postmaster, which would reap it, was already stopped)
    local state
    state=$(ps -o stat= -p "$1" 2>/dev/null || true)
    [[ -z "$state" || "$state" == T* || "$state" == Z* || "$state" == X* ]]
}

run_state() {  # run_state PID: "paused" or "running", for status
    if is_stopped "$1"; then echo paused; else echo running; fi
}

pause_service() {
    local name=$1 pid pids p
    pid=$("${name}_pid")
    pid_alive "$pid" || die "$name: not running (nothing to pause)"
    # the main process first, so that it forks no new children; then the whole tree, twice
    kill -STOP "$pid"
    pids=$(tree_pids "$pid")
    # shellcheck disable=SC2086
    kill -STOP $pids 2>/dev/null || true
    pids=$(tree_pids "$pid")
    # shellcheck disable=SC2086
    kill -STOP $pids 2>/dev/null || true
    echo "$pids" >"$(service_dir "$name")/paused"
    local deadline=$((SECONDS + 10))
    for p in $pids; do
        while ! is_settled "$p"; do
            ((SECONDS < deadline)) || die "$name: process $p did not stop"
            sleep 0.05
        done
    done
    # shellcheck disable=SC2086,SC2116  # echo joins the pids on one line
    log "$name: paused (SIGSTOP to $(echo "$pids" | wc -w) process(es): $(echo $pids))"
}

resume_service() {  # resume_service NAME [quiet]: SIGCONT what pause stopped; no-op if not paused
    local name=$1 file pid pids=
    file="$(service_dir "$name")/paused"
    [[ -f "$file" ]] && pids=$(<"$file")
    pid=$("${name}_pid")
    # also whatever belongs to the tree now (a child forked while we paused)
    pid_alive "$pid" && pids="$pids $(tree_pids "$pid")"
    if [[ -n "${pids// /}" ]]; then
        # shellcheck disable=SC2086
        kill -CONT $pids 2>/dev/null || true
    fi
    if [[ -f "$file" ]]; then
        rm -f "$file"
        log "$name: resumed (SIGCONT)"
    elif [[ -z "${2:-}" ]]; then
        log "$name: was not paused"
    fi
}

lock() {
    mkdir -p "$SERVICES_DIR"
    exec 9>"$SERVICES_DIR/.lock"
    if ! flock -n 9; then
        log "waiting for another scripts/services run to finish (lock $SERVICES_DIR/.lock)"
        flock 9
    fi
}
