#!/usr/bin/env bash
# The commands of the README:
#
#   ./run.sh demo [options]   build, then `uroce pingpong --local`: seed 000's
#                             ping-pong experiment (SEND/RECV busy-polling and
#                             wait-for-notify, RDMA WRITE/READ signaled and
#                             unsignaled, and TCP) between two processes on
#                             loopback, ranked by round-trip time and CPU
#                             (options go to it: --size, --iters, modes)
#   ./run.sh test [options]   build, then run the test suite with ctest
#                             (options go to ctest, e.g. -R '^api\.'), in
#                             stages, each in its own build directory:
#                               plain  ./build       the whole suite
#                               udp    ./build       unmodified programs with UROCE_SHM=0
#                                      (same-host packets through UDP sockets,
#                                      as the other stages do through shared memory)
#                               asan   ./build-asan  the whole suite under ASan + UBSan
#                               tsan   ./build-tsan  the whole suite under TSan (but
#                                      two single-threaded tests ASan runs)
#                               release ./build-release-clang  a Release build with
#                                      clang (the other stages use g++) of what is
#                                      installed, as a distribution builds it (no
#                                      -Werror), and the install tests
#                               fuzz   ./build-fuzz  the receive-path fuzzer (clang
#                                      libFuzzer + ASan + UBSan) for 60 s
#                             UROCE_TEST_STAGES picks some ("plain asan"),
#                             UROCE_FUZZ_SECONDS sets the fuzzing time
#   ./run.sh test --quick [options]
#                             the fast tier only: the plain build, then the
#                             tests labelled `fast` (in-process, seconds in
#                             all; tests/CMakeLists.txt lists the labels)
#   ./run.sh bench [options]  build, then bench/run: uroce against raw UDP and
#                             kernel TCP, results in bench/results/latest
#
# On a fresh Debian 12 machine, as root, it first installs what the build
# needs with apt-get (bench: also sockperf, iperf3 and gnuplot); as another
# user it names what is missing.  Builds in ./build (RelWithDebInfo).  Run it
# again and it only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")"

# ibverbs-utils, perftest and qperf: unmodified verbs programs the test suite
# runs on uroce's drop-in libibverbs.so.1 (tests/compat); rdmacm-utils (and
# perftest -R, qperf -cm1): rdma_cm programs on its librdmacm.so.1
# (tests/rdmacm).
PACKAGES=(cmake g++ make pkg-config python3 libgtest-dev libgmock-dev libisal-dev libcli11-dev
          tshark iproute2 libibverbs-dev librdmacm-dev ibverbs-utils perftest qperf rdmacm-utils)
# The software users test on RDMA, run unmodified on uroce (tests/ecosystem)
# and whose imports the stand-in provider libraries must satisfy
# (compat.exports): UCX, Open MPI over UCX, libfabric, pyverbs, librpma.
PACKAGES+=(ucx-utils libucx-dev openmpi-bin libopenmpi-dev libfabric-bin python3-pyverbs librpma-dev)
# The soak over real kernel drops (iptables in network namespaces) and the
# receive-path fuzzer (clang's libFuzzer).
PACKAGES+=(iptables clang libclang-rt-14-dev)
# support.SourcesAreClangFormatted: the style of .clang-format, as clang-format 14 applies it.
PACKAGES+=(clang-format)
# What bench/run measures uroce against, and plots with (./run.sh bench).
BENCH_PACKAGES=(sockperf iperf3 gnuplot-nox iputils-ping)
BUILD_DIR=build

usage() {
  echo "usage: ./run.sh demo [uroce pingpong options] | ./run.sh test [ctest options] | ./run.sh bench [bench/run options]" >&2
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

# build_in DIR [target...]: configures DIR once (with the cmake arguments in
# the array CMAKE_ARGS), then builds (everything by default).  Returns 1 on
# failure, with the errors on stderr.
CMAKE_ARGS=()
build_in() {
  local dir=$1
  shift
  mkdir -p "$dir"
  local log="$dir/build.log"
  say "building in ./$dir (output in $log)"
  if [[ ! -f "$dir/CMakeCache.txt" ]]; then
    if ! cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUROCE_WERROR=ON "${CMAKE_ARGS[@]}" >"$log" 2>&1; then
      tail -n 40 "$log" >&2
      say "configuring failed (see $log)" >&2
      return 1
    fi
  fi
  local targets=()
  (($# > 0)) && targets=(--target "$@")
  if ! cmake --build "$dir" -j"$(nproc)" "${targets[@]}" >>"$log" 2>&1; then
    grep -E -A5 'error|Error' "$log" | tail -n 60 >&2 || tail -n 40 "$log" >&2
    say "the build failed (see $log)" >&2
    return 1
  fi
}

# build [target...]: the plain build in $BUILD_DIR; exits on failure.
build() {
  CMAKE_ARGS=()
  build_in "$BUILD_DIR" "$@" || exit 1
}

# The sanitizer stages leave out the tests labelled root: the two-host
# (network namespace) twins of tests they run on loopback, the same library
# code; the plain stage runs them.  They also capture no packets
# (UROCE_COMPAT_CAPTURE=0): the bytes on the wire do not depend on the
# sanitizer, the plain stage checks every program's capture, and tshark and
# the check cost about 2.5 s of two busy CPUs per program test.
# The sanitizer builds: -O1 (faster to build, still fast enough to run), line
# tables for the reports, NDEBUG as in the plain build.
SANITIZER_FLAGS=("-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")

# run_ctest DIR [ctest options]: ctest in DIR, its output also kept in
# DIR/ctest.log (DIR/ctest-$LOG_TAG.log if set) for the summary at the end.
run_ctest() {
  local dir=$1
  shift
  ctest --test-dir "$dir" "$@" 2>&1 | tee "$dir/ctest${LOG_TAG:+-$LOG_TAG}.log"
}

# report_failures STAGE...: for each failed stage, the failed tests and the
# end of each one's output (the last lines are all some CI summaries show).
stage_dir() { if [[ $1 == plain || $1 == udp ]]; then echo "$BUILD_DIR"; else echo "build-$1"; fi; }
stage_log() { if [[ $1 == udp ]]; then echo "$BUILD_DIR/ctest-udp.log"; else echo "$(stage_dir "$1")/ctest.log"; fi; }
report_failures() {
  local st log
  for st in "$@"; do
    log=$(stage_log "$st")
    if [[ -f "$log" ]]; then
      python3 tests/support/ctest_failures.py "$st" "$log"
    else
      say "stage $st: did not get to its tests (see the messages above)"
    fi
  done
}

# run_tests [ctest options]: the stages of ./run.sh test; exit status 0 only
# if every stage passed.
run_tests() {
  local stages=${UROCE_TEST_STAGES:-plain udp asan tsan release fuzz} st failed=() t0
  local ctest_opts=(--output-on-failure -j2 --timeout 600)
  for st in $stages; do
    t0=$SECONDS
    say "stage $st"
    rm -f "$(stage_log "$st")"
    case $st in
      plain)
        CMAKE_ARGS=()
        if build_in "$BUILD_DIR"; then
          run_ctest "$BUILD_DIR" "${ctest_opts[@]}" "$@" || failed+=("$st")
        else
          failed+=("$st")
        fi
        ;;
      udp)
        # The plain build again, with shared memory off (UROCE_SHM=0): every
        # packet between uroce processes of this host through UDP sockets,
        # as between hosts.  Unmodified programs (their frames checked on a
        # capture of lo) and a shared port; the netns tests of the plain
        # stage cross a veth, and so the kernel, in any case.
        CMAKE_ARGS=()
        if build_in "$BUILD_DIR"; then
          UROCE_SHM=0 LOG_TAG=udp run_ctest "$BUILD_DIR" "${ctest_opts[@]}" \
            -R '^(rdmacm\.rping\.|compat\.ibv_(rc|ud)_pingpong\.default$|compat\.ib_write_bw\.default$|compat\.qperf\.rc_bw$|compat\.mckey\.loopback$|compat\.netns\.shared_port$)' \
            "$@" || failed+=("$st")
        else
          failed+=("$st")
        fi
        ;;
      asan)
        CMAKE_ARGS=(-DUROCE_SANITIZE=address,undefined "${SANITIZER_FLAGS[@]}")
        if build_in build-asan; then
          ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
            UROCE_COMPAT_CAPTURE=0 run_ctest build-asan "${ctest_opts[@]}" -LE '^root$' "$@" || failed+=("$st")
        else
          failed+=("$st")
        fi
        ;;
      tsan)
        CMAKE_ARGS=(-DUROCE_SANITIZE=thread "${SANITIZER_FLAGS[@]}")
        if build_in build-tsan; then
          # TSan is 5-15x slower: the soak moves less (same checks).
          # Unmodified programs over RC under TSan used to lose connections
          # to retry exhaustion: the scheduler held a busy-polling peer, NIC
          # and all, back for 300-550 ms, longer than ibv_rc_pingpong's
          # 8 x 67 ms (the retry floor, docs/architecture.md, fixed it).
          # Those tests alone still get one more run, and every such second
          # chance is reported.
          export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp"
          # The registration-cost figures (1 GiB memcpys) and the fuzz
          # corpus replay run one thread: 80 s of two CPUs under TSan with
          # no race to find.  The other stages run them.
          local tsan_skip='^(compat\.reg_mr_cost|fuzz\.rx_replay)$'
          if ! UROCE_SOAK_MIB=2 UROCE_COMPAT_CAPTURE=0 run_ctest build-tsan "${ctest_opts[@]}" -LE '^root$' -E "$tsan_skip" "$@"; then
            local names programs
            names=$(python3 tests/support/ctest_failures.py --names-only tsan build-tsan/ctest.log)
            programs=$(ctest --test-dir build-tsan -N -L '^program$' | sed -n 's/^ *Test *#[0-9]*: //p')
            if [[ -z $names ]] || grep -qvxF -f <(echo "$programs") <<<"$names"; then
              failed+=("$st")
            else
              say "tsan: unmodified programs failed, run again once: $(tr '\n' ' ' <<<"$names")"
              cp build-tsan/ctest.log build-tsan/ctest-first.log
              UROCE_COMPAT_CAPTURE=0 run_ctest build-tsan "${ctest_opts[@]}" -E "$tsan_skip" --rerun-failed || failed+=("$st")
            fi
          fi
          unset TSAN_OPTIONS
        else
          failed+=("$st")
        fi
        ;;
      release)
        # As a distribution builds us: Release (-O3), its own compiler, no
        # -Werror; what `cmake --install` installs, then the install tests
        # (the installed tool, libraries and C++ package) on it.  With clang:
        # every other stage builds with g++ (the plain one -O2, its install
        # tests included), so this one is where clang compiles the lot;
        # with g++ only if clang is missing.
        local cc ccs=clang
        command -v clang++ >/dev/null || ccs=gcc
        for cc in $ccs; do
          CMAKE_ARGS=(-DCMAKE_BUILD_TYPE=Release -DUROCE_WERROR=OFF)
          [[ $cc == clang ]] && CMAKE_ARGS+=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++)
          if build_in "build-release-$cc" uroce_installable; then
            run_ctest "build-release-$cc" "${ctest_opts[@]}" -R '^install\.' || failed+=("$st-$cc")
          else
            failed+=("$st-$cc")
          fi
        done
        ;;
      fuzz)
        if ! command -v clang++ >/dev/null; then
          say "clang++ not found: the fuzz stage is skipped" >&2
          continue
        fi
        CMAKE_ARGS=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DUROCE_FUZZ=ON
                    "-DUROCE_FUZZ_SECONDS=${UROCE_FUZZ_SECONDS:-60}")
        if build_in build-fuzz rx_fuzz; then
          run_ctest build-fuzz "${ctest_opts[@]}" -R '^fuzz\.rx_fuzz$' || failed+=("$st")
        else
          failed+=("$st")
        fi
        ;;
      *)
        say "unknown test stage '$st' (plain, udp, asan, tsan, release, fuzz)" >&2
        failed+=("$st")
        ;;
    esac
    say "stage $st took $((SECONDS - t0)) s"
  done
  if ((${#failed[@]} > 0)); then
    report_failures "${failed[@]}"
    say "FAILED stages: ${failed[*]}" >&2
    return 1
  fi
  say "all stages passed ($stages) in $SECONDS s"
}

mode="${1:-}"
[[ $# -gt 0 ]] && shift
case "$mode" in
  demo)
    ensure_packages
    build uroce_tool  # the experiment needs the tool only, not the test suite
    exec "$BUILD_DIR/tools/uroce/uroce" pingpong --local "$@"
    ;;
  test)
    ensure_packages
    if [[ "${1:-}" == --quick ]]; then
      shift
      build
      t0=$SECONDS
      run_ctest "$BUILD_DIR" --output-on-failure -j2 --timeout 300 -L '^fast$' "$@"
      say "the fast tier took $((SECONDS - t0)) s (build included: $SECONDS s)"
    else
      run_tests "$@"
    fi
    ;;
  bench)
    PACKAGES+=("${BENCH_PACKAGES[@]}")
    ensure_packages
    build uroce_tool
    exec python3 bench/run --build-dir "$BUILD_DIR" --no-build "$@"
    ;;
  *) usage ;;
esac
