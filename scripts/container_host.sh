# Sourced by scripts/test: makes this machine able to build task images for the
# container sandbox (harbor_ray/trials/images.py), idempotently. As root (sudo
# otherwise):
#   - Debian's docker.io and debootstrap, installed if missing;
#   - a Docker daemon, started if `docker info` does not answer: vfs storage and no
#     iptables or bridge, the settings that work inside an unprivileged container or VM
#     without kernel modules (its log: $HARBOR_RAY_DOCKERD_LOG);
#   - the base image the tests build from ($HARBOR_RAY_BASE_IMAGE, debian:bookworm-slim),
#     made if the daemon lacks it from a debootstrap of Debian bookworm: there is no
#     registry to pull it from. The debootstrap is kept as a tarball
#     ($HARBOR_RAY_BASE_TARBALL), so a later run only imports it again.
# One line per step, with its time. A daemon already running is left as it is.
set -euo pipefail

HARBOR_RAY_BASE_IMAGE="${HARBOR_RAY_BASE_IMAGE:-debian:bookworm-slim}"
HARBOR_RAY_BASE_TARBALL="${HARBOR_RAY_BASE_TARBALL:-$HOME/.cache/harbor_ray/base/bookworm-minbase.tar}"
HARBOR_RAY_DOCKERD_LOG="${HARBOR_RAY_DOCKERD_LOG:-/tmp/harbor-ray-dockerd.log}"

container_host_sudo=""; [ "$(id -u)" -eq 0 ] || container_host_sudo="sudo"

# Seconds since $1 (an $EPOCHREALTIME), to a tenth.
container_host_since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

container_host_step="$EPOCHREALTIME"
container_host_missing=()
command -v dockerd >/dev/null || container_host_missing+=(docker.io)
command -v debootstrap >/dev/null || container_host_missing+=(debootstrap)
if ((${#container_host_missing[@]})); then
  $container_host_sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $container_host_sudo apt-get install -y -qq \
    "${container_host_missing[@]}" >/dev/null
  echo "container_host: installed ${container_host_missing[*]} ($(container_host_since "$container_host_step") s)" >&2
else
  echo "container_host: docker.io and debootstrap present ($(container_host_since "$container_host_step") s)" >&2
fi

container_host_step="$EPOCHREALTIME"
if $container_host_sudo docker info >/dev/null 2>&1; then
  echo "container_host: the Docker daemon answers ($(container_host_since "$container_host_step") s)" >&2
else
  # setsid: the daemon outlives this script and the tests, for the next run to use;
  # --wait: should it fork, the process we started still lives exactly as long as
  # dockerd, so that one that exits is seen at once (/proc: sudo's is root's to signal).
  $container_host_sudo setsid --wait dockerd --storage-driver=vfs --iptables=false \
    --bridge=none >"$HARBOR_RAY_DOCKERD_LOG" 2>&1 </dev/null &
  container_host_dockerd=$!
  for _ in $(seq 60); do
    $container_host_sudo docker info >/dev/null 2>&1 && break
    [ -d "/proc/$container_host_dockerd" ] || break  # it exited: no use waiting
    sleep 1
  done
  if ! $container_host_sudo docker info >/dev/null 2>&1; then
    echo "container_host: dockerd did not answer within 60 s, or exited; its log ($HARBOR_RAY_DOCKERD_LOG):" >&2
    cat "$HARBOR_RAY_DOCKERD_LOG" >&2
    exit 1
  fi
  echo "container_host: started dockerd, log $HARBOR_RAY_DOCKERD_LOG ($(container_host_since "$container_host_step") s)" >&2
fi

container_host_step="$EPOCHREALTIME"
if $container_host_sudo docker image inspect "$HARBOR_RAY_BASE_IMAGE" >/dev/null 2>&1; then
  echo "container_host: $HARBOR_RAY_BASE_IMAGE present ($(container_host_since "$container_host_step") s)" >&2
else
  if [ ! -f "$HARBOR_RAY_BASE_TARBALL" ]; then
    # Made aside and renamed, so an interrupted run leaves no half tarball to import.
    mkdir -p "$(dirname "$HARBOR_RAY_BASE_TARBALL")"
    container_host_root="$(mktemp -d /tmp/harbor-ray-bookworm.XXXXXX)"
    $container_host_sudo debootstrap --variant=minbase bookworm "$container_host_root" \
      >"$container_host_root.log" 2>&1 || {
      echo "container_host: debootstrap failed; its log ($container_host_root.log):" >&2
      tail -n 30 "$container_host_root.log" >&2
      exit 1
    }
    $container_host_sudo tar --numeric-owner -C "$container_host_root" -c . \
      >"$HARBOR_RAY_BASE_TARBALL.partial"
    mv "$HARBOR_RAY_BASE_TARBALL.partial" "$HARBOR_RAY_BASE_TARBALL"
    $container_host_sudo rm -rf "$container_host_root" "$container_host_root.log"
    echo "container_host: debootstrapped bookworm into $HARBOR_RAY_BASE_TARBALL ($(container_host_since "$container_host_step") s)" >&2
    container_host_step="$EPOCHREALTIME"
  fi
  $container_host_sudo docker import - "$HARBOR_RAY_BASE_IMAGE" \
    <"$HARBOR_RAY_BASE_TARBALL" >/dev/null
  echo "container_host: imported $HARBOR_RAY_BASE_IMAGE from $HARBOR_RAY_BASE_TARBALL ($(container_host_since "$container_host_step") s)" >&2
fi
unset -f container_host_since
unset container_host_sudo container_host_step container_host_missing container_host_root \
  container_host_dockerd
