# Sourced by scripts/test and scripts/main: makes a fresh machine ready, idempotently.
# Installs the Debian packages the sandbox and the browser tests need, uv, and the
# locked environment with the CPU engine (on CUDA machines run
# `uv sync --frozen --extra gpu` instead: docs/these-machines.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

missing=()
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v tmux >/dev/null || missing+=(tmux)
# The report's browser tests drive Debian's Chromium through its chromedriver.
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]} (Debian packages)" >&2
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# A `uv` on PATH may not run: a pyenv shim for a uv pip-installed into another Python
# version says "pyenv: uv: command not found". So a uv counts only if it runs, and the
# one a previous bootstrap installed (~/.local/bin) is looked for before installing.
uv_runs() { uv --version >/dev/null 2>&1; }
if ! uv_runs; then
  export PATH="$HOME/.local/bin:$PATH"
  if ! uv_runs; then
    echo "bootstrap: installing uv from PyPI" >&2
    python3 -m pip install --quiet --user uv 2>/dev/null || python3 -m pip install --quiet uv
    if command -v pyenv >/dev/null; then pyenv rehash; fi
    uv_runs || { echo "bootstrap: uv was installed but does not run" >&2; exit 1; }
  fi
fi

# Harbor needs Python >= 3.12. Use the pyenv 3.12 interpreter; never let uv download one.
find_python() {
  if command -v pyenv >/dev/null && pyenv prefix 3.12.1 >/dev/null 2>&1; then
    echo "$(pyenv prefix 3.12.1)/bin/python3.12"; return
  fi
  for candidate in "$HOME/.pyenv/versions/3.12.1/bin/python3.12" "$(command -v python3.12 || true)"; do
    [ -n "$candidate" ] && [ -x "$candidate" ] && { echo "$candidate"; return; }
  done
  echo "bootstrap: no CPython 3.12 found; install it (e.g. 'pyenv install 3.12.1')" >&2
  return 1
}
UV_PYTHON="$(find_python)"
export UV_PYTHON UV_PYTHON_DOWNLOADS=never
uv sync --frozen --extra cpu --quiet
# Every process that imports torch and vLLM (the engine starts four: the Serve replica,
# its ingress, EngineCore and the worker) compiles their ~7,000 modules from source
# again, each time, where PYTHONDONTWRITEBYTECODE is set (it is on these machines, and
# in many container images): about half of the CPU an import of vLLM costs. Without it
# the first process to import a module writes its bytecode and every later one reads
# it; `uv sync --compile-bytecode` instead compiles all ~34,000 modules of the venv up
# front, minutes on a fresh clone, most of them never imported.
unset PYTHONDONTWRITEBYTECODE
# Later `uv run` calls must not re-sync without the engine extra (uv has no default extras).
export UV_NO_SYNC=1
