# shellcheck shell=bash
# Schema registry: Apicurio Registry from Maven Central (the `all` zip, checked against its
# SHA-1, unpacked into ~/.cache/twopc/apicurio-registry-<version>), Confluent-compatible API
# at http://127.0.0.1:TWOPC_REGISTRY_PORT/apis/ccompat/v7 (18081). Schemas are kept in an H2
# file database under .services/registry/data, so ids survive a restart or a kill.

service_unit registry 40 slow

REGISTRY_PORT=${TWOPC_REGISTRY_PORT:-18081}
APICURIO_VERSION=${TWOPC_APICURIO_VERSION:-2.6.13.Final}
REGISTRY_HEAP=${TWOPC_REGISTRY_HEAP:--Xms64m -Xmx256m}

REGISTRY_DIR="$SERVICES_DIR/registry"
REGISTRY_LOG="$REGISTRY_DIR/registry.log"
REGISTRY_PIDFILE="$REGISTRY_DIR/registry.pid"
REGISTRY_CACHE="$CACHE_DIR/apicurio-registry-$APICURIO_VERSION"
REGISTRY_ZIP_NAME="apicurio-registry-app-$APICURIO_VERSION-all.zip"
REGISTRY_ZIP_URL="$MAVEN_CENTRAL/io/apicurio/apicurio-registry-app/$APICURIO_VERSION/$REGISTRY_ZIP_NAME"
REGISTRY_JAR=

registry_url() { echo "http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7"; }

registry_port() { echo "$REGISTRY_PORT"; }
registry_pid() { read_pid "$REGISTRY_PIDFILE"; }
registry_where() { echo "at $(registry_url)"; }
registry_data() { echo "$REGISTRY_DIR/data"; }
registry_log() { echo "$REGISTRY_LOG"; }
registry_stop() { stop_by_signal registry 30 "$REGISTRY_PIDFILE"; }
registry_kill() { kill_by_signal registry "$REGISTRY_PIDFILE"; }
registry_env() { echo "SCHEMA_REGISTRY_URL=$(registry_url)"; }

registry_ready() {  # the Confluent-compatible API answers and lists the schema types
    "$(python3_bin)" - "$(registry_url)/schemas/types" <<'PY'
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=2) as response:
    sys.exit(0 if b"AVRO" in response.read() else 1)
PY
}

registry_find_jar() {
    local jar
    for jar in "$REGISTRY_CACHE"/*/apicurio-registry-app-*-runner.jar "$REGISTRY_CACHE"/apicurio-registry-app-*-runner.jar; do
        if [[ -f "$jar" && -f "$REGISTRY_CACHE/.unpacked" ]]; then
            REGISTRY_JAR=$jar
            return 0
        fi
    done
    return 1
}

registry_install() {  # download the distribution from Maven Central once, check its SHA-1, unpack
    registry_find_jar && return 0
    need_java
    mkdir -p "$REGISTRY_CACHE"
    local zip="$REGISTRY_CACHE/$REGISTRY_ZIP_NAME"
    log "registry: downloading Apicurio Registry $APICURIO_VERSION (about 140 MB, first time only)"
    download_checked registry "$REGISTRY_ZIP_URL" "$zip"
    log "registry: unpacking into $REGISTRY_CACHE"
    find "$REGISTRY_CACHE" -mindepth 1 -maxdepth 1 ! -name "$REGISTRY_ZIP_NAME" -exec rm -rf {} +
    if command -v unzip >/dev/null; then
        unzip -q "$zip" -d "$REGISTRY_CACHE" || die "registry: unzip of $REGISTRY_ZIP_NAME failed"
    else
        "$(python3_bin)" -m zipfile -e "$zip" "$REGISTRY_CACHE" || die "registry: unpacking $REGISTRY_ZIP_NAME failed"
    fi
    rm -f "$zip"  # the unpacked tree is what we keep
    touch "$REGISTRY_CACHE/.unpacked"
    registry_find_jar || die "registry: no *-runner.jar in $REGISTRY_ZIP_NAME"
}

registry_launch() {
    registry_install
    mkdir -p "$REGISTRY_DIR"
    log "registry: starting Apicurio Registry $APICURIO_VERSION on 127.0.0.1:$REGISTRY_PORT"
    # Schemas are kept in an H2 file database under .services/registry/data (the default is
    # in memory), so ids survive a restart or a kill like a production registry's.
    (
        # Quarkus may write scratch files into its working directory
        cd "$REGISTRY_DIR" || die "registry: cannot enter $REGISTRY_DIR"
        # shellcheck disable=SC2086
        REGISTRY_DATASOURCE_URL="jdbc:h2:file:$REGISTRY_DIR/data/registry_db" \
            setsid nohup java $REGISTRY_HEAP -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
            -Djava.awt.headless=true -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$REGISTRY_PORT" \
            -Dquarkus.datasource.jdbc.initial-size=1 -Dquarkus.datasource.jdbc.min-size=1 \
            -jar "$REGISTRY_JAR" </dev/null >>"$REGISTRY_LOG" 2>&1 9>&- &
        echo $! >"$REGISTRY_PIDFILE"
    )
}
