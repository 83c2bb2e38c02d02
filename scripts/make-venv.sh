#!/usr/bin/env bash
# Create the project's virtual environment at $1 with $PYTHON (default python3), which is only read, never
# installed into. On Debian, `python3 -m venv` needs the python3-venv package: installed here when missing
# and running as root, else a one-line message says what to install.
set -euo pipefail
VENV="${1:?usage: make-venv.sh DIR}"
PYTHON="${PYTHON:-python3}"

command -v "$PYTHON" >/dev/null 2>&1 || { echo "make-venv: $PYTHON not found; install Python 3.11 or newer" >&2; exit 1; }
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || { echo "make-venv: $PYTHON is $("$PYTHON" -V 2>&1); gpu-autoscaler needs Python 3.11 or newer" >&2; exit 1; }

if ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    pkg="python$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')-venv"
    if [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null
    else
        echo "make-venv: $PYTHON cannot create virtual environments; install Debian's $pkg (sudo apt-get install $pkg)" >&2
        exit 1
    fi
fi
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
