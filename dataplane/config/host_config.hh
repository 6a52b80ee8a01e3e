#pragma once
// The host configuration as loaded from YAML: plain values, validated, no DPDK types.
// Owned by the control side; the datapath only ever sees snapshots built from it.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qos/config.hh"
#include "secgroup/flow_table.hh"
#include "secgroup/rule.hh"

namespace jakiro {

using mac_address = std::array<uint8_t, 6>;

// IPv4 addresses are kept in host byte order on the control side; the datapath snapshot
// converts them to network order once.
struct ipv4_prefix {
    uint32_t address = 0;
    uint8_t length = 32;
};

// IPv6 addresses are kept in network byte order everywhere (16 bytes as on the wire and in a
// RoCE GID): there is no host order for them to convert to.
using ipv6_address = std::array<uint8_t, 16>;

// A vNIC's IPv6 address and the length of its subnet's prefix (a VPC subnet is a /64).
struct ipv6_prefix {
    ipv6_address address{};
    uint8_t length = 128;
    bool operator==(const ipv6_prefix&) const = default;
};

struct underlay_config {
    std::string port;  // DPDK vdev string, e.g. "net_af_packet0,iface=ul0"
    uint32_t ip = 0;
    uint32_t mtu = 1500;
};

struct vpc_config {
    std::string name;
    uint32_t vni = 0;
};

// The RDMA face of a vNIC: its quota (YAML `vnics[].rdma`), what its tenants may hold at once;
// beyond it the verb fails with EDQUOT. `jakiroctl apply` changes it live (lowering it refuses
// new objects and keeps existing ones). The defaults let a small host (a few GiB, a handful of
// vNICs) survive every vNIC filling its quota: about 4 GiB of registered memory (the tenant's
// own pages), 16 MiB of CQ rings and ~200 MiB of work queues in jakirod per vNIC, and ~3 400
// mappings (jakirod has ~65 530 for all vNICs). The `_limit`s are what the engine can hold.
// verbs::vnic_quota (rnic/verbs/quota.hh) carries the same values to vnic_resources.
struct rdma_config {
    // QPs of any transport (RC, UC, UD). The RCFT has one entry per QP, so this also bounds
    // the vNIC's share of it. `max_rc_qps` is its older name, from before UC and UD.
    static constexpr uint32_t max_qps_limit = 1024;  // = ibv_device_attr.max_qp
    uint32_t max_qps = max_qps_limit;
    static constexpr uint32_t max_pds_limit = 1024;  // = max_pd
    uint32_t max_pds = 1024;
    // MRs: one mapping each in jakirod.
    static constexpr uint32_t max_mrs_limit = 4096;  // = max_mr
    uint32_t max_mrs = 1024;
    // Memory windows: keys of the MR table (no mapping of their own).
    static constexpr uint32_t max_mws_limit = 1024;  // = max_mw
    uint32_t max_mws = 1024;
    // Bytes registered, summed over the MRs: what jakirod maps of the tenant's memory. 4 GiB
    // holds a few 1 GiB buffers (perftest, NCCL-style pools); raise it for bigger jobs.
    static constexpr uint64_t max_mr_bytes_limit = uint64_t{4096} << 30;  // max_mr × max_mr_size
    uint64_t max_mr_bytes = uint64_t{4} << 30;
    static constexpr uint32_t max_cqs_limit = 2048;  // = max_cq
    uint32_t max_cqs = 1024;
    // CQ entries summed over the CQs, rounded up to their rings' powers of two (64 bytes each,
    // in jakirod's memory): 2^18 = 16 MiB, e.g. 64 CQs of 4096 entries.
    static constexpr uint32_t max_cqes_limit = 1u << 27;  // max_cq × max_cqe
    uint32_t max_cqes = 1u << 18;
    static constexpr uint32_t max_srqs_limit = 1024;  // = max_srq
    uint32_t max_srqs = 256;
    // Work-queue slots summed over every SQ, RQ and SRQ ring, rounded up like CQs (512 bytes
    // each, plus ~1 KiB of engine state per send slot): 2^17 = under ~200 MiB, e.g. 16 QPs of
    // 4096 + 4096, or 500 QPs of 128 + 128.
    static constexpr uint32_t max_wqes_limit = 1u << 24;
    uint32_t max_wqes = 1u << 17;
    // Verbs connections (contexts and device scans) at once; the channel server enforces it.
    static constexpr uint32_t max_contexts_limit = 4096;  // the channel server's max_clients
    uint32_t max_contexts = 64;
    // WRs per second the RNIC does for the vNIC without a packet (memory-window binds and
    // invalidations, WRs that fail locally, flushes): worker time that nothing else bounds
    // (rnic/engine.hh). Beyond it the vNIC's QPs wait.
    static constexpr uint32_t max_local_work_rate_limit = 10'000'000;
    uint32_t max_local_work_rate = 100'000;
    // rdma_cm ids at once (rnic/rdmacm): the applications' own, those peers' requests created
    // for them, and closed connections still saying goodbye.
    static constexpr uint32_t max_cm_ids_limit = 65536;
    uint32_t max_cm_ids = 1024;
    // Peers' connection requests (REQ, SIDR_REQ) the vNIC's applications have not taken yet,
    // over all its listeners: peers never hold more of its rdma_cm ids than this.
    static constexpr uint32_t max_cm_backlog_limit = 65536;
    uint32_t max_cm_backlog = 128;
    // REQs that wait (100 ms) for a listener that is about to listen.
    static constexpr uint32_t max_cm_held_reqs_limit = 1024;
    uint32_t max_cm_held_reqs = 16;
    // MADs queued on the vNIC's QP1, each way (~300 bytes each).
    static constexpr uint32_t max_qp1_queue_limit = 65536;
    uint32_t max_qp1_queue = 256;
};

// What a vNIC may hold of what it shares with the other vNICs of its host, beyond its RDMA
// quota (YAML `vnics[].limits`); unset, an equal share (control/vnic_limits.hh). At the bound
// the vNIC alone is refused: its new flows, its frames, each counted for it. `jakiroctl apply`
// changes them live (what a vNIC already holds beyond a lowered bound is kept).
struct vnic_limits {
    // Entries of its worker's flow table (conntrack) at once; default: the table's capacity
    // shared equally among the vNICs of that worker.
    static constexpr uint32_t max_flows_limit = 1u << 24;  // = host.conntrack.max_flows' bound
    std::optional<uint32_t> max_flows;
    // Packet buffers at once: 64 KB super-frame buffers of a vnet face wherever they wait (its
    // face, QoS queue, transmit batches, hand-offs to other workers), and frames in its QoS
    // queue on any face. Default: the super-frame pool shared equally among the host's vNICs and
    // the host's own use.
    static constexpr uint32_t max_packet_buffers_limit = 1u << 16;
    std::optional<uint32_t> max_packet_buffers;
    // Frames per second its worker reads from its port (a GSO super-frame counts once); the
    // rest are dropped as they arrive. Default: default_max_packet_rate, a bound rather than a
    // share (a worker's rate depends on the host), above what an af_packet face at MTU 1500
    // reaches and five times a 10 Gbit/s TCP stream of super-frames.
    static constexpr uint32_t max_packet_rate_limit = 100'000'000;
    static constexpr uint32_t default_max_packet_rate = 100'000;
    std::optional<uint32_t> max_packet_rate;

    bool operator==(const vnic_limits&) const = default;
};

struct vnic_config {
    std::string name;
    std::string vpc;
    mac_address mac{};
    ipv4_prefix ip;
    // YAML `ip6:` (dual stack): a global or unique-local unicast address; none: IPv4 only.
    std::optional<ipv6_prefix> ip6;
    std::string port;
    // The tenant's network namespace (a name under /run/netns), where jakirod serves the
    // vNIC's RDMA face. Empty: the namespace of the port's veth peer (rnic/verbs/tenant_namespace).
    std::string netns;
    std::vector<std::string> security_groups;  // none: ingress denied, egress denied
    rdma_config rdma;
    vnic_limits limits;
    // The host the vNIC lives on (a host name): cluster records only (control plane, etcd);
    // empty in a host YAML, where every vNIC is local.
    std::string host;
    // DHTB (docs/architecture.md §6): rate, burst and the rdma/tcp classes; none = not shaped.
    std::optional<qos::vnic_qos> qos;
};

// A VLT entry for an address of a VPC that lives on another host.
struct peer_config {
    std::string vpc;
    uint32_t ip = 0;
    // The remote vNIC's IPv6 address (YAML `ip6:`), when it has one.
    std::optional<ipv6_address> ip6;
    uint32_t host = 0;
    // Inner destination MAC for frames to this address. Jakiro hosts rewrite it on delivery,
    // so it only matters for foreign VTEPs (e.g. a Linux vxlan device).
    std::optional<mac_address> mac;
    // Groups the remote vNIC belongs to: makes it a member for remote-group rules here.
    std::vector<std::string> security_groups;
};

struct conntrack_config {
    uint32_t max_flows = 65536;  // per worker
    secgroup::flow_timeouts timeouts;
};

// host.rdma_limits: the most mappings and descriptors the RDMA objects and connections of every
// vNIC together may hold in jakirod (rnic/queues/host_reserve.hh). jakirod's own bound is the
// kernel's (vm.max_map_count mappings, RLIMIT_NOFILE descriptors, less what it keeps for
// itself); these lower it, never raise it. Unset: the kernel's.
struct rdma_host_limits {
    std::optional<uint32_t> mappings;
    std::optional<uint32_t> descriptors;
    bool operator==(const rdma_host_limits&) const = default;
};

// host.metrics: where jakirod serves /metrics (Prometheus text format) from its control thread.
struct metrics_config {
    uint32_t ip = 0;  // host order; 0.0.0.0 listens on every address of the namespace
    uint16_t port = 0;
    std::string text() const;  // "ADDR:PORT"
    bool operator==(const metrics_config&) const = default;
};

// host YAML `control:`: the cluster's VPCs, groups and vNICs come from etcd instead of this
// file (dataplane/control_plane/README.md). None: the YAML is the whole truth, as always.
struct control_config {
    std::vector<std::string> etcd;  // endpoints, "http://ADDR:PORT"
    // The DPDK device of a local vNIC learnt from etcd; "{name}" becomes the vNIC's name.
    std::string vnic_port;
    uint32_t lease_ttl_s = 10;  // the host's liveness lease
    bool operator==(const control_config&) const = default;
};

// A host of the cluster (control plane only): its name, underlay address and, when its overlay
// is sealed, its overlay public key (base64, as `overlay.hosts[].public_key`).
struct cluster_host {
    std::string name;
    uint32_t underlay_ip = 0;
    std::string overlay_key;
    bool operator==(const cluster_host&) const = default;
};

// The sealed overlay (YAML `overlay:`, docs/configuration.md "Overlay encryption"): whether
// frames between hosts are ESP-in-UDP under per-host-pair keys (dataplane/overlay/sealing/).
enum class overlay_encryption : uint8_t {
    off,       // plain VXLAN (the default; a Linux VTEP)
    optional,  // sealed to every host whose key is known, plain VXLAN accepted
    required,  // sealed always; plain VXLAN from that host dropped, none sent to it
};
std::string_view overlay_encryption_name(overlay_encryption e);

// `overlay.hosts[]`: another host's public key and, optionally, its own policy.
struct overlay_host_config {
    uint32_t ip = 0;         // its underlay address, host order
    std::string public_key;  // base64 X25519 key; empty: not known (plain VXLAN if allowed)
    std::optional<overlay_encryption> encryption;  // none: overlay.encryption
    bool operator==(const overlay_host_config&) const = default;
};

struct overlay_config {
    overlay_encryption encryption = overlay_encryption::off;
    std::string private_key;  // path of a root-only file holding this host's X25519 key
    // Where this host reserves its sending epochs so no run reuses a key (nonce) with a peer;
    // default: the private key's path with ".epochs" appended.
    std::string epoch_file;
    uint64_t rekey_bytes = uint64_t{1} << 36;  // per epoch and peer
    uint32_t rekey_seconds = 3600;
    std::vector<overlay_host_config> hosts;
    bool operator==(const overlay_config&) const = default;
    // Whether any frame may leave sealed (the tenant MTU then leaves room for ESP).
    bool may_seal() const;
};

// Most poll loops one jakirod runs (host.workers, --workers): one per core of a big host.
constexpr uint32_t max_workers = 16;

struct host_config {
    std::string source_file;
    std::string name;
    underlay_config underlay;
    mac_address gateway_mac{0x02, 0x6a, 0x6b, 0x00, 0x00, 0x01};
    std::vector<vpc_config> vpcs;
    std::vector<vnic_config> vnics;
    std::vector<peer_config> peers;
    std::vector<secgroup::group> security_groups;
    conntrack_config conntrack;
    uint32_t workers = 1;  // host.workers: poll loops (lcores), vNICs shared out among them
    std::optional<qos::uplink_qos> uplink_qos;  // host.qos.uplink_rate: all vNICs together
    std::optional<metrics_config> metrics;      // none: no metrics listener
    rdma_host_limits rdma_limits;               // host.rdma_limits; changed live by `apply`
    std::optional<control_config> control;      // none: no control plane, the YAML is all
    // Cluster documents only (`jakiroctl --etcd apply`, the records in etcd): the hosts.
    std::vector<cluster_host> hosts;
    overlay_config overlay;  // YAML `overlay:`; a change needs a restart

    const vpc_config* find_vpc(const std::string& name) const;
    // Group names are unique within a VPC (every VPC may have its own "default").
    const secgroup::group* find_group(const std::string& vpc, const std::string& name) const;
    int group_index(const std::string& vpc, const std::string& name) const;
    // Overlay MTU seen by tenants: the underlay MTU less the 50 bytes of outer headers, and
    // less 40 more when frames may leave sealed (ESP header, IV, trailer, ICV).
    uint32_t tenant_mtu() const { return underlay.mtu - 50 - (overlay.may_seal() ? 40 : 0); }
};

std::string format_ipv4(uint32_t host_order);
std::string format_mac(const mac_address& mac);
std::optional<uint32_t> parse_ipv4(const std::string& text);
std::optional<ipv4_prefix> parse_ipv4_prefix(const std::string& text);
std::optional<mac_address> parse_mac(const std::string& text);
// RFC 5952 text ("2001:2::1:1").
std::string format_ipv6(const ipv6_address& address);
// Any RFC 4291 text form inet_pton takes; "ADDR/LEN" with LEN in 0..128, or ADDR alone (/128).
std::optional<ipv6_address> parse_ipv6(const std::string& text);
std::optional<ipv6_prefix> parse_ipv6_prefix(const std::string& text);
// Why `prefix` cannot be a vNIC's address (empty when it can): a vNIC has a global or
// unique-local unicast address, never ::, ::1, multicast, link-local (every vNIC has its own
// fe80:: already), IPv4-mapped (its IPv4 GID) nor its subnet's router anycast address.
std::string ipv6_vnic_address_problem(const ipv6_prefix& prefix);
// "198.18.0.1:9417" (IPv4 address, a colon, a port in 1..65535).
std::optional<metrics_config> parse_listen_address(const std::string& text);

}  // namespace jakiro
