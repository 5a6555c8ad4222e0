# Shared set-up for scripts/demo and scripts/test: a virtualenv with twopc and its extras,
# and a Java check for Spark. Source it; it sets PY and exports PYSPARK_PYTHON.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TWOPC_VENV:-$REPO/.venv}"
EXTRAS="${TWOPC_EXTRAS:-dev}"

find_python() {
  for candidate in python3.13 python3.12 python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      command -v "$candidate"; return 0
    fi
  done
  echo "twopc needs Python 3.11 or newer on PATH" >&2; return 1
}

ensure_java() {
  if command -v java >/dev/null 2>&1; then
    local major
    major=$(java -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print v[1]}')
    if [ "${major:-0}" -ge 17 ]; then return 0; fi
    echo "Spark 4 needs Java 17+, found Java ${major:-?}" >&2
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing a Java 17 runtime with apt-get ..." >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  else
    echo "install Java 17 or newer (e.g. apt-get install openjdk-17-jre-headless) and retry" >&2
    return 1
  fi
}

ensure_venv() {
  local stamp="$VENV/.twopc-installed-$EXTRAS"
  if [ ! -x "$VENV/bin/python" ]; then
    "$(find_python)" -m venv "$VENV"
  fi
  # Reinstall when pyproject.toml changed since the last install (pip caches in ~/.cache/pip).
  if [ ! -f "$stamp" ] || [ "$REPO/pyproject.toml" -nt "$stamp" ]; then
    "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
    "$VENV/bin/python" -m pip install -q -e "$REPO[$EXTRAS]"
    touch "$stamp"
  fi
}

ensure_java
ensure_venv
PY="$VENV/bin/python"
export PYSPARK_PYTHON="$PY"
export PYSPARK_DRIVER_PYTHON="$PY"
export PATH="$VENV/bin:$PATH"
