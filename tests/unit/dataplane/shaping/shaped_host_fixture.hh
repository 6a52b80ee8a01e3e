#pragma once
// The pipeline fixture's host h1, dual-stack, with t1 shaped at 100 Mbit/s (rdma weight 3, tcp
// weight 1) and a worker with an egress shaper: what the shaping and the QoS-restart tests start
// from. They differ in t1's burst and limits, and in how they make the shaper.

#include <rte_mbuf.h>

#include <memory>
#include <string>

#include "dataplane/shaping/egress_shaper.hh"
#include "tests/unit/dataplane/pipeline/pipeline_fixture.hh"

namespace jakiro::test {

struct ShapedHostTest : PipelineTest {
    // `t1_burst` as the YAML writes it ("16KiB"), `t1_limits` the inside of t1's `limits` map.
    ShapedHostTest(const std::string& t1_burst, const std::string& t1_limits)
        : yaml_(R"(host:
  name: h1
  underlay: {port: "net_null0", ip: 198.18.0.1}
vpcs: [{name: blue, vni: 100}, {name: red, vni: 200}]
security_groups:
  - {name: blue-open, vpc: blue, ingress: [{proto: any, from: 0.0.0.0/0}, {proto: any, from: "::/0"}]}
  - {name: red-open, vpc: red, ingress: [{proto: any, from: 0.0.0.0/0}]}
vnics:
  - {name: t1, vpc: blue, mac: "02:00:c6:13:01:01", ip: 198.19.1.1/24, ip6: 2001:2::1:1/64, port: "net_null1", security_groups: [blue-open],
     qos: {rate: 100Mbit, burst: )" +
                t1_burst +
                R"(, rdma: {weight: 3}, tcp: {weight: 1}},
     limits: {)" +
                t1_limits +
                R"(}}
  - {name: t5, vpc: blue, mac: "02:00:c6:13:01:03", ip: 198.19.1.3/24, ip6: 2001:2::1:3/64, port: "net_null2", security_groups: [blue-open]}
  - {name: t3, vpc: red, mac: "02:00:c6:13:02:01", ip: 198.19.1.1/24, port: "net_null3", security_groups: [red-open]}
peers:
  - {vpc: blue, ip: 198.19.1.2, ip6: 2001:2::1:2, host: 198.18.0.2}
)") {}

    const char* config_yaml() const override { return yaml_.c_str(); }

    void TearDown() override {
        shaper.reset();  // frees what is still queued
        PipelineTest::TearDown();
    }

    // Sends what left for t5 (same host) to the void, returning how many bytes were charged.
    uint64_t drain_t5() {
        uint64_t bytes = 0;
        for (rte_mbuf* m : ctx->tx.queued(port_t5)) {
            bytes += qos::charged_bytes(rte_pktmbuf_pkt_len(m));
            rte_pktmbuf_free(m);
        }
        ctx->tx.discard_all();
        return bytes;
    }

    // A full-size frame from t1 to t5 (1000 bytes of payload).
    rte_mbuf* big_t1_frame() {
        ipv4_frame_spec spec{t1_mac, gateway, ip("198.19.1.1"), ip("198.19.1.3")};
        spec.payload = 1000;
        return ipv4_mbuf(pool, spec);
    }
    // The same over IPv6 (TCP by default; UDP: `next_header`).
    rte_mbuf* big_t1_frame6(uint8_t next_header = IPPROTO_TCP) {
        return ipv6_mbuf(
            pool, {t1_mac, gateway, ip6("2001:2::1:1"), ip6("2001:2::1:3"), next_header, 1000});
    }

    uint64_t now = 1'000'000'000;
    std::unique_ptr<egress_shaper> shaper;

  private:
    std::string yaml_;
};

}  // namespace jakiro::test
