# Shared by bin/demo and bin/test: find Python 3.12+ and make .venv with the project in it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

find_python() {
    local candidate
    for candidate in "${PYTHON:-}" python3.13 python3.12 python3; do
        [ -n "$candidate" ] || continue
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    # pyenv installs that are not on PATH
    for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3; do
        if [ -x "$candidate" ]; then
            echo "$candidate"
            return 0
        fi
    done
    echo "memoryapp needs Python 3.12 or newer; set PYTHON=/path/to/python3.12" >&2
    return 1
}

setup_venv() {
    local extras="$1"
    local stamp=".venv/.installed-$extras"
    if [ ! -x .venv/bin/python ]; then
        "$(find_python)" -m venv .venv
    fi
    # Reinstall only when pyproject.toml changed since the last install.
    if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
        .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
        .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[$extras]"
        touch "$stamp"
    fi
}
