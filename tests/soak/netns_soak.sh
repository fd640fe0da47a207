#!/usr/bin/env bash
# The soak over real kernel drops: two network namespaces joined by a veth
# pair (MTU 9000), each dropping a share of the RoCEv2 packets it receives
# with iptables' statistic match (nft's numgen if iptables is missing); the
# soak's server runs in one namespace, its client in the other, over UDP.
#
#   tests/soak/netns_soak.sh SOAK_BINARY [MIB_PER_QP [DROP_PROBABILITY [QPS]]]
#   e.g. tests/soak/netns_soak.sh build/tests/soak/soak 1024 0.05   # the full size
#
# Needs root, ip(8) and iptables or nft; exits 77 (ctest: skipped) without
# them.  The namespaces are deleted on every way out.
set -uo pipefail

SOAK=${1:?usage: netns_soak.sh SOAK_BINARY [MIB_PER_QP [DROP_PROBABILITY [QPS]]]}
MIB=${2:-16}
PROB=${3:-0.05}
QPS=${4:-4}

skip() { echo "netns_soak: $* -- skipped"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces, iptables)"
command -v ip >/dev/null || skip "needs ip(8) (iproute2)"
if command -v iptables >/dev/null && iptables -L -n >/dev/null 2>&1; then
  FW=iptables
elif command -v nft >/dev/null; then
  FW=nft
else
  skip "needs iptables or nft"
fi

TAG=$$
NS_A=uroce-soak-a-$TAG
NS_B=uroce-soak-b-$TAG
IF_A=usa$TAG
IF_B=usb$TAG
IF_A=${IF_A:0:15}
IF_B=${IF_B:0:15}
ADDR_A=10.77.0.1
ADDR_B=10.77.0.2
SERVER_PID=

cleanup() {
  [[ -n $SERVER_PID ]] && kill "$SERVER_PID" 2>/dev/null
  ip netns del "$NS_A" 2>/dev/null
  ip netns del "$NS_B" 2>/dev/null
  true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$NS_A" || skip "cannot create network namespaces here"
ip netns add "$NS_B" || skip "cannot create network namespaces here"
ip link add "$IF_A" type veth peer name "$IF_B" || skip "cannot create a veth pair here"
ip link set "$IF_A" netns "$NS_A"
ip link set "$IF_B" netns "$NS_B"
for side in A B; do
  ns=NS_$side ifc=IF_$side addr=ADDR_$side
  ip -n "${!ns}" link set lo up
  ip -n "${!ns}" link set "${!ifc}" mtu 9000 up
  ip -n "${!ns}" addr add "${!addr}/24" dev "${!ifc}"
  if [[ $FW == iptables ]]; then
    ip netns exec "${!ns}" iptables -A INPUT -p udp --dport 4791 \
      -m statistic --mode random --probability "$PROB" -j DROP || skip "iptables statistic match unavailable"
  else
    pct=$(awk -v p="$PROB" 'BEGIN { printf "%d", p * 10000 }')
    ip netns exec "${!ns}" nft -f - <<EOF || skip "nft numgen unavailable"
table inet uroce_soak {
  chain input {
    type filter hook input priority 0;
    udp dport 4791 numgen random mod 10000 < $pct counter drop
  }
}
EOF
  fi
done

echo "netns_soak: $NS_A ($ADDR_A) <-> $NS_B ($ADDR_B), $FW drops $PROB of the UDP 4791 packets each receives"
echo "netns_soak: $QPS QPs x $MIB MiB"
# Each side runs with UROCE_FAULTS off: every loss is the kernel's.  Without
# UDP GSO (UROCE_GSO=0) every RoCEv2 packet is a datagram of its own, so the
# statistic match drops packets one by one; NETNS_SOAK_GSO=1 keeps the GSO
# trains, which the match then drops whole (bursts of loss).
GSO=${NETNS_SOAK_GSO:-0}
echo "netns_soak: UDP GSO $([[ $GSO == 1 ]] && echo on || echo off)"
ip netns exec "$NS_A" env -u UROCE_FAULTS UROCE_GSO="$GSO" "$SOAK" --server "$ADDR_A" --qps "$QPS" --mib "$MIB" &
SERVER_PID=$!
ip netns exec "$NS_B" env -u UROCE_FAULTS UROCE_GSO="$GSO" "$SOAK" --client "$ADDR_B" --peer "$ADDR_A" --qps "$QPS" --mib "$MIB"
client=$?
wait "$SERVER_PID"
server=$?
SERVER_PID=

dropped() {
  if [[ $FW == iptables ]]; then
    ip netns exec "$1" iptables -L INPUT -v -n -x | awk '/DROP/ && /4791/ { print $1; exit }'
  else
    ip netns exec "$1" nft list table inet uroce_soak | awk '/counter packets/ { for (i = 1; i < NF; ++i) if ($i == "packets") { print $(i + 1); exit } }'
  fi
}
da=$(dropped "$NS_A")
db=$(dropped "$NS_B")
echo "netns_soak: the kernel dropped ${da:-?} packets into $NS_A and ${db:-?} into $NS_B"
if [[ $client -ne 0 || $server -ne 0 ]]; then
  echo "netns_soak: FAILED (client $client, server $server)"
  exit 1
fi
if [[ ${da:-0} -eq 0 && ${db:-0} -eq 0 ]]; then
  echo "netns_soak: FAILED: no packet was dropped (the rule did not apply?)"
  exit 1
fi
echo "netns_soak: ok"
