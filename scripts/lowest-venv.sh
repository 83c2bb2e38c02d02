#!/usr/bin/env bash
# A second virtual environment at $1 holding every direct dependency at the lowest version pyproject.toml
# allows (uv's lowest-direct resolution; their own dependencies resolve as usual), with the project installed
# editable. $PYTHON (default: .venv's) provides uv, a dev dependency, and the interpreter.
set -euo pipefail
VENV="${1:?usage: lowest-venv.sh DIR}"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$REPO_ROOT/.venv/bin/python}"
cd "$REPO_ROOT"
base="$("$PYTHON" -c 'import sys; print(sys._base_executable)')"
rm -rf "$VENV"
"$PYTHON" -m uv venv --quiet --python "$base" "$VENV"
"$PYTHON" -m uv pip install --quiet --python "$VENV/bin/python" --resolution lowest-direct -e '.[dev]'
echo "lowest versions:"

# Every floor must be what got installed: a floor that cannot be installed with the rest is not tested.
"$VENV/bin/python" scripts/floors.py
