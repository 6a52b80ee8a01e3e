// RoCE v2 over IPv6 (annex A17): QPs whose address vector names an IPv6 GID (GID index 1, the
// vNIC's IPv6 address) send their packets behind an IPv6 header and take only packets from
// that address; UD datagrams go to IPv6 peers and arrive behind a GRH area holding the IPv6
// header. Every frame's ICRC is checked against one computed by hand here with zlib, over the
// masked pseudo-packet.

#include <zlib.h>

#include "tests/unit/rnic/queue_pair_fixture.hh"

namespace jakiro::rnic::test {
namespace {

const ipv6_address ip6_a = {0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1};  // 2001:2::1:1
const ipv6_address ip6_b = {0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2};  // 2001:2::1:2
const ipv6_address ip6_stranger = {0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 9};

constexpr uint32_t eth = 14;
constexpr uint32_t ipv6_header = 40;

// The ICRC as annex A17 defines it, written out here independently of rnic/wire/icrc.cc:
// zlib's CRC-32 over eight 0xFF bytes and the IPv6 packet with traffic class, flow label, hop
// limit, UDP checksum and BTH byte 4 set to ones, up to the ICRC.
uint32_t icrc_by_hand(const std::vector<uint8_t>& frame) {
    std::vector<uint8_t> masked(8, 0xFF);
    masked.insert(masked.end(), frame.begin() + eth, frame.end() - 4);
    uint8_t* ip = masked.data() + 8;
    ip[0] |= 0x0F;
    ip[1] = ip[2] = ip[3] = 0xFF;
    ip[7] = 0xFF;
    ip[ipv6_header + 6] = ip[ipv6_header + 7] = 0xFF;
    ip[ipv6_header + 8 + 4] = 0xFF;
    return static_cast<uint32_t>(crc32(0, masked.data(), static_cast<uInt>(masked.size())));
}

uint32_t stored_icrc(const std::vector<uint8_t>& frame) {
    const uint8_t* p = frame.data() + frame.size() - 4;
    return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

class RoceOverIpv6Test : public QueuePairTest {
  protected:
    RoceOverIpv6Test() { vnic_ip6 = {ip6_a, ip6_b}; }

    void connect_both_ipv6(uint8_t tc = 0, uint32_t flow_label = 0, uint8_t hop_limit = 64) {
        connect_by(a, b, av_to_ipv6(ip6_b, tc, flow_label, hop_limit));
        connect_by(b, a, av_to_ipv6(ip6_a, tc, flow_label, hop_limit));
    }
};

TEST_F(RoceOverIpv6Test, RcWritesReadsAndSendsTravelBehindIpv6HeadersWithTheAvsGrhFields) {
    connect_both_ipv6(0xB8, 0xABCDE, 17);
    fill(a, 0, 8192, 1);
    fill(b, 65536, 4096, 2);
    b.post_recv(7, 131072, 4096);
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), 8192, a.mr, b.iova(0), b.mr));
    a.post_send(wqe(2, IBV_WR_RDMA_READ, a.iova(16384), 4096, a.mr, b.iova(65536), b.mr));
    a.post_send(wqe(3, IBV_WR_SEND, a.iova(0), 3000, a.mr));
    std::vector<std::vector<uint8_t>> seen;
    run(50, 10'000, [&](const test_wire::frame& f) {
        seen.push_back(f.bytes);
        return true;
    });
    expect_sends_complete(a, {1, 2, 3});
    proto::cqe c{};
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(c.byte_len, 3000u);
    EXPECT_TRUE(same(a, 0, b, 0, 8192));
    EXPECT_TRUE(same(b, 65536, a, 16384, 4096));
    EXPECT_TRUE(same(a, 0, b, 131072, 3000));

    ASSERT_FALSE(seen.empty());
    for (const auto& f : seen) {
        ASSERT_GE(f.size(), eth + ipv6_header + 8 + 12 + 4);
        EXPECT_EQ(f[12], 0x86);
        EXPECT_EQ(f[13], 0xDD);
        const uint8_t* ip = f.data() + eth;
        EXPECT_EQ(ip[0] >> 4, 6);
        const uint8_t tc = static_cast<uint8_t>((ip[0] << 4) | (ip[1] >> 4));
        EXPECT_EQ(tc, 0xB8 | 0x02) << "the AV's traffic class, ECN-capable";
        EXPECT_EQ(((ip[1] & 0x0Fu) << 16) | (ip[2] << 8) | ip[3], 0xABCDEu) << "flow label";
        EXPECT_EQ(ip[6], 17) << "UDP right after the IPv6 header";
        EXPECT_EQ(ip[7], 17) << "the AV's hop limit";
        EXPECT_EQ((ip[4] << 8) | ip[5], f.size() - eth - ipv6_header) << "payload length";
        const uint8_t* udp = ip + ipv6_header;
        EXPECT_EQ((udp[2] << 8) | udp[3], 4791);
        EXPECT_EQ((udp[4] << 8) | udp[5], f.size() - eth - ipv6_header);
        const bool from_a = std::equal(ip + 8, ip + 24, ip6_a.begin());
        EXPECT_TRUE(from_a || std::equal(ip + 8, ip + 24, ip6_b.begin()));
        EXPECT_TRUE(std::equal(ip + 24, ip + 40, (from_a ? ip6_b : ip6_a).begin()));
        EXPECT_EQ(stored_icrc(f), icrc_by_hand(f));
    }
}

// DHTB's classes (qos/rdma_class.hh): RoCE v2 over IPv6 is the rdma class both ways, charged
// as its frames are on the wire, 40-byte IPv6 header included.
TEST_F(RoceOverIpv6Test, RcOverIpv6IsTheRdmaClassChargedWithItsIpv6HeaderBothWays) {
    connect_both_ipv6();
    qos::vnic_qos roomy{};
    roomy.rate_bps = 400'000'000'000;
    qos::ingress_meter meter_b(roomy, now);
    wire.meters[1] = &meter_b;
    wire.meter_fabric = true;
    fill(a, 0, 8192, 5);
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), 8192, a.mr, b.iova(0), b.mr));
    uint64_t to_b_frames = 0, to_b_charged = 0, from_a_bytes = 0;
    run(50, 10'000, [&](const test_wire::frame& f) {
        if (f.from == 0) {
            ++to_b_frames;
            to_b_charged += qos::charged_bytes(static_cast<uint32_t>(f.bytes.size()));
            from_a_bytes += f.bytes.size();
            EXPECT_EQ(f.bytes[14] >> 4, 6) << "an IPv6 frame";
        }
        return true;
    });
    expect_sends_complete(a, {1});
    ASSERT_GT(to_b_frames, 0u);
    const auto rdma = meter_b.counters(qos::traffic_class::rdma);
    EXPECT_EQ(rdma.packets, to_b_frames) << "every packet b received met its rdma class";
    EXPECT_EQ(rdma.bytes, to_b_charged);
    EXPECT_EQ(meter_b.counters(qos::traffic_class::tcp).packets, 0u);
    EXPECT_EQ(wire.admitted_bytes[0], from_a_bytes)
        << "a asked its rdma grant for each frame it sent, IPv6 header included";
}

TEST_F(RoceOverIpv6Test, RcOverIpv6RecoversFromLossAndReordering) {
    connect_both_ipv6();
    reorder = true;
    fill(a, 0, 262144, 3);
    for (uint64_t i = 0; i < 8; ++i) {
        a.post_send(
            wqe(i, IBV_WR_RDMA_WRITE, a.iova(i * 32768), 32768, a.mr, b.iova(i * 32768), b.mr));
    }
    std::mt19937 rng(GetParamSeed());
    // 5 % of the frames lost, both ways, ACKs included, for long enough (virtual time) for ACK
    // timeouts.
    for (int round = 0; round < 400; ++round) {
        run(10, 100'000, [&](const test_wire::frame&) { return rng() % 100 >= 5; });
    }
    expect_sends_complete(a, {0, 1, 2, 3, 4, 5, 6, 7});
    const std::optional<qp_report> r = report_of(eng.report(), a);
    ASSERT_TRUE(r.has_value());
    EXPECT_GT(r->retransmitted, 0u) << "the losses were recovered by going back";
    EXPECT_TRUE(same(a, 0, b, 0, 262144));
}

// The RCFT holds for IPv6 as for IPv4: the connected peer's address, and no other, gets in.
TEST_F(RoceOverIpv6Test, APacketFromAnotherIpv6SourceIsNotTheConnectedPeersAndIsDropped) {
    connect_both_ipv6();
    fill(a, 0, 64, 4);
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), 64, a.mr, b.iova(0), b.mr));
    eng.poll(wire, now += 10'000);
    ASSERT_EQ(wire.frames.size(), 1u);
    std::vector<uint8_t> forged = wire.frames.front().bytes;
    wire.frames.clear();
    std::copy(ip6_stranger.begin(), ip6_stranger.end(), forged.begin() + eth + 8);
    const uint32_t icrc = icrc_by_hand(forged);
    for (int i = 0; i < 4; ++i) {
        forged[forged.size() - 4 + i] = static_cast<uint8_t>(icrc >> (8 * i));
    }
    eng.receive(b.vnic, forged.data() + eth, static_cast<uint32_t>(forged.size() - eth), wire, now);
    EXPECT_EQ(eng.counters().drops[static_cast<int>(engine_drop::not_connected)].read(), 1u);
    EXPECT_EQ(word_at(b, 0), 0u) << "nothing of it was written";
}

TEST_F(RoceOverIpv6Test, AnIpv6PacketWithAnExtensionHeaderOrAWrongLengthIsDroppedAsTruncated) {
    connect_both_ipv6();
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), 64, a.mr, b.iova(0), b.mr));
    eng.poll(wire, now += 10'000);
    ASSERT_EQ(wire.frames.size(), 1u);
    std::vector<uint8_t> f = wire.frames.front().bytes;
    wire.frames.clear();
    auto hop_by_hop = f;
    hop_by_hop[eth + 6] = 0;  // next header: Hop-by-Hop options, not UDP
    eng.receive(b.vnic, hop_by_hop.data() + eth, static_cast<uint32_t>(f.size() - eth), wire, now);
    auto long_payload = f;
    long_payload[eth + 5] += 4;  // the payload length says more than there is
    eng.receive(b.vnic, long_payload.data() + eth, static_cast<uint32_t>(f.size() - eth), wire,
                now);
    EXPECT_EQ(eng.counters().drops[static_cast<int>(engine_drop::truncated)].read(), 2u);
    auto flipped = f;
    flipped[eth + 24 + 15] ^= 1;  // an invariant byte: the destination address
    eng.receive(b.vnic, flipped.data() + eth, static_cast<uint32_t>(f.size() - eth), wire, now);
    EXPECT_EQ(eng.counters().drops[static_cast<int>(engine_drop::bad_icrc)].read(), 1u);
}

// Routers may rewrite the traffic class (ECN), flow label and hop limit: the ICRC masks them.
TEST_F(RoceOverIpv6Test, APacketWhoseTrafficClassFlowLabelAndHopLimitChangedOnTheWayIsTaken) {
    connect_both_ipv6();
    fill(a, 0, 64, 6);
    a.post_send(wqe(1, IBV_WR_RDMA_WRITE, a.iova(0), 64, a.mr, b.iova(0), b.mr));
    run(20, 10'000, [](const test_wire::frame& f) {
        auto& bytes = const_cast<std::vector<uint8_t>&>(f.bytes);
        bytes[eth + 1] ^= 0x3F;  // ECN to CE and flow label bits
        bytes[eth + 3] ^= 0x55;
        bytes[eth + 7] -= 3;  // three more hops
        return true;
    });
    expect_sends_complete(a, {1});
    EXPECT_TRUE(same(a, 0, b, 0, 64));
}

TEST_F(RoceOverIpv6Test, AnIpv6AddressVectorNeedsGidIndexOneAndARoutablePeer) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = 1;
    attr.qp_access_flags = qp_access;
    ASSERT_EQ(modify(a, attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
              0);
    const int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    attr = rtr_attr(b.qp, 0, 1);
    attr.ah_attr = av_to_ipv6(ip6_b);
    attr.ah_attr.grh.sgid_index = 0;  // the IPv4 source GID towards an IPv6 peer
    EXPECT_EQ(modify(a, attr, mask), EINVAL);
    attr.ah_attr = av_to_ipv6({0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2});
    EXPECT_EQ(modify(a, attr, mask), EINVAL) << "link-local: no overlay route";
    attr.ah_attr = av_to(ip_b);
    attr.ah_attr.grh.sgid_index = 1;  // the IPv6 source GID towards an IPv4 peer
    EXPECT_EQ(modify(a, attr, mask), EINVAL);
    denied_ipv6.push_back(ip6_b);
    attr.ah_attr = av_to_ipv6(ip6_b);
    EXPECT_EQ(modify(a, attr, mask), EACCES) << "the security groups decide";
    denied_ipv6.clear();
    EXPECT_EQ(modify(a, attr, mask), 0);
}

// A vNIC without an IPv6 address has no GID index 1: an IPv6 address vector is refused.
class RoceWithoutIpv6Test : public QueuePairTest {};

TEST_F(RoceWithoutIpv6Test, AVnicWithoutAnIpv6AddressRefusesAnIpv6AddressVector) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = 1;
    attr.qp_access_flags = qp_access;
    ASSERT_EQ(modify(a, attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
              0);
    attr = rtr_attr(b.qp, 0, 1);
    attr.ah_attr = av_to_ipv6(ip6_b);
    EXPECT_EQ(modify(a, attr,
                     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
              EINVAL);
}

class UdOverIpv6Test : public RoceOverIpv6Test {
  protected:
    static constexpr uint32_t qkey = 0x11111111;

    void SetUp() override {
        qp_type = proto::qpt_ud;
        QueuePairTest::SetUp();
        ready(a);
        ready(b);
    }
    void ready(side& s) {
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_INIT;
        attr.port_num = 1;
        attr.qkey = qkey;
        ASSERT_EQ(modify(s, attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), 0);
        attr = {};
        attr.qp_state = IBV_QPS_RTR;
        ASSERT_EQ(modify(s, attr, IBV_QP_STATE), 0);
        attr = {};
        attr.qp_state = IBV_QPS_RTS;
        attr.sq_psn = 77;
        ASSERT_EQ(modify(s, attr, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
    }
    proto::send_wqe datagram(uint64_t id, uint32_t length, const ipv6_address& to) {
        proto::send_wqe w = wqe(id, IBV_WR_SEND, a.iova(0), length, a.mr);
        std::memcpy(w.ud_remote_ip6, to.data(), 16);
        w.ud_remote_qpn = b.qp;
        w.ud_remote_qkey = qkey;
        return w;
    }
};

// The GRH area holds the IPv6 header whole, and wc.sl says RoCE v2 over IPv6 (1, as mlx5
// reports it): what ibv_init_ah_from_wc and UCX read the sender from.
TEST_F(UdOverIpv6Test, ADatagramArrivesBehindAGrhAreaHoldingTheSendersIpv6Header) {
    fill(a, 0, 1000, 5);
    b.post_recv(100, 0, 1000 + 40);
    a.post_send(datagram(1, 1000, ip6_b));
    std::vector<std::vector<uint8_t>> seen;
    run(20, 10'000, [&](const test_wire::frame& f) {
        seen.push_back(f.bytes);
        return true;
    });
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    ASSERT_TRUE(b.poll_recv(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS);
    EXPECT_EQ(c.byte_len, 1000u + 40);
    EXPECT_EQ(c.src_qp, a.qp);
    EXPECT_NE(c.wc_flags & IBV_WC_GRH, 0u);
    EXPECT_EQ(c.sl & 7, 1) << "the network header type of RoCE v2 over IPv6";
    const auto* grh = reinterpret_cast<const uint8_t*>(b.region);
    EXPECT_EQ(grh[0] >> 4, 6);
    EXPECT_EQ(grh[6], 17);
    EXPECT_TRUE(std::equal(grh + 8, grh + 24, ip6_a.begin())) << "source";
    EXPECT_TRUE(std::equal(grh + 24, grh + 40, ip6_b.begin())) << "destination";
    EXPECT_TRUE(same(a, 0, b, 40, 1000));
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(stored_icrc(seen[0]), icrc_by_hand(seen[0]));
}

TEST_F(UdOverIpv6Test, ADatagramToOrFromAnIpv6PeerTheSecurityGroupsRefuseNeverArrives) {
    b.post_recv(100, 0, 64 + 40);
    b.post_recv(101, 4096, 64 + 40);
    wire.refused_ipv6 = {ip6_b};
    a.post_send(datagram(1, 64, ip6_b));
    run(20);
    proto::cqe c{};
    ASSERT_TRUE(a.poll_send(c));
    EXPECT_EQ(c.status, IBV_WC_SUCCESS) << "UD: sent into the void, as on a wire";
    EXPECT_FALSE(b.poll_recv(c)) << "refused on the way out";
    wire.refused_ipv6 = {ip6_a};  // b's ingress now refuses a
    a.post_send(datagram(2, 64, ip6_b));
    run(20);
    EXPECT_FALSE(b.poll_recv(c)) << "refused on the way in";
    EXPECT_EQ(eng.counters().drops[static_cast<int>(engine_drop::denied)].read(), 1u);
    wire.refused_ipv6.clear();
    a.post_send(datagram(3, 64, ip6_b));
    run(20);
    EXPECT_TRUE(b.poll_recv(c));
}

}  // namespace
}  // namespace jakiro::rnic::test
