#!/bin/sh
# Captures the traffic of the `traffic` test binary on lo with tshark and
# checks every frame with roce_check.py (tshark decode + independent ICRC).
# usage: capture_test.sh [--trace] TRAFFIC_BINARY [UROCE_TOOL]
# --trace: no capture; the NICs write the trace themselves (UROCE_PCAP, GSO
# trains on), and the same checks run on it.
# With the uroce tool and Debian's ibv_xsrq_pingpong, XRC traffic too (an
# unmodified client and server on 127.0.99.8): its XRCETHs must name the SRQs
# the programs report.
# The capture is of what the kernel carries: the shared-memory path is off
# for it (UROCE_SHM=0); --trace is the check of every path.
# Exit 77 (skipped) without tshark or without the right to capture.
set -u
trace=0
if [ "${1:-}" = --trace ]; then
  trace=1
  shift
fi
traffic=$1
tool=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
command -v tshark >/dev/null 2>&1 || { echo "tshark not installed: skipped"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
pcap=$dir/traffic.pcap
if [ $trace -eq 1 ]; then
  UROCE_PCAP=$pcap "$traffic" || { echo "traffic failed ($?)"; exit 1; }
  exec python3 "$here/roce_check.py" "$pcap" --min-frames 60 --expect-opcodes \
0x00,0x01,0x02,0x03,0x04,0x05,0x06,0x07,0x08,0x09,0x0a,0x0b,0x0c,0x0d,0x0e,0x0f,0x10,0x11,0x12,0x13,0x14,0x16,0x17,\
0x20,0x21,0x22,0x23,0x24,0x25,0x26,0x27,0x28,0x29,0x2a,0x2b,0x64,0x65,0x81
fi
tshark -n -q -i lo -f 'udp port 4791 and net 127.0.99.0/24' -c 2000 -a duration:60 -F pcap -w "$pcap" 2>"$dir/err" &
tpid=$!
i=0
until grep -q "Capture started" "$dir/err" 2>/dev/null; do
  i=$((i + 1))
  if [ $i -gt 100 ] || ! kill -0 $tpid 2>/dev/null; then
    cat "$dir/err"
    kill $tpid 2>/dev/null
    if grep -qi "permission\|not permitted\|don't have permission" "$dir/err"; then exit 77; fi
    exit 1
  fi
  sleep 0.1
done
sleep 0.3
# Per-packet frames: with UDP GSO (the default) a capture on the sending host
# shows a train of packets as one frame, as TCP segmentation offload does.
UROCE_SHM=0 UROCE_GSO=0 "$traffic"
rc=$?
xrc_opcodes=
xrc_srqns=
if [ $rc -eq 0 ] && [ -n "$tool" ] && command -v ibv_xsrq_pingpong >/dev/null 2>&1; then
  # A sanitizer build's runtime goes first in the uninstrumented program.
  san=${UROCE_SAN_PRELOAD:+env LD_PRELOAD=$UROCE_SAN_PRELOAD}
  # -s 4096 with MTU 1024: SEND FIRST/MIDDLE/LAST; then 64 B: SEND ONLY.
  for size in 4096 64; do
    port=$((19100 + $$ % 800))
    UROCE_SHM=0 UROCE_GSO=0 timeout 30 "$tool" exec --addr 127.0.99.8 -- $san ibv_xsrq_pingpong -p $port -n 10 \
      -s $size >"$dir/xs.server" 2>&1 &
    spid=$!
    sleep 0.3
    UROCE_SHM=0 UROCE_GSO=0 timeout 30 "$tool" exec --addr 127.0.99.8 -- $san ibv_xsrq_pingpong -p $port -n 10 \
      -s $size 127.0.99.8 >"$dir/xs.client" 2>&1
    crc=$?
    wait $spid
    src=$?
    if [ $crc -ne 0 ] || [ $src -ne 0 ] || ! grep -q '^success$' "$dir/xs.client"; then
      cat "$dir/xs.server" "$dir/xs.client"
      echo "ibv_xsrq_pingpong failed ($src, $crc)"
      rc=1
      break
    fi
    for f in "$dir/xs.server" "$dir/xs.client"; do
      n=$(sed -n 's/^ *local:.*SRQN \([0-9a-f]*\),.*/\1/p' "$f")
      xrc_srqns="$xrc_srqns${xrc_srqns:+,}$n"
    done
  done
  xrc_opcodes=",0xa0,0xa1,0xa2,0xa4,0xb1"
fi
sleep 0.5
kill -INT $tpid 2>/dev/null
wait $tpid 2>/dev/null
[ $rc -ne 0 ] && { echo "traffic failed ($rc)"; exit $rc; }
# RC: SEND FIRST..ONLY_INV, WRITE FIRST..ONLY_IMM, READ request/responses, ACK,
# atomic ACK, CMP_SWAP, FETCH_ADD; UC SEND and WRITE; UD SEND_ONLY(_IMM);
# CNP; XRC SEND FIRST..ONLY and ACK.
python3 "$here/roce_check.py" "$pcap" --min-frames 60 --expect-opcodes \
0x00,0x01,0x02,0x03,0x04,0x05,0x06,0x07,0x08,0x09,0x0a,0x0b,0x0c,0x0d,0x0e,0x0f,0x10,0x11,0x12,0x13,0x14,0x16,0x17,\
0x20,0x21,0x22,0x23,0x24,0x25,0x26,0x27,0x28,0x29,0x2a,0x2b,0x64,0x65,0x81$xrc_opcodes \
${xrc_srqns:+--expect-srqns $xrc_srqns}
