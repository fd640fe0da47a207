#!/usr/bin/env bash
# `uroce stat` against a live process and a dead one:
#   uroce_stat_test.sh UROCE_TOOL SOAK_BINARY
# A private UROCE_STATS_DIR; the soak's server (which opens a device and
# waits) is the process watched, then killed with SIGKILL.
set -uo pipefail
UROCE=$1
SOAK=$2
DIR=$(mktemp -d /tmp/uroce-stat-test-XXXXXX)
export UROCE_STATS_DIR=$DIR
PID=
cleanup() {
  [[ -n $PID ]] && kill -9 "$PID" 2>/dev/null
  rm -rf "$DIR"
}
trap cleanup EXIT
fail() { echo "uroce_stat_test: FAILED: $*"; exit 1; }

out=$("$UROCE" stat) || fail "uroce stat with nothing running: exit $?"
grep -q "no uroce device is running" <<<"$out" || fail "nothing running, but: $out"

"$SOAK" --server 127.0.0.1 --ctl-port 0 --qps 1 --mib 1 >/dev/null 2>&1 &
PID=$!
for _ in $(seq 100); do
  [[ -n $(ls "$DIR") ]] && break
  sleep 0.05
done
sleep 0.2  # the first snapshot
out=$("$UROCE" stat --pid "$PID" --all) || fail "uroce stat --pid: exit $?"
echo "$out"
grep -q "^pid $PID  soak-server  127.0.0.1:" <<<"$out" || fail "no line for the server"
for c in tx_packets rx_icrc_bad resp_rkey_errors fault_tx_dropped rx_kernel_drops; do
  grep -q "^  $c " <<<"$out" || fail "counter $c missing"
done
json=$("$UROCE" stat --json) || fail "uroce stat --json: exit $?"
python3 -c 'import json, sys
objs = [json.loads(l) for l in sys.stdin if l.strip()]
assert any(o["pid"] == int(sys.argv[1]) and o["device"] == "soak-server" for o in objs), objs' "$PID" <<<"$json" \
  || fail "bad JSON: $json"
"$UROCE" stat --pid 1 >/dev/null && fail "--pid of a process without a device should fail"

kill -9 "$PID"
wait "$PID" 2>/dev/null
PID=
out=$("$UROCE" stat) || fail "uroce stat after the kill: exit $?"
grep -q "no uroce device is running" <<<"$out" || fail "the dead process is still listed: $out"
[[ -z $(ls "$DIR") ]] || fail "the dead process's file was not removed"
echo "uroce_stat_test: ok"
