# shellcheck shell=bash
# Sourced by scripts/run and scripts/test: go to the repository root and make sure .venv
# exists and holds the project with its dev extras, at the versions pinned (with hashes)
# in requirements.lock, so every machine gets the same ones. The install is skipped when
# neither requirements.lock nor pyproject.toml changed since the last one (a stamp file
# keyed on their hash). Update the lock with:
#   .venv/bin/pip-compile --extra dev --generate-hashes --allow-unsafe --strip-extras \
#       --no-emit-index-url --no-emit-find-links -o requirements.lock pyproject.toml

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
cd "$ROOT"

find_python() {
  local candidate
  for candidate in "${PYTHON:-}" python3.11 python3; do
    [[ -n "$candidate" ]] || continue
    if command -v "$candidate" >/dev/null 2>&1 &&
      "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  echo "error: Python 3.11 or newer not found; set PYTHON=/path/to/python3.11" >&2
  return 1
}

ensure_venv() {
  if [[ ! -x "$VENV/bin/python" ]]; then
    local python
    python="$(find_python)"
    echo "==> creating $VENV with $python" >&2
    if ! "$python" -m venv "$VENV"; then
      echo "error: could not create the venv; on Debian: apt-get install python3-venv" >&2
      return 1
    fi
  fi

  local hash stamp
  hash="$("$VENV/bin/python" -c \
    'import hashlib, sys; print(hashlib.sha256(b"".join(open(f, "rb").read() for f in sys.argv[1:])).hexdigest()[:16])' \
    requirements.lock pyproject.toml)"
  stamp="$VENV/.installed-$hash"
  if [[ ! -e "$stamp" ]]; then
    echo "==> installing the locked dependencies and the project into .venv (a few minutes the first time)" >&2
    "$VENV/bin/python" -m pip install --disable-pip-version-check --quiet \
      --require-hashes -r requirements.lock
    "$VENV/bin/python" -m pip install --disable-pip-version-check --quiet --no-deps -e .
    rm -f "$VENV"/.installed-*
    touch "$stamp"
  fi

  export VIRTUAL_ENV="$VENV"
  export PATH="$VENV/bin:$PATH"
}
