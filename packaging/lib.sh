# Helpers shared by the packaging scripts (scripts/image, scripts/deb,
# scripts/packaging-test). Source it; it sets no shell options itself.

# shellcheck shell=bash

packaging_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Every podman call of these scripts reads this file: runc, explicit ulimits.
export CONTAINERS_CONF="$packaging_root/packaging/containers.conf"

# The command's version, from its Cargo.toml (the package's version line).
cli_version() {
  sed -n 's/^version = "\(.*\)"$/\1/p' "$packaging_root/crates/cli/Cargo.toml" | head -n 1
}

# Installs the Debian packages named unless their commands are all there.
# Usage: ensure_apt COMMAND:PACKAGE...
ensure_apt() {
  local missing=() pair
  for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
  done
  ((${#missing[@]} == 0)) && return 0
  if [[ "$(id -u)" != 0 ]]; then
    echo "missing: ${missing[*]}; install them as root (apt-get install ${missing[*]})" >&2
    return 1
  fi
  echo "installing ${missing[*]} ..." >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2
}

# Seconds since the epoch, with nanoseconds.
now() { date +%s.%N; }

# The seconds from $1 to $2, two decimals.
seconds() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# Runs "$@" until it succeeds or $limit seconds have passed; returns 1 then.
# Usage: wait_until LIMIT COMMAND...
wait_until() {
  local limit="$1" start
  shift
  start="$(now)"
  until "$@"; do
    if (($(awk -v s="$start" -v n="$(now)" -v l="$limit" 'BEGIN { print (n - s > l) }'))); then
      return 1
    fi
    sleep 0.1
  done
}

# A human size of file $1 ("12.3 MiB").
human_size() {
  stat -c %s "$1" | awk '{ printf "%.1f MiB", $1 / 1048576 }'
}

# Makes (once) and prints the name of a minimal Debian bookworm image, for
# installing the .deb in a clean root: `mmdebstrap --variant=minbase`
# (about a minute, needs the Debian mirror) into a tarball cached under
# target/packaging/, then `podman import` (no image registry is needed).
debian_base_image() {
  local tarball="$packaging_root/target/packaging/bookworm-minbase.tar"
  local image=localhost/blob-mutex-test-base:bookworm-minbase
  if [[ ! -s "$tarball" ]]; then
    ensure_apt mmdebstrap:mmdebstrap
    mkdir -p "$(dirname "$tarball")"
    echo "making $tarball with mmdebstrap ..." >&2
    mmdebstrap --quiet --variant=minbase --format=tar bookworm "$tarball.partial" >&2
    mv "$tarball.partial" "$tarball"
    podman rmi --force "$image" >/dev/null 2>&1 || true
  fi
  if ! podman image exists "$image"; then
    podman import --quiet "$tarball" "$image" >/dev/null
  fi
  echo "$image"
}
