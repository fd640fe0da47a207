#!/usr/bin/env bash
# The two commands of the README:
#
#   ./run.sh demo [options]   build, then `uroce demo`: RDMA between two
#                             processes over RoCEv2 on loopback (options go
#                             to it: --addr, --size, --mtu)
#   ./run.sh test [options]   build, then run the test suite with ctest
#                             (options go to ctest, e.g. -R '^api\.')
#
# On a fresh Debian 12 machine, as root, it first installs what the build
# needs with apt-get; as another user it names what is missing.  Builds in
# ./build (RelWithDebInfo).  Run it again and it only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")"

PACKAGES=(cmake g++ make pkg-config python3 libgtest-dev libgmock-dev libisal-dev libcli11-dev
          tshark iproute2 libibverbs-dev librdmacm-dev)
BUILD_DIR=build

usage() {
  echo "usage: ./run.sh demo [uroce demo options] | ./run.sh test [ctest options]" >&2
  exit 2
}

say() { echo "run.sh: $*"; }

ensure_packages() {
  command -v dpkg-query >/dev/null 2>&1 || return 0  # not Debian: just try to build
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    [[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" == installed ]] || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  if [[ $(id -u) -ne 0 ]]; then
    say "missing packages: ${missing[*]}" >&2
    say "install them as root: apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive  # tshark asks about capture rights otherwise
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
}

# build [target...]: configures once, then builds (everything by default).
build() {
  mkdir -p "$BUILD_DIR"
  local log="$BUILD_DIR/build.log"
  say "building in ./$BUILD_DIR (output in $log)"
  if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
    if ! cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$log" 2>&1; then
      tail -n 40 "$log" >&2
      say "configuring failed (see $log)" >&2
      exit 1
    fi
  fi
  local targets=()
  (($# > 0)) && targets=(--target "$@")
  if ! cmake --build "$BUILD_DIR" -j"$(nproc)" "${targets[@]}" >>"$log" 2>&1; then
    grep -E -A5 'error|Error' "$log" | tail -n 60 >&2 || tail -n 40 "$log" >&2
    say "the build failed (see $log)" >&2
    exit 1
  fi
}

mode="${1:-}"
[[ $# -gt 0 ]] && shift
case "$mode" in
  demo)
    ensure_packages
    build uroce_tool  # the demo needs the tool only, not the test suite
    exec "$BUILD_DIR/tools/uroce/uroce" demo "$@"
    ;;
  test)
    ensure_packages
    build
    exec ctest --test-dir "$BUILD_DIR" --output-on-failure -j2 --timeout 300 "$@"
    ;;
  *) usage ;;
esac
