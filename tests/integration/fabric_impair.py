#!/usr/bin/python3
"""netem's loss, reordering, delay and duplication in user space, for kernels built without
sch_netem.

Packets reach it through an iptables NFQUEUE rule (the test sets one up on the fabric bridge
with bridge-nf-call-iptables); for each one it decides, as `tc qdisc ... netem loss L%
reorder R% delay D` does: drop with probability L; otherwise send it at once with
probability R (so it overtakes the ones held back), or hold it for D and send it then.

  fabric_impair.py --queue N [--loss PCT] [--reorder PCT] [--delay-ms MS] [--seed S]
                   [--duplicate PCT --dup-out IFNAME --dup-dst-mac MAC]

--duplicate sends a copy of that share of the packets it lets through (as netem's
duplicate): the copy, with an Ethernet header to --dup-dst-mac, goes out of IFNAME through
an AF_PACKET socket right after the original, so it does not pass the queue again. This needs
the packets' bytes (NFQNL_COPY_PACKET) instead of their ids alone.

Raw netlink (NETLINK_NETFILTER, nfnetlink_queue), standard library only. Runs until SIGTERM
or SIGINT, then prints one JSON line of counters on stdout.
"""

import argparse
import heapq
import json
import random
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN = 1, 2, 3
NFQNL_CFG_CMD_BIND, NFQNL_CFG_CMD_UNBIND = 1, 2
NFQNL_COPY_META = 1  # ids only: no packet bytes cross into user space
NFQNL_COPY_PACKET = 2  # --duplicate: the bytes too
NFQA_PACKET_HDR, NFQA_VERDICT_HDR, NFQA_HWADDR, NFQA_PAYLOAD = 1, 2, 9, 10
ETH_P_IP = 0x0800
NLMSG_ERROR = 2
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NF_DROP, NF_ACCEPT = 0, 1
QUEUE_MAXLEN = 65536  # held packets: 1 ms of a few Gbit/s, far more than the tests send


def nlmsg(msg_type, flags, seq, payload):
    return struct.pack("=IHHII", 16 + len(payload), msg_type, flags, seq, 0) + payload


def nfgenmsg(queue):
    return struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(queue))


def nla(attr_type, data):
    length = 4 + len(data)
    return struct.pack("=HH", length, attr_type) + data + b"\0" * ((4 - length % 4) % 4)


class Queue:
    def __init__(self, num, copy_packets=False):
        self.num = num
        self.payloads = {}  # packet id -> (source MAC, IP packet), with copy_packets
        self.seq = 0
        self.errors = []  # errno of each failed verdict
        # One receive buffer for the whole run: recv(1 MiB) would allocate (and, under
        # MALLOC_PERTURB_, which meson sets, fill) a fresh MiB per call, milliseconds each,
        # and the queue would back up far beyond the delay asked for.
        self.buffer = bytearray(1 << 20)
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        for opt in (33, socket.SO_RCVBUF):  # SO_RCVBUFFORCE (root), else the capped one
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, opt, 16 << 20)
                break
            except OSError:
                continue
        self.sock.bind((0, 0))
        self.config(nla(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_BIND, 0)))
        mode = (0xFFFF, NFQNL_COPY_PACKET) if copy_packets else (0, NFQNL_COPY_META)
        self.config(nla(NFQA_CFG_PARAMS, struct.pack("!IB", *mode)) +
                    nla(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", QUEUE_MAXLEN)))

    def config(self, attrs):
        self.seq += 1
        msg_type = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_CONFIG
        self.sock.send(nlmsg(msg_type, NLM_F_REQUEST | NLM_F_ACK, self.seq,
                             nfgenmsg(self.num) + attrs))
        reply = self.sock.recv(65536)
        length, rtype = struct.unpack_from("=IH", reply)
        if rtype == NLMSG_ERROR:
            err = struct.unpack_from("=i", reply, 16)[0]
            if err != 0:
                raise OSError(-err, f"nfqueue config of queue {self.num} failed")

    def verdict(self, packet_id, verdict):
        msg_type = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_VERDICT
        self.sock.send(nlmsg(msg_type, NLM_F_REQUEST, 0, nfgenmsg(self.num) +
                             nla(NFQA_VERDICT_HDR, struct.pack("!II", verdict, packet_id))))

    def packets(self):
        """Ids of the packets in one recv() worth of netlink messages; failed verdicts (the
        kernel answers them with an error message) are counted in self.errors."""
        n = self.sock.recv_into(self.buffer)
        data = memoryview(self.buffer)[:n]
        ids, at = [], 0
        while at + 16 <= len(data):
            length, msg_type = struct.unpack_from("=IH", data, at)
            if length < 16:
                break
            if msg_type == NLMSG_ERROR and struct.unpack_from("=i", data, at + 16)[0] != 0:
                self.errors.append(-struct.unpack_from("=i", data, at + 16)[0])
            if msg_type == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                a = at + 16 + 4  # nlmsghdr, nfgenmsg
                packet_id, mac, payload = None, b"", None
                while a + 4 <= at + length:
                    alen, atype = struct.unpack_from("=HH", data, a)
                    if alen < 4:
                        break
                    if atype & 0x7FFF == NFQA_PACKET_HDR:
                        packet_id = struct.unpack_from("!I", data, a + 4)[0]
                        ids.append(packet_id)
                    elif atype & 0x7FFF == NFQA_HWADDR:  # be16 length, 2 pad, 8 address
                        mac_len = min(6, struct.unpack_from("!H", data, a + 4)[0])
                        mac = bytes(data[a + 8:a + 8 + mac_len])
                    elif atype & 0x7FFF == NFQA_PAYLOAD:
                        payload = bytes(data[a + 4:a + alen])
                    a += (alen + 3) & ~3
                if packet_id is not None and payload is not None:
                    self.payloads[packet_id] = (mac, payload)
            at += (length + 3) & ~3
        return ids


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queue", type=int, required=True)
    ap.add_argument("--loss", type=float, default=0.0, help="percent of packets dropped")
    ap.add_argument("--reorder", type=float, default=100.0,
                    help="percent sent at once (the rest wait --delay-ms), as netem's reorder")
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--duplicate", type=float, default=0.0,
                    help="percent of the packets let through that are also sent a second time")
    ap.add_argument("--dup-out", help="interface the copies are sent out of")
    ap.add_argument("--dup-dst-mac", help="destination MAC of the copies")
    args = ap.parse_args()
    if args.duplicate > 0 and not (args.dup_out and args.dup_dst_mac):
        ap.error("--duplicate needs --dup-out and --dup-dst-mac")

    rng = random.Random(args.seed)
    q = Queue(args.queue, copy_packets=args.duplicate > 0)
    held = []  # (release time, packet id)
    counts = {"packets": 0, "dropped": 0, "at_once": 0, "delayed": 0}
    dup_sock = None
    if args.duplicate > 0:
        counts["duplicated"] = 0
        dup_sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        dup_sock.bind((args.dup_out, 0))
        dst_mac = bytes.fromhex(args.dup_dst_mac.replace(":", ""))
        own_mac = dup_sock.getsockname()[4][:6]

    def accept(packet_id):
        """Lets a packet through and, with --duplicate, sends a copy after it."""
        q.verdict(packet_id, NF_ACCEPT)
        mac, payload = q.payloads.pop(packet_id, (b"", None))
        if dup_sock is not None and payload is not None and rng.random() * 100 < args.duplicate:
            frame = dst_mac + (mac if len(mac) == 6 else own_mac) + struct.pack("!H", ETH_P_IP)
            try:
                dup_sock.send(frame + payload)
                counts["duplicated"] += 1
            except OSError as e:
                counts["duplicate_errors"] = counts.get("duplicate_errors", 0) + 1
                print(f"fabric_impair: duplicate: {e}", file=sys.stderr)

    stopping = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.append(1))
    print("ready", file=sys.stderr, flush=True)
    while not stopping:
        now = time.monotonic()
        while held and held[0][0] <= now:
            accept(heapq.heappop(held)[1])
        wait = max(0.0, held[0][0] - now) if held else 0.2
        try:
            readable, _, _ = select.select([q.sock], [], [], wait)
        except InterruptedError:
            continue
        if not readable:
            continue
        try:
            ids = q.packets()
        except OSError as e:  # ENOBUFS: the kernel dropped some; they count as loss
            counts["overruns"] = counts.get("overruns", 0) + 1
            print(f"fabric_impair: {e}", file=sys.stderr)
            continue
        now = time.monotonic()
        for packet_id in ids:
            counts["packets"] += 1
            if rng.random() * 100 < args.loss:
                counts["dropped"] += 1
                q.verdict(packet_id, NF_DROP)
                q.payloads.pop(packet_id, None)
            elif args.delay_ms <= 0 or rng.random() * 100 < args.reorder:
                counts["at_once"] += 1
                accept(packet_id)
            else:
                counts["delayed"] += 1
                heapq.heappush(held, (now + args.delay_ms / 1000, packet_id))
    for _, packet_id in held:  # let nothing stay queued in the kernel
        q.verdict(packet_id, NF_ACCEPT)
    if q.errors:
        counts["verdict_errors"] = len(q.errors)
        counts["first_verdict_error"] = q.errors[0]
    print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    main()
