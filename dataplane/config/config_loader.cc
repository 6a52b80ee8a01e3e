#include "dataplane/config/config_loader.hh"

#include "dataplane/config/flow_mapping.hh"
#include "dataplane/config/qos_units.hh"
#include "dataplane/overlay_key_text.hh"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <fstream>
#include <initializer_list>
#include <set>
#include <sstream>
#include <string_view>

namespace jakiro {

std::string config_error::to_string() const {
    std::ostringstream out;
    out << file;
    if (line > 0) {
        out << ':' << line;
    }
    out << ": ";
    if (!field.empty()) {
        out << field << ": ";
    }
    out << message;
    return out.str();
}

namespace {

constexpr uint32_t max_vni = (1u << 24) - 1;  // VXLAN VNIs are 24 bits
constexpr uint32_t min_underlay_mtu = 1280;   // leaves a tenant MTU that IPv4 hosts can live with
constexpr uint32_t max_underlay_mtu = 9000;   // largest jumbo frame the virtual ports carry
constexpr std::size_t max_ifname = 15;        // IFNAMSIZ - 1: vNIC names name veth devices

// Walks the YAML tree, converting values and recording errors with their position.
class checker {
  public:
    explicit checker(std::string file) : _file(std::move(file)) {}

    void error_at(int line, const std::string& field, const std::string& message) {
        _errors.push_back({_file, line, field, message});
    }

    void error(const YAML::Node& at, const std::string& field, const std::string& message) {
        const int line = at.IsDefined() ? at.Mark().line + 1 : 0;
        _errors.push_back({_file, line > 0 ? line : _last_line, field, message});
    }

    // Reports every key of `map` not in `allowed`.
    bool only_keys(const YAML::Node& map, const std::string& field,
                   std::initializer_list<std::string_view> allowed) {
        if (!map.IsMap()) {
            error(map, field, "must be a mapping");
            return false;
        }
        _last_line = map.Mark().line + 1;
        for (const auto& kv : map) {
            const auto key = kv.first.as<std::string>("");
            bool known = false;
            for (auto name : allowed) {
                known |= (key == name);
            }
            if (!known) {
                error(kv.first, join(field, key), "unknown key");
            }
        }
        return true;
    }

    std::optional<std::string> string(const YAML::Node& map, const char* key,
                                      const std::string& field, bool required = true) {
        const auto node = map[key];
        if (!node.IsDefined() || node.IsNull()) {
            if (required) {
                error(map, join(field, key), "missing");
            }
            return std::nullopt;
        }
        if (!node.IsScalar()) {
            error(node, join(field, key), "must be a scalar");
            return std::nullopt;
        }
        return node.Scalar();
    }

    std::optional<uint32_t> number(const YAML::Node& map, const char* key, const std::string& field,
                                   uint32_t low, uint32_t high, bool required = true) {
        const auto text = string(map, key, field, required);
        if (!text) {
            return std::nullopt;
        }
        uint64_t value = 0;
        std::size_t used = 0;
        try {
            value = std::stoull(*text, &used, 0);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used == 0 || used != text->size() || value < low || value > high) {
            error(map[key], join(field, key),
                  "'" + *text + "' is not a number in [" + std::to_string(low) + ", " +
                      std::to_string(high) + "]");
            return std::nullopt;
        }
        return static_cast<uint32_t>(value);
    }

    // A rate like "5Gbit" (qos_units.hh), in bit/s.
    std::optional<uint64_t> rate(const YAML::Node& map, const char* key, const std::string& field,
                                 bool required = false) {
        const auto text = string(map, key, field, required);
        if (!text) {
            return std::nullopt;
        }
        const auto value = parse_rate_bps(*text);
        if (!value || *value == 0) {
            error(map[key], join(field, key),
                  "'" + *text + "' is not a rate (e.g. 5Gbit, 500Mbit, 100000000)");
            return std::nullopt;
        }
        return value;
    }

    // A size like "64KiB" (qos_units.hh), in bytes.
    std::optional<uint64_t> bytes(const YAML::Node& map, const char* key,
                                  const std::string& field) {
        const auto text = string(map, key, field, false);
        if (!text) {
            return std::nullopt;
        }
        const auto value = parse_bytes(*text);
        if (!value || *value == 0) {
            error(map[key], join(field, key),
                  "'" + *text + "' is not a size (e.g. 64KiB, 1MB, 9000)");
            return std::nullopt;
        }
        return value;
    }

    std::optional<uint32_t> ipv4(const YAML::Node& map, const char* key, const std::string& field) {
        const auto text = string(map, key, field);
        if (!text) {
            return std::nullopt;
        }
        const auto address = parse_ipv4(*text);
        if (!address) {
            error(map[key], join(field, key), "'" + *text + "' is not an IPv4 address");
        }
        return address;
    }

    std::optional<mac_address> mac(const YAML::Node& map, const char* key, const std::string& field,
                                   bool required = true) {
        const auto text = string(map, key, field, required);
        if (!text) {
            return std::nullopt;
        }
        const auto mac = parse_mac(*text);
        if (!mac) {
            error(map[key], join(field, key),
                  "'" + *text + "' is not a MAC address (aa:bb:cc:dd:ee:ff)");
        } else if ((*mac)[0] & 0x01) {
            error(map[key], join(field, key), "'" + *text + "' is a multicast MAC");
            return std::nullopt;
        }
        return mac;
    }

    // An optional list of names, e.g. `security_groups: [web, db]`.
    std::vector<std::string> names(const YAML::Node& map, const char* key,
                                   const std::string& field) {
        std::vector<std::string> out;
        const auto node = map[key];
        if (!node.IsDefined() || node.IsNull()) {
            return out;
        }
        if (!node.IsSequence()) {
            error(node, join(field, key), "must be a list of names");
            return out;
        }
        for (std::size_t i = 0; i < node.size(); ++i) {
            if (!node[i].IsScalar()) {
                error(node[i], join(field, key) + "[" + std::to_string(i) + "]", "must be a name");
                continue;
            }
            out.push_back(node[i].Scalar());
        }
        return out;
    }

    static std::string join(const std::string& field, std::string_view key) {
        return field.empty() ? std::string(key) : field + "." + std::string(key);
    }
    static std::string index(const char* list, std::size_t i) {
        return std::string(list) + "[" + std::to_string(i) + "]";
    }

    std::vector<config_error> take_errors() { return std::move(_errors); }

  private:
    std::string _file;
    std::vector<config_error> _errors;
    int _last_line = 0;
};

void load_host(checker& check, const YAML::Node& root, host_config& config) {
    const auto host = root["host"];
    if (!host.IsDefined()) {
        check.error(root, "host", "missing");
        return;
    }
    if (!check.only_keys(host, "host",
                         {"name", "underlay", "gateway_mac", "conntrack", "qos", "metrics",
                          "workers", "rdma_limits"})) {
        return;
    }
    // Poll loops, each owning a share of the vNICs (worker/README.md); whether the host has the
    // cores for them is checked when jakirod starts, not here (the file may be checked elsewhere).
    config.workers =
        check.number(host, "workers", "host", 1, max_workers, false).value_or(config.workers);
    if (const auto m = host["metrics"]; m.IsDefined() && !m.IsNull()) {
        const std::string field = "host.metrics";
        if (check.only_keys(m, field, {"listen"})) {
            if (const auto text = check.string(m, "listen", field)) {
                config.metrics = parse_listen_address(*text);
                if (!config.metrics) {
                    check.error(m["listen"], field + ".listen",
                                "'" + *text + "' is not ADDR:PORT (e.g. 127.0.0.1:9417)");
                }
            }
        }
    }
    if (const auto q = host["qos"]; q.IsDefined()) {
        const std::string field = "host.qos";
        if (check.only_keys(q, field, {"uplink_rate", "uplink_burst"})) {
            const auto rate = check.rate(q, "uplink_rate", field, true);
            const auto burst = check.bytes(q, "uplink_burst", field);
            if (rate) {
                qos::uplink_qos u;
                u.rate_bps = *rate;
                u.burst_bytes = burst.value_or(qos::default_burst_bytes(*rate));
                if (const auto problem = qos::validate(u); !problem.empty()) {
                    check.error(q, field, problem);
                } else {
                    config.uplink_qos = u;
                }
            }
        }
    }
    if (const auto limits = host["rdma_limits"]; limits.IsDefined()) {
        const std::string field = "host.rdma_limits";
        if (check.only_keys(limits, field, {"mappings", "descriptors"})) {
            config.rdma_limits.mappings =
                check.number(limits, "mappings", field, 0, UINT32_MAX, false);
            config.rdma_limits.descriptors =
                check.number(limits, "descriptors", field, 0, UINT32_MAX, false);
        }
    }
    if (const auto conntrack = host["conntrack"]; conntrack.IsDefined()) {
        const std::string field = "host.conntrack";
        if (check.only_keys(conntrack, field,
                            {"max_flows", "tcp_established_timeout", "tcp_handshake_timeout",
                             "tcp_closing_timeout", "udp_timeout", "icmp_timeout"})) {
            auto& ct = config.conntrack;
            ct.max_flows = check.number(conntrack, "max_flows", field, 64, 1u << 24, false)
                               .value_or(ct.max_flows);
            auto timeout = [&](const char* key,
                               std::initializer_list<secgroup::flow_state> states) {
                const auto seconds = check.number(conntrack, key, field, 1, 7 * 86400, false);
                for (auto state : states) {
                    if (seconds) {
                        ct.timeouts.idle_s[static_cast<std::size_t>(state)] = *seconds;
                    }
                }
            };
            using secgroup::flow_state;
            timeout("tcp_established_timeout", {flow_state::tcp_established});
            timeout("tcp_handshake_timeout",
                    {flow_state::tcp_syn_sent, flow_state::tcp_syn_received});
            timeout("tcp_closing_timeout",
                    {flow_state::tcp_fin_wait, flow_state::tcp_closing, flow_state::tcp_closed});
            timeout("udp_timeout", {flow_state::udp, flow_state::other});
            timeout("icmp_timeout", {flow_state::icmp});
        }
    }
    config.name = check.string(host, "name", "host").value_or("");
    if (const auto mac = check.mac(host, "gateway_mac", "host", false)) {
        config.gateway_mac = *mac;
    }
    const auto underlay = host["underlay"];
    if (!underlay.IsDefined()) {
        check.error(host, "host.underlay", "missing");
        return;
    }
    if (!check.only_keys(underlay, "host.underlay", {"port", "ip", "mtu"})) {
        return;
    }
    config.underlay.port = check.string(underlay, "port", "host.underlay").value_or("");
    config.underlay.ip = check.ipv4(underlay, "ip", "host.underlay").value_or(0);
    config.underlay.mtu =
        check.number(underlay, "mtu", "host.underlay", min_underlay_mtu, max_underlay_mtu, false)
            .value_or(1500);
}

void load_control(checker& check, const YAML::Node& root, host_config& config) {
    const auto node = root["control"];
    if (!node.IsDefined() || node.IsNull()) {
        return;
    }
    if (!check.only_keys(node, "control", {"etcd", "vnic_port", "lease_ttl"})) {
        return;
    }
    control_config control;
    control.etcd = check.names(node, "etcd", "control");
    if (control.etcd.empty()) {
        check.error(node, "control.etcd", "needs at least one endpoint (http://ADDR:PORT)");
    }
    for (std::size_t i = 0; i < control.etcd.size(); ++i) {
        if (control.etcd[i].rfind("http://", 0) != 0) {
            check.error(node["etcd"][i], "control.etcd[" + std::to_string(i) + "]",
                        "'" + control.etcd[i] + "' is not http://ADDR:PORT (TLS is not supported)");
        }
    }
    control.vnic_port = check.string(node, "vnic_port", "control", false).value_or("");
    if (!control.vnic_port.empty() && control.vnic_port.find("{name}") == std::string::npos) {
        check.error(node["vnic_port"], "control.vnic_port",
                    "must contain {name} (each vNIC needs its own DPDK device)");
    }
    control.lease_ttl_s =
        check.number(node, "lease_ttl", "control", 2, 3600, false).value_or(control.lease_ttl_s);
    config.control = control;
    // The cluster's state comes from etcd: a host YAML that also lists it would be ignored.
    for (const char* key : {"vpcs", "security_groups", "vnics", "peers"}) {
        if (root[key].IsDefined() && !(root[key].IsSequence() && root[key].size() == 0)) {
            check.error(root[key], key, "comes from etcd when control: is set (remove it here)");
        }
    }
}

void load_hosts(checker& check, const YAML::Node& root, host_config& config) {
    const auto hosts = root["hosts"];
    if (!hosts.IsDefined() || hosts.IsNull()) {
        return;
    }
    if (!hosts.IsSequence()) {
        check.error(hosts, "hosts", "must be a list");
        return;
    }
    std::set<std::string> names;
    std::set<uint32_t> ips;
    for (std::size_t i = 0; i < hosts.size(); ++i) {
        const auto field = checker::index("hosts", i);
        const auto node = hosts[i];
        if (!check.only_keys(node, field, {"name", "underlay_ip", "overlay_key"})) {
            continue;
        }
        cluster_host host;
        host.name = check.string(node, "name", field).value_or("");
        host.underlay_ip = check.ipv4(node, "underlay_ip", field).value_or(0);
        if (const auto key = check.string(node, "overlay_key", field, false)) {
            if (!parse_overlay_key(*key)) {
                check.error(node["overlay_key"], field + ".overlay_key",
                            "is not a base64 X25519 key (44 characters, `jakiroctl overlay-key` "
                            "prints one)");
            } else {
                host.overlay_key = *key;
            }
        }
        if (!host.name.empty() && !names.insert(host.name).second) {
            check.error(node["name"], field + ".name", "duplicate host '" + host.name + "'");
        }
        if (host.underlay_ip != 0 && !ips.insert(host.underlay_ip).second) {
            check.error(node["underlay_ip"], field + ".underlay_ip",
                        "underlay address used by two hosts");
        }
        config.hosts.push_back(host);
    }
}

// `overlay:` (docs/configuration.md, "Overlay encryption"). The private key itself is read
// when jakirod starts (its file is root's alone); here only its path and the peers' public keys.
void load_overlay(checker& check, const YAML::Node& root, host_config& config) {
    const auto overlay = root["overlay"];
    if (!overlay.IsDefined() || overlay.IsNull()) {
        return;
    }
    const std::string field = "overlay";
    if (!check.only_keys(overlay, field,
                         {"encryption", "private_key", "epoch_file", "rekey_bytes",
                          "rekey_interval", "hosts"})) {
        return;
    }
    auto policy = [&](const YAML::Node& node,
                      const std::string& at) -> std::optional<overlay_encryption> {
        const auto text = check.string(node, "encryption", at, false);
        if (!text) {
            return std::nullopt;
        }
        for (auto e : {overlay_encryption::off, overlay_encryption::optional,
                       overlay_encryption::required}) {
            if (*text == overlay_encryption_name(e)) {
                return e;
            }
        }
        check.error(node["encryption"], at + ".encryption",
                    "'" + *text + "' is not off, optional or required");
        return std::nullopt;
    };
    auto& out = config.overlay;
    out.encryption = policy(overlay, field).value_or(overlay_encryption::off);
    out.private_key = check.string(overlay, "private_key", field, false).value_or("");
    out.epoch_file = check.string(overlay, "epoch_file", field, false).value_or("");
    out.rekey_bytes = check.bytes(overlay, "rekey_bytes", field).value_or(out.rekey_bytes);
    out.rekey_seconds = check.number(overlay, "rekey_interval", field, 1, 30 * 86400, false)
                            .value_or(out.rekey_seconds);
    if (const auto hosts = overlay["hosts"]; hosts.IsDefined() && !hosts.IsNull()) {
        if (!hosts.IsSequence()) {
            check.error(hosts, field + ".hosts", "must be a list");
            return;
        }
        std::set<uint32_t> seen;
        for (std::size_t i = 0; i < hosts.size(); ++i) {
            const auto at = checker::index("overlay.hosts", i);
            const auto node = hosts[i];
            if (!check.only_keys(node, at, {"ip", "public_key", "encryption"})) {
                continue;
            }
            overlay_host_config h;
            h.ip = check.ipv4(node, "ip", at).value_or(0);
            h.encryption = policy(node, at);
            if (const auto key = check.string(node, "public_key", at, false)) {
                if (!parse_overlay_key(*key)) {
                    check.error(node["public_key"], at + ".public_key",
                                "is not a base64 X25519 key (44 characters, `jakiroctl "
                                "overlay-key` prints one)");
                } else {
                    h.public_key = *key;
                }
            }
            if (h.ip != 0 && h.ip == config.underlay.ip) {
                check.error(node["ip"], at + ".ip", "is this host's own underlay address");
            }
            if (h.ip != 0 && !seen.insert(h.ip).second) {
                check.error(node["ip"], at + ".ip", "host listed twice");
            }
            out.hosts.push_back(h);
        }
    }
    if (out.may_seal() && out.private_key.empty()) {
        check.error(overlay, field + ".private_key",
                    "missing (needed unless every host's encryption is off)");
    }
}

void load_vpcs(checker& check, const YAML::Node& root, host_config& config) {
    const auto vpcs = root["vpcs"];
    if (!vpcs.IsDefined()) {
        return;
    }
    if (!vpcs.IsSequence()) {
        check.error(vpcs, "vpcs", "must be a list");
        return;
    }
    std::set<uint32_t> vnis;
    for (std::size_t i = 0; i < vpcs.size(); ++i) {
        const auto field = checker::index("vpcs", i);
        const auto node = vpcs[i];
        if (!check.only_keys(node, field, {"name", "vni"})) {
            continue;
        }
        vpc_config vpc;
        vpc.name = check.string(node, "name", field).value_or("");
        vpc.vni = check.number(node, "vni", field, 1, max_vni).value_or(0);
        if (!vpc.name.empty() && config.find_vpc(vpc.name)) {
            check.error(node["name"], field + ".name", "duplicate VPC name '" + vpc.name + "'");
        }
        if (vpc.vni != 0 && !vnis.insert(vpc.vni).second) {
            check.error(node["vni"], field + ".vni",
                        "VNI " + std::to_string(vpc.vni) + " used by two VPCs");
        }
        config.vpcs.push_back(vpc);
    }
}

// Address ownership inside a VPC: a (VPC, IPv4) or (VPC, IPv6) pair may be claimed by one vNIC
// or peer only.
struct vpc_claims {
    std::set<std::pair<std::string, uint32_t>> ipv4;
    std::set<std::pair<std::string, ipv6_address>> ipv6;
};

// vnics[].ip6 and peers[].ip6: an address the VPC's other members reach the vNIC at.
std::optional<ipv6_prefix> load_ip6(checker& check, const YAML::Node& node,
                                    const std::string& field, const std::string& vpc,
                                    vpc_claims& claimed, bool prefix_allowed) {
    if (!node["ip6"].IsDefined()) {
        return std::nullopt;
    }
    const auto text = check.string(node, "ip6", field);
    if (!text) {
        return std::nullopt;
    }
    const auto prefix = parse_ipv6_prefix(*text);
    if (!prefix || (!prefix_allowed && text->find('/') != std::string::npos)) {
        check.error(node["ip6"], field + ".ip6",
                    "'" + *text + "' is not an IPv6 address" +
                        (prefix_allowed ? "/prefix (e.g. 2001:2::1:1/64)" : " (e.g. 2001:2::1:2)"));
        return std::nullopt;
    }
    if (const auto problem = ipv6_vnic_address_problem(*prefix); !problem.empty()) {
        check.error(node["ip6"], field + ".ip6",
                    "'" + *text + "' is not a unicast address a vNIC may have: " + problem);
        return std::nullopt;
    }
    if (!claimed.ipv6.insert({vpc, prefix->address}).second) {
        check.error(
            node["ip6"], field + ".ip6",
            "address " + format_ipv6(prefix->address) + " already used in VPC '" + vpc + "'");
        return std::nullopt;
    }
    return prefix;
}

std::optional<secgroup::port_range> parse_ports(const std::string& text) {
    auto number = [](const std::string& part) -> std::optional<uint32_t> {
        uint32_t value = 0;
        auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
        if (ec != std::errc() || end != part.data() + part.size() || part.empty()) {
            return std::nullopt;
        }
        return value;
    };
    const auto dash = text.find('-');
    const auto low = number(text.substr(0, dash));
    const auto high = dash == std::string::npos ? low : number(text.substr(dash + 1));
    if (!low || !high || *low < 1 || *high > 65535 || *low > *high) {
        return std::nullopt;
    }
    return secgroup::port_range{static_cast<uint16_t>(*low), static_cast<uint16_t>(*high)};
}

void load_rules(checker& check, const YAML::Node& list, const std::string& field,
                secgroup::direction dir, std::vector<secgroup::rule>& out) {
    if (!list.IsSequence()) {
        check.error(list, field, "must be a list of rules");
        return;
    }
    const bool ingress = dir == secgroup::direction::ingress;
    const char* cidr_key = ingress ? "from" : "to";
    const char* group_key = ingress ? "from_group" : "to_group";
    for (std::size_t i = 0; i < list.size(); ++i) {
        const auto rule_field = checker::index(field.c_str(), i);
        const auto node = list[i];
        if (!check.only_keys(node, rule_field, {"proto", "ports", cidr_key, group_key})) {
            continue;
        }
        secgroup::rule rule;
        rule.line = node.Mark().line + 1;
        if (const auto text = check.string(node, "proto", rule_field)) {
            const auto proto = secgroup::parse_protocol(*text);
            if (!proto) {
                check.error(node["proto"], rule_field + ".proto",
                            "unknown protocol '" + *text + "' (tcp, udp, icmp, rdma or any)");
                continue;
            }
            rule.proto = *proto;
        } else {
            continue;
        }
        if (const auto text = check.string(node, "ports", rule_field, false)) {
            const bool has_ports =
                rule.proto == secgroup::protocol::tcp || rule.proto == secgroup::protocol::udp;
            const auto ports = parse_ports(*text);
            if (!has_ports) {
                check.error(node["ports"], rule_field + ".ports",
                            std::string("ports apply to tcp and udp only, not ") +
                                secgroup::to_string(rule.proto));
            } else if (!ports) {
                check.error(
                    node["ports"], rule_field + ".ports",
                    "'" + *text + "' is not a port or range in 1-65535 (e.g. 8080 or 1000-2000)");
            } else {
                rule.ports = *ports;
            }
        }
        const auto cidr_text = check.string(node, cidr_key, rule_field, false);
        const auto group_name = check.string(node, group_key, rule_field, false);
        if (cidr_text.has_value() == group_name.has_value()) {
            check.error(
                node, rule_field,
                std::string("needs exactly one of '") + cidr_key + "' and '" + group_key + "'");
            continue;
        }
        if (cidr_text) {
            // A CIDR of either family: a rule names IPv4 or IPv6 peers, never both (the implicit
            // all-egress rule below is the one that has both).
            const bool has_length = cidr_text->find('/') != std::string::npos;
            if (cidr_text->find(':') != std::string::npos) {
                const auto prefix6 = parse_ipv6_prefix(*cidr_text);
                if (!prefix6 || !has_length) {
                    check.error(node[cidr_key], rule_field + "." + cidr_key,
                                "'" + *cidr_text + "' is not an IPv6 CIDR (e.g. 2001:2::/64)");
                    continue;
                }
                rule.remote6 = secgroup::cidr6{prefix6->address, prefix6->length};
            } else {
                const auto prefix = parse_ipv4_prefix(*cidr_text);
                if (!prefix || !has_length) {
                    check.error(node[cidr_key], rule_field + "." + cidr_key,
                                "'" + *cidr_text +
                                    "' is not an IPv4 or IPv6 CIDR (e.g. 198.19.0.0/16 or "
                                    "2001:2::/64)");
                    continue;
                }
                rule.remote = secgroup::cidr{prefix->address, prefix->length};
            }
        } else {
            rule.remote_group = *group_name;
        }
        out.push_back(rule);
    }
}

// vnics[].qos: {rate, burst, rdma: {weight, min, max}, tcp: {...}}.
std::optional<qos::vnic_qos> load_vnic_qos(checker& check, const YAML::Node& node,
                                           const std::string& field) {
    if (!check.only_keys(node, field, {"rate", "burst", "rdma", "tcp"})) {
        return std::nullopt;
    }
    const auto rate = check.rate(node, "rate", field, true);
    if (!rate) {
        return std::nullopt;
    }
    qos::vnic_qos q;
    q.rate_bps = *rate;
    q.burst_bytes = check.bytes(node, "burst", field).value_or(qos::default_burst_bytes(*rate));
    bool ok = true;
    for (const auto c : qos::all_classes) {
        const char* name = qos::class_name(c);
        const auto cls = node[name];
        if (!cls.IsDefined()) {
            continue;
        }
        const std::string class_field = field + "." + name;
        if (!check.only_keys(cls, class_field, {"weight", "min", "max"})) {
            ok = false;
            continue;
        }
        auto& k = q.classes[qos::index_of(c)];
        const auto weight = check.number(cls, "weight", class_field, 1, qos::max_weight, false);
        // Absent keys keep qos::class_qos's defaults.
        k.weight = weight.value_or(k.weight);
        k.min_bps = check.rate(cls, "min", class_field).value_or(k.min_bps);
        k.max_bps = check.rate(cls, "max", class_field).value_or(k.max_bps);
    }
    if (const auto problem = qos::validate(q); !problem.empty()) {
        check.error(node, field, problem);
        return std::nullopt;
    }
    return ok ? std::optional<qos::vnic_qos>(q) : std::nullopt;
}

void load_security_groups(checker& check, const YAML::Node& root, host_config& config) {
    const auto groups = root["security_groups"];
    if (!groups.IsDefined()) {
        return;
    }
    if (!groups.IsSequence()) {
        check.error(groups, "security_groups", "must be a list");
        return;
    }
    for (std::size_t i = 0; i < groups.size(); ++i) {
        const auto field = checker::index("security_groups", i);
        const auto node = groups[i];
        if (!check.only_keys(node, field, {"name", "vpc", "ingress", "egress"})) {
            continue;
        }
        secgroup::group group;
        group.name = check.string(node, "name", field).value_or("");
        group.vpc = check.string(node, "vpc", field).value_or("");
        if (!group.name.empty() && config.find_group(group.vpc, group.name)) {
            check.error(node["name"], field + ".name",
                        "duplicate security group '" + group.name + "' in VPC '" + group.vpc + "'");
        }
        if (!group.vpc.empty() && !config.find_vpc(group.vpc)) {
            check.error(node["vpc"], field + ".vpc", "unknown VPC '" + group.vpc + "'");
        }
        if (node["ingress"].IsDefined() && !node["ingress"].IsNull()) {
            load_rules(check, node["ingress"], field + ".ingress", secgroup::direction::ingress,
                       group.ingress);
        }
        if (node["egress"].IsDefined() && !node["egress"].IsNull()) {
            load_rules(check, node["egress"], field + ".egress", secgroup::direction::egress,
                       group.egress);
        } else {
            // Cloud default: a group that says nothing about egress allows all of it.
            secgroup::rule all;
            all.remote = secgroup::cidr{0, 0};
            all.remote6 = secgroup::cidr6{};
            all.line = node.Mark().line + 1;
            group.egress.push_back(all);
        }
        config.security_groups.push_back(std::move(group));
    }
    // Remote groups are looked up in the rule's own VPC.
    for (std::size_t i = 0; i < config.security_groups.size(); ++i) {
        auto& group = config.security_groups[i];
        for (auto* rules : {&group.ingress, &group.egress}) {
            const bool ingress = rules == &group.ingress;
            for (std::size_t r = 0; r < rules->size(); ++r) {
                auto& rule = (*rules)[r];
                if (rule.remote_group.empty()) {
                    continue;
                }
                rule.remote_group_index = config.group_index(group.vpc, rule.remote_group);
                const auto* remote = config.find_group(group.vpc, rule.remote_group);
                const std::string rule_field =
                    checker::index("security_groups", i) + (ingress ? ".ingress" : ".egress") +
                    "[" + std::to_string(r) + "]." + (ingress ? "from_group" : "to_group");
                if (remote == nullptr) {
                    check.error_at(rule.line, rule_field,
                                   "unknown security group '" + rule.remote_group + "' in VPC '" +
                                       group.vpc + "'");
                }
            }
        }
    }
}

// Each name in `names` must be a group of `vpc`.
void check_group_names(checker& check, const YAML::Node& node, const std::string& field,
                       const std::vector<std::string>& names, const std::string& vpc,
                       const host_config& config) {
    for (std::size_t i = 0; i < names.size(); ++i) {
        const auto item = field + "[" + std::to_string(i) + "]";
        if (config.find_group(vpc, names[i]) == nullptr) {
            check.error(node[i], item,
                        "unknown security group '" + names[i] + "' in VPC '" + vpc + "'");
        }
    }
}

// A host YAML's vNICs are local and name their port; a cluster document's (`cluster`) name the
// host they live on instead, and their port is that host's business (control.vnic_port).
void load_vnics(checker& check, const YAML::Node& root, host_config& config, vpc_claims& claimed,
                bool cluster) {
    const auto vnics = root["vnics"];
    if (!vnics.IsDefined()) {
        return;
    }
    if (!vnics.IsSequence()) {
        check.error(vnics, "vnics", "must be a list");
        return;
    }
    std::set<std::string> names, ports;
    std::set<mac_address> macs;
    for (std::size_t i = 0; i < vnics.size(); ++i) {
        const auto field = checker::index("vnics", i);
        const auto node = vnics[i];
        if (cluster ? !check.only_keys(node, field,
                                       {"name", "vpc", "mac", "ip", "ip6", "host",
                                        "security_groups", "rdma", "qos", "limits"})
                    : !check.only_keys(node, field,
                                       {"name", "vpc", "mac", "ip", "ip6", "port", "netns",
                                        "security_groups", "rdma", "qos", "limits"})) {
            continue;
        }
        vnic_config vnic;
        if (cluster) {
            vnic.host = check.string(node, "host", field).value_or("");
        }
        vnic.name = check.string(node, "name", field).value_or("");
        if (vnic.name.size() > max_ifname) {
            check.error(node["name"], field + ".name", "longer than 15 characters");
        } else if (!vnic.name.empty() && !names.insert(vnic.name).second) {
            check.error(node["name"], field + ".name", "duplicate vNIC name '" + vnic.name + "'");
        }
        vnic.vpc = check.string(node, "vpc", field).value_or("");
        if (!vnic.vpc.empty() && !config.find_vpc(vnic.vpc)) {
            check.error(node["vpc"], field + ".vpc", "unknown VPC '" + vnic.vpc + "'");
        }
        if (const auto mac = check.mac(node, "mac", field)) {
            vnic.mac = *mac;
            if (!macs.insert(*mac).second) {
                check.error(node["mac"], field + ".mac", "MAC used by two vNICs");
            }
        }
        if (const auto text = check.string(node, "ip", field)) {
            const auto prefix = parse_ipv4_prefix(*text);
            if (!prefix || prefix->length == 0) {
                check.error(node["ip"], field + ".ip",
                            "'" + *text + "' is not an IPv4 address/prefix");
            } else {
                vnic.ip = *prefix;
                if (!claimed.ipv4.insert({vnic.vpc, prefix->address}).second) {
                    check.error(node["ip"], field + ".ip",
                                "address " + format_ipv4(prefix->address) +
                                    " already used in VPC '" + vnic.vpc + "'");
                }
            }
        }
        vnic.ip6 = load_ip6(check, node, field, vnic.vpc, claimed, true);
        vnic.port = cluster ? "" : check.string(node, "port", field).value_or("");
        const auto device = vnic.port.substr(0, vnic.port.find(','));
        if (!device.empty() && !ports.insert(device).second) {
            check.error(node["port"], field + ".port", "DPDK device '" + device + "' used twice");
        }
        if (node["netns"].IsDefined()) {
            vnic.netns = check.string(node, "netns", field).value_or("");
            // A name under /run/netns (ip netns), never a path: the endpoint must not be bound
            // in whatever namespace a file elsewhere happens to pin.
            if (vnic.netns.empty() || vnic.netns[0] == '.' ||
                vnic.netns.find('/') != std::string::npos || vnic.netns.size() > 255) {
                check.error(node["netns"], field + ".netns",
                            "'" + vnic.netns + "' is not a network namespace name (ip netns)");
            }
        }
        vnic.security_groups = check.names(node, "security_groups", field);
        check_group_names(check, node["security_groups"], field + ".security_groups",
                          vnic.security_groups, vnic.vpc, config);
        if (const auto rdma = node["rdma"]; rdma.IsDefined()) {
            const std::string rdma_field = field + ".rdma";
            if (check.only_keys(rdma, rdma_field,
                                {"max_qps", "max_rc_qps", "max_pds", "max_mrs", "max_mws",
                                 "max_mr_bytes", "max_cqs", "max_cqes", "max_srqs", "max_wqes",
                                 "max_contexts", "max_local_work_rate", "max_cm_ids",
                                 "max_cm_backlog", "max_cm_held_reqs", "max_qp1_queue"})) {
                // max_rc_qps: the older name, from before UC and UD QPs counted too.
                const char* key = rdma["max_qps"].IsDefined() ? "max_qps" : "max_rc_qps";
                if (rdma["max_qps"].IsDefined() && rdma["max_rc_qps"].IsDefined()) {
                    check.error(rdma["max_rc_qps"], rdma_field + ".max_rc_qps",
                                "the older name of max_qps; give only one of them");
                }
                vnic.rdma.max_qps =
                    check.number(rdma, key, rdma_field, 0, rdma_config::max_qps_limit, false)
                        .value_or(vnic.rdma.max_qps);
                auto quota = [&](const char* name, uint32_t& value, uint32_t high) {
                    value = check.number(rdma, name, rdma_field, 0, high, false).value_or(value);
                };
                quota("max_pds", vnic.rdma.max_pds, rdma_config::max_pds_limit);
                quota("max_mrs", vnic.rdma.max_mrs, rdma_config::max_mrs_limit);
                quota("max_mws", vnic.rdma.max_mws, rdma_config::max_mws_limit);
                quota("max_cqs", vnic.rdma.max_cqs, rdma_config::max_cqs_limit);
                quota("max_cqes", vnic.rdma.max_cqes, rdma_config::max_cqes_limit);
                quota("max_srqs", vnic.rdma.max_srqs, rdma_config::max_srqs_limit);
                quota("max_wqes", vnic.rdma.max_wqes, rdma_config::max_wqes_limit);
                quota("max_contexts", vnic.rdma.max_contexts, rdma_config::max_contexts_limit);
                vnic.rdma.max_local_work_rate =
                    check
                        .number(rdma, "max_local_work_rate", rdma_field, 1,
                                rdma_config::max_local_work_rate_limit, false)
                        .value_or(vnic.rdma.max_local_work_rate);
                quota("max_cm_ids", vnic.rdma.max_cm_ids, rdma_config::max_cm_ids_limit);
                quota("max_cm_backlog", vnic.rdma.max_cm_backlog,
                      rdma_config::max_cm_backlog_limit);
                quota("max_cm_held_reqs", vnic.rdma.max_cm_held_reqs,
                      rdma_config::max_cm_held_reqs_limit);
                quota("max_qp1_queue", vnic.rdma.max_qp1_queue, rdma_config::max_qp1_queue_limit);
                if (const auto bytes = check.bytes(rdma, "max_mr_bytes", rdma_field)) {
                    if (*bytes > rdma_config::max_mr_bytes_limit) {
                        check.error(rdma["max_mr_bytes"], rdma_field + ".max_mr_bytes",
                                    "larger than 4TiB (4096 MRs of 1GiB)");
                    } else {
                        vnic.rdma.max_mr_bytes = *bytes;
                    }
                }
            }
        }
        if (const auto q = node["qos"]; q.IsDefined()) {
            vnic.qos = load_vnic_qos(check, q, field + ".qos");
        }
        if (const auto limits = node["limits"]; limits.IsDefined()) {
            const std::string limits_field = field + ".limits";
            if (check.only_keys(limits, limits_field,
                                {"max_flows", "max_packet_buffers", "max_packet_rate"})) {
                vnic.limits.max_flows = check.number(limits, "max_flows", limits_field, 0,
                                                     vnic_limits::max_flows_limit, false);
                vnic.limits.max_packet_buffers =
                    check.number(limits, "max_packet_buffers", limits_field, 1,
                                 vnic_limits::max_packet_buffers_limit, false);
                vnic.limits.max_packet_rate =
                    check.number(limits, "max_packet_rate", limits_field, 1,
                                 vnic_limits::max_packet_rate_limit, false);
            }
        }
        config.vnics.push_back(vnic);
    }
    const auto uplink = config.underlay.port.substr(0, config.underlay.port.find(','));
    if (!uplink.empty() && ports.count(uplink)) {
        check.error(root["host"]["underlay"]["port"], "host.underlay.port",
                    "DPDK device '" + uplink + "' is also a vNIC port");
    }
    // A vnet face may be the uplink too (vnet_face/vnet_face.hh: it moves UDP GSO
    // super-datagrams between hosts), but not the same interface as a vNIC's.
}

void load_peers(checker& check, const YAML::Node& root, host_config& config, vpc_claims& claimed) {
    const auto peers = root["peers"];
    if (!peers.IsDefined()) {
        return;
    }
    if (!peers.IsSequence()) {
        check.error(peers, "peers", "must be a list");
        return;
    }
    for (std::size_t i = 0; i < peers.size(); ++i) {
        const auto field = checker::index("peers", i);
        const auto node = peers[i];
        if (!check.only_keys(node, field, {"vpc", "ip", "ip6", "host", "mac", "security_groups"})) {
            continue;
        }
        peer_config peer;
        peer.vpc = check.string(node, "vpc", field).value_or("");
        if (!peer.vpc.empty() && !config.find_vpc(peer.vpc)) {
            check.error(node["vpc"], field + ".vpc", "unknown VPC '" + peer.vpc + "'");
        }
        if (const auto ip = check.ipv4(node, "ip", field)) {
            peer.ip = *ip;
            if (!claimed.ipv4.insert({peer.vpc, *ip}).second) {
                check.error(
                    node["ip"], field + ".ip",
                    "address " + format_ipv4(*ip) + " already used in VPC '" + peer.vpc + "'");
            }
        }
        if (const auto ip6 = load_ip6(check, node, field, peer.vpc, claimed, false)) {
            peer.ip6 = ip6->address;
        }
        if (const auto host = check.ipv4(node, "host", field)) {
            peer.host = *host;
            if (*host == config.underlay.ip) {
                check.error(node["host"], field + ".host",
                            "is this host's own underlay address (local vNICs need no peer entry)");
            }
        }
        peer.mac = check.mac(node, "mac", field, false);
        peer.security_groups = check.names(node, "security_groups", field);
        check_group_names(check, node["security_groups"], field + ".security_groups",
                          peer.security_groups, peer.vpc, config);
        config.peers.push_back(peer);
    }
}

}  // namespace

config_result load_host_config_text(const std::string& yaml_text, const std::string& file_name) {
    config_result result;
    result.config.source_file = file_name;
    checker check(file_name);
    YAML::Node root;
    try {
        root = YAML::Load(yaml_text);
    } catch (const YAML::ParserException& e) {
        result.errors.push_back({file_name, e.mark.line + 1, "", e.msg});
        return result;
    }
    if (!root.IsMap()) {
        result.errors.push_back({file_name, 1, "", "top level must be a mapping"});
        return result;
    }
    try {
        check.only_keys(
            root, "", {"host", "control", "overlay", "vpcs", "security_groups", "vnics", "peers"});
        load_host(check, root, result.config);
        load_overlay(check, root, result.config);
        load_control(check, root, result.config);
        load_vpcs(check, root, result.config);
        load_security_groups(check, root, result.config);
        vpc_claims claimed;
        load_vnics(check, root, result.config, claimed, false);
        load_peers(check, root, result.config, claimed);
    } catch (const YAML::Exception& e) {
        check.error(root, "", std::string("unexpected YAML structure: ") + e.what());
    }
    result.errors = check.take_errors();
    return result;
}

config_result load_cluster_config_node(const YAML::Node& root, const std::string& file_name) {
    config_result result;
    result.config.source_file = file_name;
    checker check(file_name);
    if (!root.IsMap()) {
        result.errors.push_back({file_name, 1, "", "top level must be a mapping"});
        return result;
    }
    try {
        check.only_keys(root, "", {"hosts", "vpcs", "security_groups", "vnics"});
        load_hosts(check, root, result.config);
        load_vpcs(check, root, result.config);
        load_security_groups(check, root, result.config);
        vpc_claims claimed;
        load_vnics(check, root, result.config, claimed, true);
    } catch (const YAML::Exception& e) {
        check.error(root, "", std::string("unexpected YAML structure: ") + e.what());
    }
    result.errors = check.take_errors();
    return result;
}

config_result load_cluster_config_text(const std::string& yaml_text, const std::string& file_name) {
    YAML::Node root;
    try {
        root = YAML::Load(yaml_text);
    } catch (const YAML::ParserException& e) {
        config_result result;
        result.errors.push_back({file_name, e.mark.line + 1, "", e.msg});
        return result;
    }
    return load_cluster_config_node(root, file_name);
}

std::optional<vnic_config> load_cluster_vnic_text(const std::string& flow_text,
                                                  host_config& context, std::string& error) {
    checker check("vnic");
    try {
        YAML::Node root;
        if (auto entry = parse_flow_mapping(flow_text)) {
            YAML::Node list(YAML::NodeType::Sequence);
            list.push_back(*entry);
            root["vnics"] = list;
        } else {
            root = YAML::Load("vnics:\n- " + flow_text + "\n");
        }
        vpc_claims claimed;
        const auto before = context.vnics.size();
        load_vnics(check, root, context, claimed, true);
        std::optional<vnic_config> out;
        if (context.vnics.size() > before) {
            out = std::move(context.vnics.back());
            context.vnics.pop_back();
        }
        auto errors = check.take_errors();
        if (!errors.empty()) {
            // "vnics[0].vpc: unknown VPC 'green'" reads as the record's own field.
            auto field = errors[0].field;
            if (field.rfind("vnics[0]", 0) == 0) {
                field = "vnics[" + std::string("*") + "]" + field.substr(8);
            }
            error = field + ": " + errors[0].message;
            return std::nullopt;
        }
        return out;
    } catch (const YAML::Exception& e) {
        error = e.what();
        return std::nullopt;
    }
}

config_result load_host_config_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) {
        config_result result;
        result.errors.push_back({path, 0, "", "cannot be read"});
        return result;
    }
    std::stringstream text;
    text << in.rdbuf();
    return load_host_config_text(text.str(), path);
}

}  // namespace jakiro
