#!/usr/bin/env bash
# Regenerates the fuzz seed corpora from tests/data/*.pcap (the corpus directories are
# gitignored; this script is their source):
#   fuzz/corpus/frame_parse/  every frame of every capture (Ethernet, as captured)
#   fuzz/corpus/roce_parse/   the UDP payload (BTH..ICRC) of every UDP/4791 frame
#   fuzz/corpus/pcap_decode/  the capture files themselves
#   fuzz/corpus/iface_rx/     per capture: an interface configured as the receiver of its
#                             first RoCE frame (MAC, IPv4 or IPv6, VLAN), then every frame
#                             as a receive record, a send and a time step (the format is in
#                             fuzz/fuzz_targets/iface_rx.rs)
#   fuzz/corpus/engine_rx_ud/, engine_rx_uc_srq/, engine_rx_mw/
#                             every capture's RoCE packets as engine_rx's records, each
#                             with the control byte that points it at the target's QP of
#                             its transport (and, for the windows, at each remote key in
#                             turn); the formats are in fuzz/fuzz_targets/engine_rx_*.rs
#   fuzz/corpus/cm_parse/     the MAD (after BTH and DETH, before the ICRC) of every UD SEND
#                             ONLY to QP1, from tests/data/cm/*.pcap as well
#   fuzz/corpus/ladder_build/ per capture: its RoCE packets in order as the ladder
#                             builder's records (format in fuzz/fuzz_targets/ladder_build.rs)
#   fuzz/corpus/control_report/ daemon control messages: a process's counter reports (as
#                             daemon::report::messages makes them), a Hello, a Counters
#                             answer
# Seeds are named by the SHA-1 of their contents, as libFuzzer names its own, so
# duplicates collapse. Existing corpus entries (e.g. what fuzzing found) are kept.
# Usage: tools/fuzz-seed.sh   (from anywhere; needs python3)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
mkdir -p fuzz/corpus/frame_parse fuzz/corpus/roce_parse fuzz/corpus/pcap_decode fuzz/corpus/engine_rx fuzz/corpus/oob_records fuzz/corpus/iface_rx fuzz/corpus/ring_consume fuzz/corpus/conform_peer fuzz/corpus/control_report fuzz/corpus/engine_rx_ud fuzz/corpus/engine_rx_uc_srq fuzz/corpus/engine_rx_mw fuzz/corpus/cm_parse fuzz/corpus/ladder_build

python3 - fuzz/corpus tests/data/*.pcap tests/data/cm/*.pcap <<'PY'
import hashlib, os, struct, sys

out, files = sys.argv[1], sys.argv[2:]
ETH, VLANS, IPV4, IPV6, UDP, ROCE_PORT = 1, (0x8100, 0x88a8, 0x9100), 0x0800, 0x86dd, 17, 4791

def save(kind, data):
    path = os.path.join(out, kind, hashlib.sha1(data).hexdigest())
    if os.path.exists(path):
        return 0
    with open(path, "wb") as f:
        f.write(data)
    return 1

def frames(path):
    """(linktype, frame bytes) of a classic pcap file, either byte order, us or ns."""
    b = open(path, "rb").read()
    magic = b[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        e = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        e = ">"
    else:
        sys.exit(f"{path}: not a classic pcap file (magic {magic.hex()})")
    link = struct.unpack(e + "I", b[20:24])[0] & 0x0FFFFFFF
    off = 24
    while off + 16 <= len(b):
        incl = struct.unpack(e + "I", b[off + 8:off + 12])[0]
        off += 16
        yield link, b[off:off + incl]
        off += incl

def udp_payload(f):
    """The UDP payload of an Ethernet frame to port 4791, cut to the IP and UDP lengths."""
    if len(f) < 14:
        return None
    et, off = struct.unpack(">H", f[12:14])[0], 14
    while et in VLANS and len(f) >= off + 4:
        et, off = struct.unpack(">H", f[off + 2:off + 4])[0], off + 4
    if et == IPV4 and len(f) >= off + 20:
        ihl = (f[off] & 0x0F) * 4
        total = struct.unpack(">H", f[off + 2:off + 4])[0]
        if f[off + 9] != UDP:
            return None
        l4 = f[off + ihl:off + total]
    elif et == IPV6 and len(f) >= off + 40:
        plen = struct.unpack(">H", f[off + 4:off + 6])[0]
        if f[off + 6] != UDP:
            return None
        l4 = f[off + 40:off + 40 + plen]
    else:
        return None
    if len(l4) < 8:
        return None
    dport, ulen = struct.unpack(">HH", l4[2:6])
    if dport != ROCE_PORT:
        return None
    return l4[8:ulen]

n = {"frame_parse": 0, "roce_parse": 0, "pcap_decode": 0, "engine_rx": 0, "oob_records": 0,
     "iface_rx": 0,
     "ring_consume": 0, "conform_peer": 0, "control_report": 0,
     "engine_rx_ud": 0, "engine_rx_uc_srq": 0, "engine_rx_mw": 0, "cm_parse": 0,
     "ladder_build": 0}

def is_resp(opc):
    """RC/UC responses (READ responses, ACKs, atomic ACKs) go to the requester, A."""
    return 0x0d <= (opc & 0x1f) <= 0x12

def ctl_ud(opc, i):
    # UD packets alternately to B's UD QP with its Q_Key, to QP1 with the GSI Q_Key, as is.
    if opc >> 5 == 3:
        return (0x0a, 0x14, 0x00)[i % 3]
    return i & 1

def ctl_uc_srq(opc, i):
    if is_resp(opc):
        return 0x80 | 1 | (5 << 1)                 # A's RC, PSN near A's first
    qp = {0: 1, 1: 2, 3: 3}.get(opc >> 5, 0)       # B's RC, UC, UD by transport
    if qp == 2 and i % 2:
        qp = 4                                     # B's second UC QP
    return 0x80 | (qp << 1) | (1 << 4) | (0x40 if qp == 3 else 0)

def ctl_mw(opc, i):
    if is_resp(opc):
        return 0x80 | 1 | (3 << 4)                 # A's RC, PSN near A's first
    qp = {0: 1, 1: 2}.get(opc >> 5, 0)             # B's RC, UC by transport
    return 0x80 | ((1 + i % 7) << 1) | (qp << 4)   # every key in turn

def targeted(packets, ctl):
    return b"".join(struct.pack("<HB", len(p), ctl(p[0], i)) + p for i, p in enumerate(packets))

def iface_header(f):
    """iface_rx's 29-byte header making the interface the receiver of RoCE frame f:
    flags (bit 0 VLAN), VID, MAC, IPv4, IPv6; None if f is not Ethernet RoCE."""
    if udp_payload(f) is None:
        return None
    et, off, vid, flags = struct.unpack(">H", f[12:14])[0], 14, 0, 0
    if et == 0x8100:
        vid, flags = struct.unpack(">H", f[14:16])[0] & 0x0FFF, 1
        et, off = struct.unpack(">H", f[16:18])[0], 18
    v4, v6 = bytes(4), bytes(16)
    if et == IPV4:
        v4 = f[off + 16:off + 20]
    else:
        v6 = f[off + 24:off + 40]
    return bytes([flags]) + struct.pack(">H", vid) + f[0:6] + v4 + v6

def record(op, body):
    return struct.pack("<BH", op, len(body)) + body

# ring_consume: rings as the ring fuzz target lays them out ([mode][tail][head][waiting][data
# area]; src/ring/mod.rs): a few IPv4/IPv6 packets, then the same ring wrapped (a pad entry at
# the end of the 4 KiB data area, the next packet at 0), for pop and pop_batch.
def ring_entry(i, plen, v6):
    bits = 3 if v6 else 4
    src = bytes(range(1, 17)) if v6 else bytes([10, 0, 0, 1]) + bytes(12)
    dst = bytes(range(17, 33)) if v6 else bytes([10, 0, 0, 2]) + bytes(12)
    h = struct.pack("<IHHBBHIHHI", plen, 0x5052, i, bits, 0, i, 0, 49152, 4791, 0) + src + dst
    e = h + bytes((i + k) & 0xFF for k in range(plen))
    return e + bytes(-len(e) % 8)
data = b"".join(ring_entry(i, 20 + 37 * i, i % 2 == 1) for i in range(6))
wrap_pad = 4096 - 4000
tail_entry = ring_entry(9, 100, False)
wrapped = bytearray(4096)
wrapped[:len(tail_entry)] = tail_entry
wrapped[4000:4008] = struct.pack("<IHH", wrap_pad, 0x4150, 0)
for mode in (0x0C, 0x2C, 0x00):
    n["ring_consume"] += save("ring_consume", bytes([mode]) + struct.pack("<QQQ", len(data), 0, 0) + data)
    n["ring_consume"] += save("ring_consume", bytes([mode]) + struct.pack("<QQQ", 4096 + len(tail_entry), 4000, 1) + bytes(wrapped))
# control_report: control messages as JSON (src/daemon/control.rs). Reports as
# daemon::report::messages makes them: the NIC's counters, tx_dropped and the QPs (block 1's
# QPNs are 0x01xxxx), a second message with more QPs; a report with an unknown counter and
# one of a QP outside the block; a Hello; a Counters answer (as `roce-emu counters` reads it).
def cjson(v):
    import json
    return json.dumps(v, separators=(",", ":")).encode()
qp = lambda n, c: {"qpn": 0x010000 | n, "counters": c}
busy = {"sent_pkts": 12800, "rcvd_pkts": 200, "rdma_sends": 0, "acks_sent": 3,
        "duplicate_request": 1, "retransmit_timeouts": 2}
for msg in (
    {"msg": "qp_counters", "report": {"nic": busy, "tx_dropped": 0, "qps": [qp(0x11, busy)]}},
    {"msg": "qp_counters", "report": {"qps": [qp(0x11 + i, {"sent_pkts": i}) for i in range(40)]}},
    {"msg": "qp_counters", "report": {"nic": {"no_such_counter": 1}, "qps": [qp(0x11, {"sent_pkts": "many"})]}},
    {"msg": "qp_counters", "report": {"qps": [{"qpn": 0x020011, "counters": {"sent_pkts": 1}}]}},
    # A process of many QPs: its entry in the answer is cut in pieces, the answer in messages.
    {"msg": "qp_counters", "report": {"qps": [qp(i, busy) for i in range(250)]}},
    {"msg": "hello", "version": 2, "pid": 4242},
    {"msg": "using"},
    {"msg": "counters", "json": {"port": {"kind": "udp", "name": "127.0.36.1", "addrs": ["127.0.36.1"],
        "mac": [2, 0, 0, 0, 0, 1], "mtu": 1500}, "counters": {"rcvd_pkts": 5},
        "processes": [{"pid": 1, "block": 1, "reports": 1, "qps": [qp(0x11, busy)]}], "more": 1}},
    {"msg": "counters_more", "processes": [{"continued": True, "qps": [qp(0x12, busy)]}]},
):
    n["control_report"] += save("control_report", cjson(msg))
# oob_records: the first address record of each exchange in shared/captures (rc_pingpong's
# rc_pingpong_s64 and perftest's write_bw_s4096, rdma-core 44 / perftest 4.5 on rxe).
for rec in (b"0000:000011:9e6004:00000000000000000000ffffc612000c\0",
            b"0000:0001:000011:8db1b9:00000225:000055e9d7deb000:00:00:00:00:00:00:00:00:"
            b"00:00:ff:ff:c6:12:00:0c:00000000:\0"):
    n["oob_records"] += save("oob_records", rec)
# engine_rx: UD datagrams (no capture has one) for B's UD QP 0x12 and its QP1, right and
# wrong Q_Keys, with and without immediate, sizes around the receive buffers (552-576 B).
ud = b""
for dqpn, qkey in ((0x12, 0x1EE7A330), (1, 0x80010000), (0x12, 0x80010000)):
    for op, plen in ((0x64, 64), (0x65, 512), (0x64, 520), (0x64, 0)):
        pad = -plen % 4
        bth = struct.pack(">BBHI", op, pad << 4, 0xFFFF, dqpn) + struct.pack(">I", 7)
        deth = struct.pack(">II", qkey, 0x11)
        imm = struct.pack(">I", 0xABCD) if op == 0x65 else b""
        pkt = bth + deth + imm + bytes(plen + pad) + bytes(4)
        ud += struct.pack("<HB", len(pkt), 0) + pkt
n["engine_rx"] += save("engine_rx", ud)
# engine_rx_ud, engine_rx_uc_srq, engine_rx_mw: packets made here as each target's
# peer would send them (BTH, extension headers, payload, a dummy ICRC: the fuzz build
# skips the ICRC check), the control byte pointing them at the right QP, key and PSN
# (a signed offset in the PSN's low byte from where A's QPs started: the first record
# arrives before any of A's honest packets, so 0 is in sequence).
def bth(opc, psn_lo):
    return bytes([opc, 0, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 0, psn_lo & 0xFF])
def rec(ctl, pkt):
    pkt += bytes(4)
    return struct.pack("<HB", len(pkt), ctl) + pkt
def deth(qkey=0, src=0x11):
    return struct.pack(">II", qkey, src)
def reth(off, ln):
    return struct.pack(">QII", off, 0, ln)
body = lambda ln: bytes((i * 7) & 0xFF for i in range(ln))
# UD: datagrams to B's UD QP (ctl 0x0a) and QP1 (0x14), up to and past the port MTU.
for size in (0, 100, 1024, 1025):
    for ctl in (0x0A, 0x14):
        n["engine_rx_ud"] += save("engine_rx_ud", rec(ctl, bth(0x64, 0) + deth() + body(size)))
        n["engine_rx_ud"] += save("engine_rx_ud", rec(ctl, bth(0x65, 0) + deth() + b"\0\0\0\7" + body(size)))
n["engine_rx_ud"] += save("engine_rx_ud", b"".join(rec((0x0A, 0x14)[i % 2], bth(0x64, 0) + deth() + body(64 * i)) for i in range(12)))
# Eight datagrams past the port MTU to B's UD QP: only the port-MTU rule keeps the last
# from B's largest receive WQE (room for twice the MTU).
n["engine_rx_ud"] += save("engine_rx_ud", b"".join(rec(0x0A, bth(0x64, 0) + deth() + body(1100)) for i in range(8)))
# UC and SRQ: ctl: QP in bits 1-3, the open region's key and address (bit 4), PSN (bit 7).
RC, UC, UD, UC2 = 1 << 1, 2 << 1, 3 << 1, 4 << 1
uc_srq = [
    rec(0x80 | RC, bth(0x04, 0) + body(100)),
    rec(0x80 | RC | 0x10, bth(0x0B, 0) + reth(0x100, 16) + b"\0\0\0\1" + body(16)),
    rec(0x80 | RC | 0x10, bth(0x0C, 0) + reth(0x100, 64)),
    rec(0x80 | RC | 0x10, bth(0x14, 0) + struct.pack(">QIQQ", 0x10, 0, 1, 0)),
    rec(0x80 | UC, bth(0x24, 0) + body(100)),
    rec(0x80 | UC, bth(0x20, 0) + body(256)) + rec(0x80 | UC, bth(0x21, 1) + body(256))
        + rec(0x80 | UC, bth(0x22, 2) + body(10)),
    rec(0x80 | UC | 0x10, bth(0x2A, 0) + reth(0x200, 16) + body(16)),
    rec(0x80 | UC | 0x10, bth(0x2B, 0) + reth(0x200, 16) + b"\0\0\0\2" + body(16)),
    rec(0x80 | UC2, bth(0x24, 0) + body(100)),
    rec(0x40 | UD, bth(0x64, 0) + deth() + body(100)),
    # Twenty datagrams: the SRQ crosses its limit.
    b"".join(rec(0x40 | UD, bth(0x64, 0) + deth() + body(50)) for _ in range(20)),
]
for x in uc_srq:
    n["engine_rx_uc_srq"] += save("engine_rx_uc_srq", x)
# Windows: every key choice (bits 1-3) on B's RC QP (bits 4-5 = 1) and UC QP (2): WRITE,
# READ, FETCH_ADD, SEND with Invalidate, inside the key's range.
for k in range(1, 8):
    for qp, psn, ops in ((1, 0, (0x0A, 0x0C, 0x14, 0x17)), (2, 0, (0x2A,))):
        ctl = 0x80 | (k << 1) | (qp << 4)
        for opc in ops:
            if opc in (0x0A, 0x2A):
                pkt = bth(opc, psn) + reth(0x100, 16) + body(16)
            elif opc == 0x0C:
                pkt = bth(opc, psn) + reth(0x100, 64)
            elif opc == 0x14:
                pkt = bth(opc, psn) + struct.pack(">QIQQ", 0x10, 0, 1, 0)
            else:
                pkt = bth(opc, psn) + b"\0\0\0\0" + body(8)
            n["engine_rx_mw"] += save("engine_rx_mw", rec(ctl, pkt))
for path in files:
    n["pcap_decode"] += save("pcap_decode", open(path, "rb").read())
    # engine_rx: the capture's RoCE packets as records [len u16 LE][direction][bytes],
    # alternating directions, so the engine sees real opcode sequences.
    records = b""
    for link, f in frames(path):
        if link != ETH:
            continue
        n["frame_parse"] += save("frame_parse", f)
        p = udp_payload(f)
        if p is not None:
            n["roce_parse"] += save("roce_parse", p)
            # conform_peer: what a target sends the conformance peer, BTH through ICRC.
            n["conform_peer"] += save("conform_peer", p)
            # cm_parse: UD SEND ONLY (0x64) to QP 1: the MAD after BTH (12) and DETH (8).
            if len(p) >= 24 and p[0] == 0x64 and p[5:8] == b"\0\0\1":
                n["cm_parse"] += save("cm_parse", p[20:-4])
            records += struct.pack("<HB", len(p), len(records) & 1) + p
    if records:
        n["engine_rx"] += save("engine_rx", records[:16384])
        pkts = [p for link, f in frames(path) if link == ETH
                for p in [udp_payload(f)] if p]
        for kind, ctl in (("engine_rx_ud", ctl_ud), ("engine_rx_uc_srq", ctl_uc_srq),
                          ("engine_rx_mw", ctl_mw)):
            n[kind] += save(kind, targeted(pkts, ctl)[:16384])
        # ladder_build: the capture's RoCE packets in order, each as sent by the first
        # sender's address (selector 1: 198.18.0.2 -> .1) or the other's (3: .1 -> .2).
        senders, lb = [], b""
        for link, f in frames(path):
            p = udp_payload(f) if link == ETH else None
            if not p:
                continue
            src = f[26:30] if f[12:14] == b"\x08\x00" else f[22:38]
            if src not in senders:
                senders.append(src)
            lb += struct.pack("<HB", len(p), 1 if senders.index(src) == 0 else 3) + p
        n["ladder_build"] += save("ladder_build", lb[:65536])
    eth = [f for link, f in frames(path) if link == ETH]
    head = next((h for h in map(iface_header, eth) if h is not None), None)
    if head is not None:
        body = b"".join(record(0, f) for f in eth[:64])
        # A send to the neighbour one address up, then 2 s of timers (ARP/ND retries).
        body += record(1, b"\x02" + bytes(27)) + record(2, b"\x08")
        n["iface_rx"] += save("iface_rx", head + body[:16384])
print("fuzz-seed: new seeds " + ", ".join(f"{k} {v}" for k, v in n.items())
      + f" (from {len(files)} captures)")
PY
for d in fuzz/corpus/*/; do
    printf '  %s: %s files\n' "$d" "$(find "$d" -type f ! -name .keep | wc -l)"
done
