# Sourced by scripts/test and scripts/demo: a virtual environment with the project installed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
if [ -z "${VIRTUAL_ENV:-}" ]; then
  if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
  fi
  # shellcheck disable=SC1091
  . .venv/bin/activate
fi
if ! command -v java >/dev/null 2>&1; then
  echo "Java 17 is needed by Spark: install a JDK 17 (e.g. apt-get install openjdk-17-jre-headless)" >&2
  exit 1
fi
stamp=".venv/.installed-$(cat pyproject.toml | cksum | cut -d' ' -f1)"
if [ -n "${VIRTUAL_ENV:-}" ] && [ ! -f "$stamp" ] || [ "${ROCKETMQ_SPARK_REINSTALL:-}" = 1 ]; then
  python -m pip install --quiet --upgrade pip
  python -m pip install --quiet -e ".[test]" --config-settings editable_mode=compat
  mkdir -p .venv && touch "$stamp"
fi
