#!/usr/bin/env bash
# The build steps of the container image (Dockerfile), runnable on any machine into any
# prefix, so that CI builds the same prefix the image holds (tests/test_build_image.py).
#
#   scripts/build_image.sh PREFIX [--python PY] [--extra cpu|gpu]
#       PREFIX/python: the Python 3.12 interpreter PY (its binary, libpython, stdlib),
#       copied so that the prefix carries it; PREFIX/venv: the locked environment
#       (uv.lock, no dev group, harbor_ray installed, not linked to this checkout),
#       made with that interpreter; then the --check below.
#       PY defaults to pyenv's 3.12.1 (as scripts/bootstrap.sh), else python3.12.
#   scripts/build_image.sh --check PREFIX
#       The venv's python runs from PREFIX alone: its interpreter, libpython, stdlib and
#       harbor_ray all resolve inside PREFIX, and `import harbor_ray` works. Copying only
#       the venv across image stages leaves its interpreter link dangling; this fails then.
#   scripts/build_image.sh --system-packages
#       The Debian packages the image needs at run time (apt-get; as root).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

die() { echo "build_image: $*" >&2; exit 1; }

check() {
  local prefix; prefix="$(realpath "$1")"
  local python="$prefix/venv/bin/python"
  if [ -L "$python" ] && [ ! -e "$python" ]; then
    die "$python links to $(readlink "$python"), which does not exist (only the venv copied?)"
  fi
  [ -x "$python" ] || die "no $python"
  # libpython is found through this (the interpreter's own RUNPATH, if any, names the
  # machine it was built on); the image sets the same in its ENV.
  LD_LIBRARY_PATH="$prefix/python/lib" "$python" -I - "$prefix" <<'EOF' \
    || die "the venv's python does not run from $1 alone"
import os, sys
prefix = sys.argv[1]
import harbor_ray
maps = open("/proc/self/maps").read().split()
where = {
    "interpreter": os.path.realpath(sys._base_executable),
    "stdlib": os.path.realpath(os.__file__),
    "harbor_ray": os.path.realpath(harbor_ray.__file__),
    **{"libpython": os.path.realpath(p) for p in maps if "/libpython3" in p},
}
outside = {k: v for k, v in where.items() if not v.startswith(prefix + "/")}
if outside:
    sys.exit(f"outside {prefix}: {outside}")
print(f"build_image: ok, Python {sys.version.split()[0]} and harbor_ray from {prefix}")
EOF
}

system_packages() {
  # bubblewrap, tmux: the local sandbox (docs/agents.md, "Sandboxes"); wget: KubeRay's probes.
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    bubblewrap tmux util-linux wget ca-certificates >/dev/null
  rm -rf /var/lib/apt/lists/*
}

default_python() {
  if command -v pyenv >/dev/null && pyenv prefix 3.12.1 >/dev/null 2>&1; then
    echo "$(pyenv prefix 3.12.1)/bin/python3.12"
  else
    command -v python3.12 || die "no Python 3.12: pass --python"
  fi
}

build() {
  local prefix="$1" python="" extra=cpu
  shift
  while (($#)); do
    case "$1" in
      --python) python="$2"; shift 2 ;;
      --extra) extra="$2"; shift 2 ;;
      *) die "unknown option $1" ;;
    esac
  done
  [ -n "$python" ] || python="$(default_python)"
  [ ! -e "$prefix/venv" ] || die "$prefix/venv exists: build into a fresh prefix"
  mkdir -p "$prefix"
  prefix="$(realpath "$prefix")"

  # The interpreter: where it keeps its stdlib and libpython, read from itself.
  local home version
  home="$("$python" -c 'import sys; print(sys.base_prefix)')"
  version="$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
  [ "$version" = 3.12 ] || die "$python is Python $version, not 3.12"
  mkdir -p "$prefix/python/bin" "$prefix/python/lib"
  cp -a "$(realpath "$python")" "$prefix/python/bin/python3.12"
  ln -s python3.12 "$prefix/python/bin/python3"
  cp -a "$home"/lib/libpython3*.so* "$prefix/python/lib/" 2>/dev/null || true  # static builds have none
  # The stdlib without its tests and without the base's own site-packages.
  (cd "$home/lib" && tar --exclude=python3.12/test --exclude='python3.12/site-packages/*' \
    -cf - python3.12) | tar -xf - -C "$prefix/python/lib"

  # uv: the one on PATH if it runs, else the one bootstrap installs, else from PyPI.
  local uv=uv
  if ! "$uv" --version >/dev/null 2>&1; then
    uv="$HOME/.local/bin/uv"
    "$uv" --version >/dev/null 2>&1 || { "$python" -m pip install --quiet --user uv && uv="$HOME/.local/bin/uv"; }
  fi
  LD_LIBRARY_PATH="$prefix/python/lib" "$uv" venv --quiet --python "$prefix/python/bin/python3.12" \
    "$prefix/venv"
  # UV_PYTHON is set here too: one inherited from the caller (scripts/bootstrap.sh exports
  # pyenv's) would make `uv sync` rebuild the venv on that interpreter instead.
  (cd "$repo" && LD_LIBRARY_PATH="$prefix/python/lib" UV_PROJECT_ENVIRONMENT="$prefix/venv" \
    UV_PYTHON="$prefix/python/bin/python3.12" UV_PYTHON_DOWNLOADS=never "$uv" sync --quiet --frozen --no-dev --no-editable \
    --extra "$extra")
  check "$prefix"
}

case "${1:-}" in
  --check) [ -n "${2:-}" ] || die "usage: --check PREFIX"; check "$2" ;;
  --system-packages) system_packages ;;
  ""|-*) die "usage: build_image.sh PREFIX [--python PY] [--extra cpu|gpu] | --check PREFIX | --system-packages" ;;
  *) build "$@" ;;
esac
