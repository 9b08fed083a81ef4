# Sourced by scripts/test and scripts/demo: a virtual environment with the project installed.
# PYSPARK_VERSION=4.2.0 scripts/test ... runs against that pyspark release instead, in a
# virtual environment of its own (.venv-pyspark-4.2.0).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
VENV=.venv
PINS=()
if [ -n "${PYSPARK_VERSION:-}" ]; then
  VENV=".venv-pyspark-$PYSPARK_VERSION"
  PINS=("pyspark[connect]==$PYSPARK_VERSION")
fi
if [ -z "${VIRTUAL_ENV:-}" ] || [ -n "${PYSPARK_VERSION:-}" ]; then
  if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
  fi
  # shellcheck disable=SC1091
  . "$VENV/bin/activate"
fi
if ! command -v java >/dev/null 2>&1; then
  echo "Java 17 is needed by Spark: install a JDK 17 (e.g. apt-get install openjdk-17-jre-headless)" >&2
  exit 1
fi
stamp="$VIRTUAL_ENV/.installed-$(cat pyproject.toml | cksum | cut -d' ' -f1)-${PYSPARK_VERSION:-default}"
if [ ! -f "$stamp" ] || [ "${ROCKETMQ_SPARK_REINSTALL:-}" = 1 ]; then
  python -m pip install --quiet --upgrade pip
  python -m pip install --quiet -e ".[test]" ${PINS[@]+"${PINS[@]}"} --config-settings editable_mode=compat
  touch "$stamp"
fi
