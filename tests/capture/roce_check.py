#!/usr/bin/env python3
"""Checks every frame of a pcap as RoCEv2: tshark must decode it as InfiniBand
without errors, and its ICRC must be right by an independent computation
(zlib's CRC-32 over the masked IP/UDP/BTH fields, IBA annex A17.3.3).

usage: roce_check.py FILE.pcap [--min-frames N] [--expect-opcodes A,B,...] [--expect-srqns HEX,...]
Prints a per-opcode count; exits 0 only if every frame passes."""
import collections
import struct
import subprocess
import sys
import zlib

NO_HEURISTICS = ["rpcordma", "iser", "nvme-rdma", "smb_direct", "infiniband_sdp"]


def frames(path):
    data = open(path, "rb").read()
    magic = data[:4]
    if magic not in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d"):
        raise SystemExit(f"{path}: not a classic pcap file")
    end = "<" if magic[0] in (0xD4, 0x4D) else ">"
    link = struct.unpack(end + "I", data[20:24])[0] & 0xFFFFFFF
    off = 24
    while off + 16 <= len(data):
        caplen = struct.unpack(end + "I", data[off + 8:off + 12])[0]
        yield link, data[off + 16:off + 16 + caplen]
        off += 16 + caplen


def l3(link, frame):
    if link == 1:  # Ethernet (what tshark writes for lo)
        return struct.unpack("!H", frame[12:14])[0], frame[14:]
    if link == 113:  # Linux cooked
        return struct.unpack("!H", frame[14:16])[0], frame[16:]
    if link == 276:  # Linux cooked v2
        return struct.unpack("!H", frame[0:2])[0], frame[20:]
    if link in (12, 101, 228, 229):  # raw IP
        return (0x0800 if frame[0] >> 4 == 4 else 0x86DD), frame
    raise SystemExit(f"unsupported link type {link}")


# XRC requests (IBA 9.3.8): the XRCETH follows the BTH (Wireshark 4.0 names
# the XRC opcodes but shows the XRCETH as an unknown header, so it is
# checked here): a reserved byte of 0 and a non-zero SRQ number.
XRC_REQUESTS = set(range(0xA0, 0xAD)) | {0xB3, 0xB4, 0xB6, 0xB7}


def xrceth_srqn(payload):
    """The XRCETH's SRQ number of an XRC request, None if malformed."""
    if len(payload) < 12 + 4 + 4 or payload[12] != 0:
        return None
    srqn = int.from_bytes(payload[13:16], "big")
    return srqn or None


def icrc_ok(ethertype, ip):
    """Returns (ok, opcode, UDP payload) or None for a frame that is not UDP."""
    if ethertype == 0x0800:
        ihl = (ip[0] & 0xF) * 4
        if ip[9] != 17:
            return None
        total = struct.unpack("!H", ip[2:4])[0]
        hdr = bytearray(ip[:ihl])
        hdr[1] = 0xFF                 # TOS
        hdr[8] = 0xFF                 # TTL
        hdr[10:12] = b"\xff\xff"      # header checksum
        udp = ip[ihl:total]
    elif ethertype == 0x86DD:
        if ip[6] != 17:
            return None
        plen = struct.unpack("!H", ip[4:6])[0]
        hdr = bytearray(ip[:40])
        hdr[0] |= 0x0F                # traffic class, high nibble
        hdr[1:4] = b"\xff\xff\xff"    # traffic class low nibble + flow label
        hdr[7] = 0xFF                 # hop limit
        udp = ip[40:40 + plen]
    else:
        return None
    udp_hdr = bytearray(udp[:8])
    udp_hdr[6:8] = b"\xff\xff"        # UDP checksum
    payload = bytearray(udp[8:])
    if len(payload) < 16:
        return False, None, b""
    opcode = payload[0]
    whole = bytes(payload)
    wire = struct.unpack("<I", payload[-4:])[0]
    payload = payload[:-4]
    payload[4] = 0xFF                 # FECN, BECN, resv6
    crc = zlib.crc32(b"\xff" * 8 + bytes(hdr) + bytes(udp_hdr) + bytes(payload)) & 0xFFFFFFFF
    return crc == wire, opcode, whole


def tshark_rows(path):
    cmd = ["tshark", "-n", "-r", path]
    for p in NO_HEURISTICS:
        cmd += ["--disable-protocol", p]
    fields = ["frame.number", "frame.protocols", "_ws.malformed", "_ws.expert.severity", "_ws.col.Info"]
    cmd += ["-T", "fields", "-E", "occurrence=a", "-E", "aggregator=|"]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        yield dict(zip(fields, line.split("\t")))


def main():
    args = sys.argv[1:]
    path = args[0]
    min_frames = int(args[args.index("--min-frames") + 1]) if "--min-frames" in args else 1
    expect = set()
    if "--expect-opcodes" in args:
        expect = {int(x, 0) for x in args[args.index("--expect-opcodes") + 1].split(",")}
    problems = []
    n = 0
    guessed = 0
    for row in tshark_rows(path):
        n += 1
        layers = row["frame.protocols"].split(":")
        if "infiniband" not in layers:
            problems.append(f"frame {row['frame.number']}: not decoded as InfiniBand")
        # tshark guesses a protocol from the first bytes of an RDMA payload
        # (an Ethertype, say) and may find the application's bytes
        # "malformed" as that protocol.  The InfiniBand headers were decoded
        # whole if tshark got to the payload; the ICRC check below still
        # covers every byte.
        payload = layers[layers.index("infiniband") + 1:] if "infiniband" in layers else []
        if payload and payload != ["data"] and (row["_ws.malformed"] or row["_ws.expert.severity"]):
            guessed += 1
            continue
        if row["_ws.malformed"]:
            problems.append(f"frame {row['frame.number']}: malformed: {row['_ws.col.Info']}")
        sev = [int(s, 0) for s in row["_ws.expert.severity"].split("|") if s]
        if any(s >= 0x00600000 for s in sev):  # warning or error
            problems.append(f"frame {row['frame.number']}: tshark expert info: {row['_ws.col.Info']}")
    ops = collections.Counter()
    srqns = set()
    for i, (link, frame) in enumerate(frames(path), 1):
        r = icrc_ok(*l3(link, frame))
        if r is None:
            continue
        ok, op, payload = r
        ops[op] += 1
        if not ok:
            problems.append(f"frame {i}: bad ICRC")
        if op in XRC_REQUESTS:
            srqn = xrceth_srqn(payload)
            if srqn is None:
                problems.append(f"frame {i}: XRC request without a valid XRCETH")
            else:
                srqns.add(srqn)
    print(f"{path}: {n} frames" + (f" ({guessed} with a payload tshark mistook for another protocol)"
                                    if guessed else ""))
    for op, c in sorted((k, v) for k, v in ops.items() if k is not None):
        print(f"  opcode 0x{op:02x}: {c}")
    if srqns:
        print("  XRCETH SRQ numbers: " + ", ".join(f"0x{n:06x}" for n in sorted(srqns)))
    if "--expect-srqns" in args:
        want = {int(x, 16) for x in args[args.index("--expect-srqns") + 1].split(",")}
        if srqns != want:
            problems.append("XRCETH SRQ numbers " + ",".join(f"{n:06x}" for n in sorted(srqns)) +
                            " but the programs reported " + ",".join(f"{n:06x}" for n in sorted(want)))
    missing = expect - set(ops)
    if missing:
        problems.append("opcodes never seen: " + ",".join(f"0x{m:02x}" for m in sorted(missing)))
    if n < min_frames:
        problems.append(f"only {n} frames (< {min_frames})")
    for p in problems:
        print("FAIL", p)
    print("RESULT:", "PASS" if not problems else "FAIL")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
