// IB CM MADs against the byte layout of IBTA vol. 1 ch. 12 (tables 106-120) and the MAD
// header of 13.4.3: every field lands at the spec's byte and bit, and what decode() reads
// back is what was written; anything not a CM MAD of class version 2 is refused.
#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <cstring>

#include "rnic/rdmacm/cm_mad.hh"
#include "rnic/rdmacm/cma_header.hh"

using namespace jakiro::rdmacm;

namespace {

// Offsets below are the spec's: MAD header 24 bytes, then the attribute's byte offset.
constexpr std::size_t d = mad_header_bytes;

cm_req sample_req() {
    cm_req r;
    r.local_comm_id = 0x11223344;
    r.service_id = service_id(port_space_tcp, 7000);
    r.local_ca_guid = 0x0211'22ff'fe33'4455ull;
    r.local_qkey = 0x0;
    r.local_qpn = 0xABCDEF;
    r.responder_resources = 16;
    r.initiator_depth = 8;
    r.remote_cm_response_timeout = 20;
    r.transport = cm_transport::uc;
    r.end_to_end_flow_control = true;
    r.starting_psn = 0x123456;
    r.local_cm_response_timeout = 19;
    r.retry_count = 7;
    r.pkey = 0xFFFF;
    r.path_mtu = 3;
    r.rnr_retry_count = 6;
    r.max_cm_retries = 15;
    r.srq = true;
    r.primary_local_lid = 0xFFFF;
    r.primary_remote_lid = 0xFFFE;
    r.primary_local_gid[15] = 0x01;
    r.primary_remote_gid[15] = 0x02;
    r.primary_flow_label = 0xABCDE;
    r.primary_packet_rate = 0x2A;
    r.primary_traffic_class = 0x68;
    r.primary_hop_limit = 64;
    r.primary_sl = 5;
    r.primary_subnet_local = true;
    r.primary_local_ack_timeout = 18;
    r.private_data[0] = 0xAA;
    r.private_data[91] = 0xBB;
    return r;
}

}  // namespace

TEST(CmMad, HeaderIsCommunicationManagementClassVersion2Send) {
    const auto m = encode(cm_message{0x0102030405060708ull, cm_rtu{1, 2}});
    EXPECT_EQ(m[0], 1);     // base version
    EXPECT_EQ(m[1], 0x07);  // management class: CM
    EXPECT_EQ(m[2], 2);     // class version
    EXPECT_EQ(m[3], 0x03);  // method: Send
    EXPECT_EQ(m[4], 0);     // status
    EXPECT_EQ(m[8], 0x01);  // transaction id, big-endian
    EXPECT_EQ(m[15], 0x08);
    EXPECT_EQ(m[16], 0x00);  // attribute id 0x0014 (RTU)
    EXPECT_EQ(m[17], 0x14);
}

TEST(CmMad, ReqFieldsSitAtTheirTable106Offsets) {
    const auto m = encode(cm_message{1, sample_req()});
    EXPECT_EQ(m[17], 0x10);
    EXPECT_EQ(m[d + 0], 0x11);
    EXPECT_EQ(m[d + 3], 0x44);
    // Service ID: RDMA_PS_TCP << 16 | port 7000 (0x1B58).
    const uint8_t sid[8] = {0, 0, 0, 0, 0x01, 0x06, 0x1B, 0x58};
    EXPECT_EQ(std::memcmp(&m[d + 8], sid, 8), 0);
    EXPECT_EQ(m[d + 16], 0x02);
    EXPECT_EQ(m[d + 23], 0x55);
    EXPECT_EQ(m[d + 32], 0xAB);  // local QPN: the top 24 bits of the word at 32
    EXPECT_EQ(m[d + 34], 0xEF);
    EXPECT_EQ(m[d + 35], 16);  // responder resources
    EXPECT_EQ(m[d + 39], 8);   // initiator depth
    // Byte 43: remote CM response timeout (5) | transport service type (2) | flow control (1).
    EXPECT_EQ(m[d + 43], (20 << 3) | (1 << 1) | 1);
    EXPECT_EQ(m[d + 44], 0x12);  // starting PSN
    EXPECT_EQ(m[d + 46], 0x56);
    EXPECT_EQ(m[d + 47], (19 << 3) | 7);  // local CM response timeout | retry count
    EXPECT_EQ(m[d + 48], 0xFF);           // P_Key
    EXPECT_EQ(m[d + 49], 0xFF);
    EXPECT_EQ(m[d + 50], (3 << 4) | 6);          // path MTU | RDC exists (0) | RNR retry count
    EXPECT_EQ(m[d + 51], (15 << 4) | (1 << 3));  // max CM retries | SRQ | ext. transport
    EXPECT_EQ(m[d + 52], 0xFF);
    EXPECT_EQ(m[d + 55], 0xFE);
    EXPECT_EQ(m[d + 56 + 15], 0x01);  // primary local port GID
    EXPECT_EQ(m[d + 72 + 15], 0x02);  // primary remote port GID
    // Flow label: top 20 bits of the word at 88; packet rate: low 6 bits of byte 91.
    EXPECT_EQ(m[d + 88], 0xAB);
    EXPECT_EQ(m[d + 89], 0xCD);
    EXPECT_EQ(m[d + 90], 0xE0);
    EXPECT_EQ(m[d + 91], 0x2A);
    EXPECT_EQ(m[d + 92], 0x68);                 // traffic class
    EXPECT_EQ(m[d + 93], 64);                   // hop limit
    EXPECT_EQ(m[d + 94], (5 << 4) | (1 << 3));  // SL | subnet local
    EXPECT_EQ(m[d + 95], 18 << 3);              // local ACK timeout
    EXPECT_EQ(m[d + 140], 0xAA);                // private data: 92 bytes to the end
    EXPECT_EQ(m[255], 0xBB);
}

TEST(CmMad, ReqRoundTrips) {
    const cm_req in = sample_req();
    const auto out = decode(encode(cm_message{42, in}));
    ASSERT_TRUE(out.has_value());
    EXPECT_EQ(out->transaction_id, 42u);
    const auto& r = std::get<cm_req>(out->body);
    EXPECT_EQ(r.local_comm_id, in.local_comm_id);
    EXPECT_EQ(r.service_id, in.service_id);
    EXPECT_EQ(r.local_ca_guid, in.local_ca_guid);
    EXPECT_EQ(r.local_qpn, in.local_qpn);
    EXPECT_EQ(r.responder_resources, in.responder_resources);
    EXPECT_EQ(r.initiator_depth, in.initiator_depth);
    EXPECT_EQ(r.remote_cm_response_timeout, in.remote_cm_response_timeout);
    EXPECT_EQ(r.transport, in.transport);
    EXPECT_EQ(r.end_to_end_flow_control, in.end_to_end_flow_control);
    EXPECT_EQ(r.starting_psn, in.starting_psn);
    EXPECT_EQ(r.local_cm_response_timeout, in.local_cm_response_timeout);
    EXPECT_EQ(r.retry_count, in.retry_count);
    EXPECT_EQ(r.path_mtu, in.path_mtu);
    EXPECT_EQ(r.rnr_retry_count, in.rnr_retry_count);
    EXPECT_EQ(r.max_cm_retries, in.max_cm_retries);
    EXPECT_EQ(r.srq, in.srq);
    EXPECT_EQ(r.primary_local_gid, in.primary_local_gid);
    EXPECT_EQ(r.primary_remote_gid, in.primary_remote_gid);
    EXPECT_EQ(r.primary_flow_label, in.primary_flow_label);
    EXPECT_EQ(r.primary_packet_rate, in.primary_packet_rate);
    EXPECT_EQ(r.primary_traffic_class, in.primary_traffic_class);
    EXPECT_EQ(r.primary_hop_limit, in.primary_hop_limit);
    EXPECT_EQ(r.primary_sl, in.primary_sl);
    EXPECT_EQ(r.primary_subnet_local, in.primary_subnet_local);
    EXPECT_EQ(r.primary_local_ack_timeout, in.primary_local_ack_timeout);
    EXPECT_EQ(r.private_data, in.private_data);
}

TEST(CmMad, RepFieldsSitAtTheirTable110Offsets) {
    cm_rep r;
    r.local_comm_id = 0xA1A2A3A4;
    r.remote_comm_id = 0xB1B2B3B4;
    r.local_qkey = 0x01234567;
    r.local_qpn = 0x000102;
    r.starting_psn = 0xFEDCBA;
    r.responder_resources = 4;
    r.initiator_depth = 2;
    r.target_ack_delay = 15;
    r.failover_accepted = 1;
    r.end_to_end_flow_control = true;
    r.rnr_retry_count = 7;
    r.srq = true;
    r.local_ca_guid = 0x1122334455667788ull;
    r.private_data[0] = 0x5A;
    const auto m = encode(cm_message{7, r});
    EXPECT_EQ(m[17], 0x13);
    EXPECT_EQ(m[d + 0], 0xA1);
    EXPECT_EQ(m[d + 4], 0xB1);
    EXPECT_EQ(m[d + 8], 0x01);
    EXPECT_EQ(m[d + 11], 0x67);
    EXPECT_EQ(m[d + 12], 0x00);
    EXPECT_EQ(m[d + 14], 0x02);
    EXPECT_EQ(m[d + 20], 0xFE);
    EXPECT_EQ(m[d + 22], 0xBA);
    EXPECT_EQ(m[d + 24], 4);
    EXPECT_EQ(m[d + 25], 2);
    EXPECT_EQ(m[d + 26], (15 << 3) | (1 << 1) | 1);  // ack delay | failover | flow control
    EXPECT_EQ(m[d + 27], (7 << 5) | (1 << 4));       // RNR retry count | SRQ
    EXPECT_EQ(m[d + 28], 0x11);
    EXPECT_EQ(m[d + 35], 0x88);
    EXPECT_EQ(m[d + 36], 0x5A);  // private data: 196 bytes
    const auto back = decode(m);
    ASSERT_TRUE(back.has_value());
    const auto& b = std::get<cm_rep>(back->body);
    EXPECT_EQ(b.local_qpn, r.local_qpn);
    EXPECT_EQ(b.starting_psn, r.starting_psn);
    EXPECT_EQ(b.rnr_retry_count, 7);
    EXPECT_TRUE(b.srq);
    EXPECT_EQ(b.failover_accepted, 1);
    EXPECT_EQ(b.local_ca_guid, r.local_ca_guid);
}

TEST(CmMad, RejMraDreqAndSidrFieldsSitAtTheirOffsets) {
    cm_rej rej;
    rej.local_comm_id = 1;
    rej.remote_comm_id = 2;
    rej.message_rejected = message_kind::rep;
    rej.reject_info_length = 3;
    rej.reason = 28;
    rej.private_data[0] = 0x77;
    auto m = encode(cm_message{1, rej});
    EXPECT_EQ(m[17], 0x12);
    EXPECT_EQ(m[d + 8], 1 << 6);  // message rejected: REP, the top 2 bits
    EXPECT_EQ(m[d + 9], 3 << 1);  // rejected info length: the top 7 bits
    EXPECT_EQ(m[d + 10], 0);
    EXPECT_EQ(m[d + 11], 28);
    EXPECT_EQ(m[d + 84], 0x77);
    {
        const auto back = decode(m);
        ASSERT_TRUE(back.has_value());
        EXPECT_EQ(std::get<cm_rej>(back->body).reason, 28);
    }

    m = encode(cm_message{1, cm_mra{5, 6, message_kind::rep, 20}});
    EXPECT_EQ(m[17], 0x11);
    EXPECT_EQ(m[d + 8], 1 << 6);
    EXPECT_EQ(m[d + 9], 20 << 3);
    {
        const auto back = decode(m);
        ASSERT_TRUE(back.has_value());
        EXPECT_EQ(std::get<cm_mra>(back->body).service_timeout, 20);
    }

    m = encode(cm_message{1, cm_dreq{5, 6, 0x123456}});
    EXPECT_EQ(m[17], 0x15);
    EXPECT_EQ(m[d + 8], 0x12);
    EXPECT_EQ(m[d + 10], 0x56);
    {
        const auto back = decode(m);
        ASSERT_TRUE(back.has_value());
        EXPECT_EQ(std::get<cm_dreq>(back->body).remote_qpn, 0x123456u);
    }

    m = encode(cm_message{1, cm_drep{5, 6}});
    EXPECT_EQ(m[17], 0x16);
    {
        const auto back = decode(m);
        ASSERT_TRUE(back.has_value());
        EXPECT_EQ(std::get<cm_drep>(back->body).remote_comm_id, 6u);
    }

    cm_sidr_req sq;
    sq.request_id = 0x01020304;
    sq.pkey = 0xFFFF;
    sq.service_id = service_id(port_space_udp, 7002);
    sq.private_data[0] = 0x33;
    m = encode(cm_message{1, sq});
    EXPECT_EQ(m[17], 0x17);
    EXPECT_EQ(m[d + 4], 0xFF);
    EXPECT_EQ(m[d + 12], 0x01);  // service id 0x0000000001111B5A
    EXPECT_EQ(m[d + 13], 0x11);
    EXPECT_EQ(m[d + 14], 0x1B);
    EXPECT_EQ(m[d + 15], 0x5A);
    EXPECT_EQ(m[d + 16], 0x33);

    cm_sidr_rep sp;
    sp.request_id = 9;
    sp.status = sidr_status::no_service;
    sp.qpn = 0x000203;
    sp.service_id = sq.service_id;
    sp.qkey = 0x01234567;
    sp.private_data[0] = 0x44;
    m = encode(cm_message{1, sp});
    EXPECT_EQ(m[17], 0x18);
    EXPECT_EQ(m[d + 4], 1);
    EXPECT_EQ(m[d + 8], 0x00);
    EXPECT_EQ(m[d + 10], 0x03);
    EXPECT_EQ(m[d + 12 + 4], 0x01);
    EXPECT_EQ(m[d + 20], 0x01);
    EXPECT_EQ(m[d + 23], 0x67);
    EXPECT_EQ(m[d + 96], 0x44);
    const auto sidr = decode(m);
    ASSERT_TRUE(sidr.has_value());
    const auto& b = std::get<cm_sidr_rep>(sidr->body);
    EXPECT_EQ(b.qkey, 0x01234567u);
    EXPECT_EQ(b.qpn, 0x203u);
    EXPECT_EQ(b.status, sidr_status::no_service);
}

TEST(CmMad, DecodeRefusesWhatIsNotACmMadOfClassVersion2) {
    auto m = encode(cm_message{1, cm_rtu{1, 2}});
    EXPECT_FALSE(decode(std::span<const uint8_t>(m.data(), 255)).has_value());  // short
    auto bad = m;
    bad[1] = 0x04;  // another management class
    EXPECT_FALSE(decode(bad).has_value());
    bad = m;
    bad[2] = 1;  // class version 1
    EXPECT_FALSE(decode(bad).has_value());
    bad = m;
    bad[3] = 0x01;  // Get
    EXPECT_FALSE(decode(bad).has_value());
    bad = m;
    bad[17] = 0x19;  // LAP: not spoken
    EXPECT_FALSE(decode(bad).has_value());
    bad = m;
    bad[0] = 2;
    EXPECT_FALSE(decode(bad).has_value());
}

TEST(CmaHeader, Ipv4HeaderIsVersion0IpVersion4PortAndAddresses) {
    std::array<uint8_t, 92> pd{};
    cma_ip_header h;
    h.src_port = 0x1234;
    h.src_ip = ipv4_gid(inet_addr("198.19.1.1"));
    h.dst_ip = ipv4_gid(inet_addr("198.19.1.2"));
    write_cma_header(pd, h);
    EXPECT_EQ(pd[0], 0x00);
    EXPECT_EQ(pd[1], 0x40);
    EXPECT_EQ(pd[2], 0x12);
    EXPECT_EQ(pd[3], 0x34);
    for (int i = 4; i < 16; ++i) {
        EXPECT_EQ(pd[i], 0) << i;
    }
    EXPECT_EQ(pd[16], 198);
    EXPECT_EQ(pd[19], 1);
    EXPECT_EQ(pd[32], 198);
    EXPECT_EQ(pd[35], 2);
    const auto back = read_cma_header(pd);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(back->src_port, 0x1234);
    EXPECT_EQ(back->src_ip, h.src_ip);
    EXPECT_EQ(back->dst_ip, h.dst_ip);
    pd[1] = 0x50;  // no such IP version
    EXPECT_FALSE(read_cma_header(pd).has_value());
    EXPECT_TRUE(is_ip_service(service_id(port_space_tcp, 1)));
    EXPECT_FALSE(is_ip_service(0x0002c90300000001ull));
}

// The kernel's struct cma_hdr for IPv6 (ip_version 6): both addresses whole.
TEST(CmaHeader, Ipv6HeaderIsIpVersion6WithBothAddressesWhole) {
    std::array<uint8_t, 92> pd{};
    const ip_gid src = {0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1};
    const ip_gid dst = {0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2};
    write_cma_header(pd, {0x4321, src, dst});
    EXPECT_EQ(pd[0], 0x00);
    EXPECT_EQ(pd[1], 0x60);
    EXPECT_EQ(pd[2], 0x43);
    EXPECT_EQ(pd[3], 0x21);
    EXPECT_TRUE(std::equal(src.begin(), src.end(), pd.begin() + 4));
    EXPECT_TRUE(std::equal(dst.begin(), dst.end(), pd.begin() + 20));
    const auto back = read_cma_header(pd);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(back->src_port, 0x4321);
    EXPECT_EQ(back->src_ip, src);
    EXPECT_EQ(back->dst_ip, dst);
}
