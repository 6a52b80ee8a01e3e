#include "cni/request.hh"

#include <cctype>
#include <set>

#include "dataplane/config/host_config.hh"

namespace jakiro::cni {

namespace {

constexpr std::size_t max_stdin = 1 << 20;
constexpr std::size_t max_path = 1024;
constexpr uint32_t max_ready_timeout_ms = 120000;

// Keys of the spec's network configuration that this plugin accepts and ignores, and its own.
const std::set<std::string> known_keys = {
    // spec
    "cniVersion", "name", "type", "args", "ipMasq", "ipam", "dns", "runtimeConfig", "capabilities",
    "prevResult", "cniVersions", "disableCheck",
    // this plugin
    "host_config", "socket", "vpc", "subnet", "range_start", "range_end", "gateway", "routes",
    "security_groups", "qos", "port", "data_dir", "ready_timeout_ms"};

cni_error fail(error_code code, std::string msg, std::string details = {}) {
    return cni_error{code, std::move(msg), std::move(details)};
}

bool printable(const std::string& text) {
    for (unsigned char c : text) {
        if (c < 0x20 || c == 0x7f) {
            return false;
        }
    }
    return true;
}

bool absolute_path(const std::string& text) {
    if (text.empty() || text[0] != '/' || text.size() > max_path || !printable(text)) {
        return false;
    }
    // No "." or ".." segment: the path means what it says.
    std::size_t start = 1;
    while (start <= text.size()) {
        const auto end = std::min(text.find('/', start), text.size());
        const auto segment = text.substr(start, end - start);
        if (segment == "." || segment == "..") {
            return false;
        }
        start = end + 1;
    }
    return true;
}

std::optional<std::string> scalar(const YAML::Node& root, const char* key, cni_error& error) {
    const auto node = root[key];
    if (!node.IsDefined() || node.IsNull()) {
        return std::nullopt;
    }
    if (!node.IsScalar()) {
        error = fail(error_code::invalid_config, std::string(key) + ": expected a string");
        return std::nullopt;
    }
    return node.Scalar();
}

bool parse_groups(const YAML::Node& node, const std::string& field, std::vector<std::string>& out,
                  cni_error& error) {
    if (!node.IsSequence()) {
        error = fail(error_code::invalid_config, field + ": expected a list of group names");
        return false;
    }
    out.clear();
    for (const auto& item : node) {
        if (!item.IsScalar() || !valid_identifier(item.Scalar(), 63)) {
            error = fail(error_code::invalid_config,
                         field + ": '" + (item.IsScalar() ? item.Scalar() : std::string("?")) +
                             "' is not a group name ([A-Za-z0-9][A-Za-z0-9_.-]*, at most 63)");
            return false;
        }
        out.push_back(item.Scalar());
    }
    return true;
}

bool parse_address(const std::string& text, const std::string& field, uint32_t& out,
                   cni_error& error) {
    const auto ip = parse_ipv4(text);
    if (!ip) {
        error = fail(error_code::invalid_config, field + ": '" + text + "' is not an IPv4 address");
        return false;
    }
    out = *ip;
    return true;
}

bool in_subnet(const network_config& c, uint32_t ip) {
    const uint32_t mask = c.subnet_length == 0 ? 0 : ~uint32_t{0} << (32 - c.subnet_length);
    return (ip & mask) == c.subnet;
}

// Network configuration keys (stdin), before the per-container overrides.
bool parse_config(const YAML::Node& root, network_config& c, cni_error& error) {
    for (const auto& entry : root) {
        const auto key = entry.first.as<std::string>("");
        if (!known_keys.count(key)) {
            error = fail(error_code::unsupported_field,
                         "unknown key '" + key + "' in the network configuration");
            return false;
        }
    }
    error = {};
    const auto version = scalar(root, "cniVersion", error);
    if (!version) {
        error = fail(error_code::invalid_config, "cniVersion: missing");
        return false;
    }
    c.cni_version = *version;
    if (c.cni_version != supported_version) {
        error = fail(
            error_code::incompatible_version,
            "cniVersion " + c.cni_version + " is not supported (only " + supported_version + ")");
        return false;
    }
    const auto name = scalar(root, "name", error);
    if (!name || !valid_identifier(*name, 64)) {
        error = fail(error_code::invalid_config,
                     "name: '" + name.value_or("") +
                         "' is not a network name ([A-Za-z0-9][A-Za-z0-9_.-]*, at most 64)");
        return false;
    }
    c.name = *name;
    const auto host_config = scalar(root, "host_config", error);
    if (!host_config || !absolute_path(*host_config)) {
        error = fail(error_code::invalid_config,
                     "host_config: expected the absolute path of the host YAML jakirod runs with");
        return false;
    }
    c.host_config = *host_config;
    if (const auto socket = scalar(root, "socket", error)) {
        if (!absolute_path(*socket) || socket->size() > 107) {
            error = fail(error_code::invalid_config,
                         "socket: expected an absolute path of at most 107 characters");
            return false;
        }
        c.socket = *socket;
    }
    const auto vpc = scalar(root, "vpc", error);
    if (!vpc || !valid_identifier(*vpc, 63)) {
        error =
            fail(error_code::invalid_config,
                 "vpc: '" + vpc.value_or("") + "' is not a VPC name ([A-Za-z0-9][A-Za-z0-9_.-]*)");
        return false;
    }
    c.vpc = *vpc;
    const auto subnet = scalar(root, "subnet", error);
    const auto prefix = subnet ? parse_ipv4_prefix(*subnet) : std::nullopt;
    if (!prefix || prefix->length < 8 || prefix->length > 30) {
        error = fail(error_code::invalid_config,
                     "subnet: '" + subnet.value_or("") + "' is not an IPv4 prefix of /8 to /30");
        return false;
    }
    c.subnet_length = prefix->length;
    const uint32_t mask = ~uint32_t{0} << (32 - prefix->length);
    c.subnet = prefix->address & mask;
    if (c.subnet != prefix->address) {
        error = fail(error_code::invalid_config,
                     "subnet: '" + *subnet + "' has host bits set (did you mean " +
                         format_ipv4(c.subnet) + "/" + std::to_string(int{prefix->length}) + "?)");
        return false;
    }
    c.range_start = c.subnet + 1;
    c.range_end = (c.subnet | ~mask) - 1;
    for (const char* key : {"range_start", "range_end", "gateway"}) {
        if (const auto text = scalar(root, key, error)) {
            uint32_t ip = 0;
            if (!parse_address(*text, key, ip, error)) {
                return false;
            }
            if (!in_subnet(c, ip)) {
                error = fail(error_code::invalid_config,
                             std::string(key) + ": " + *text + " is outside the subnet " + *subnet);
                return false;
            }
            (std::string(key) == "range_start" ? c.range_start
             : std::string(key) == "range_end" ? c.range_end
                                               : c.gateway.emplace()) = ip;
        }
        if (!error.msg.empty()) {
            return false;
        }
    }
    if (c.range_start > c.range_end) {
        error = fail(error_code::invalid_config, "range_start is after range_end");
        return false;
    }
    if (const auto routes = root["routes"]; routes.IsDefined()) {
        if (!routes.IsSequence()) {
            error = fail(error_code::invalid_config, "routes: expected a list of {dst, gw}");
            return false;
        }
        for (const auto& r : routes) {
            const auto dst = r.IsMap() && r["dst"].IsDefined() && r["dst"].IsScalar()
                                 ? parse_ipv4_prefix(r["dst"].Scalar())
                                 : std::nullopt;
            if (!dst) {
                error = fail(error_code::invalid_config, "routes[].dst: expected an IPv4 prefix");
                return false;
            }
            route out{dst->address, dst->length, std::nullopt};
            if (r["gw"].IsDefined()) {
                uint32_t gw = 0;
                if (!r["gw"].IsScalar() ||
                    !parse_address(r["gw"].Scalar(), "routes[].gw", gw, error)) {
                    if (error.msg.empty()) {
                        error =
                            fail(error_code::invalid_config, "routes[].gw: expected an address");
                    }
                    return false;
                }
                out.gw = gw;
            }
            c.routes.push_back(out);
        }
    }
    if (root["security_groups"].IsDefined() &&
        !parse_groups(root["security_groups"], "security_groups", c.security_groups, error)) {
        return false;
    }
    if (const auto qos = root["qos"]; qos.IsDefined() && !qos.IsNull()) {
        if (!qos.IsMap()) {
            error = fail(error_code::invalid_config,
                         "qos: expected a mapping as vnics[].qos in the host YAML");
            return false;
        }
        c.qos = qos;
    }
    if (const auto port = scalar(root, "port", error)) {
        if (port->find("{name}") == std::string::npos || port->size() > 200 || !printable(*port)) {
            error = fail(error_code::invalid_config,
                         "port: expected a port template naming {name}, e.g. vnet:iface={name}");
            return false;
        }
        c.port = *port;
    }
    if (const auto dir = scalar(root, "data_dir", error)) {
        if (!absolute_path(*dir) || dir->size() > 200) {
            error = fail(error_code::invalid_config,
                         "data_dir: expected an absolute path of at most 200 characters, no '..'");
            return false;
        }
        c.data_dir = *dir;
    }
    if (const auto timeout = scalar(root, "ready_timeout_ms", error)) {
        try {
            const auto value = root["ready_timeout_ms"].as<uint64_t>();
            if (value > max_ready_timeout_ms) {
                throw YAML::Exception(YAML::Mark::null_mark(), "too large");
            }
            c.ready_timeout_ms = static_cast<uint32_t>(value);
        } catch (const YAML::Exception&) {
            error = fail(error_code::invalid_config, "ready_timeout_ms: expected 0 to " +
                                                         std::to_string(max_ready_timeout_ms) +
                                                         " milliseconds");
            return false;
        }
    }
    return error.msg.empty();
}

bool override_ip(const std::string& text, const std::string& field, network_config& c,
                 cni_error& error) {
    uint32_t ip = 0;
    if (!parse_address(text, field, ip, error)) {
        return false;
    }
    if (ip < c.range_start || ip > c.range_end || (c.gateway && ip == *c.gateway)) {
        error = fail(error_code::invalid_config,
                     field + ": " + text + " is not in the network's range " +
                         format_ipv4(c.range_start) + "-" + format_ipv4(c.range_end));
        return false;
    }
    c.requested_ip = ip;
    return true;
}

// Per-container overrides: `args.jakiro` in the configuration (what a runtime's per-container
// arguments become), then CNI_ARGS, which win.
bool apply_overrides(const YAML::Node& root, const std::string& cni_args, network_config& c,
                     cni_error& error) {
    const auto args_root = root["args"];
    if (args_root.IsDefined() && !args_root.IsMap()) {
        error = fail(error_code::invalid_config, "args: expected a mapping");
        return false;
    }
    if (args_root.IsDefined() && args_root.IsMap() && args_root["jakiro"].IsDefined()) {
        const auto args = args_root["jakiro"];
        if (!args.IsMap()) {
            error = fail(error_code::invalid_config, "args.jakiro: expected a mapping");
            return false;
        }
        for (const auto& entry : args) {
            const auto key = entry.first.as<std::string>("");
            if (key == "security_groups") {
                if (!parse_groups(entry.second, "args.jakiro.security_groups", c.security_groups,
                                  error)) {
                    return false;
                }
            } else if (key == "qos") {
                if (!entry.second.IsMap()) {
                    error = fail(error_code::invalid_config, "args.jakiro.qos: expected a mapping");
                    return false;
                }
                c.qos = entry.second;
            } else if (key == "ip") {
                if (!entry.second.IsScalar() ||
                    !override_ip(entry.second.Scalar(), "args.jakiro.ip", c, error)) {
                    if (error.msg.empty()) {
                        error =
                            fail(error_code::invalid_config, "args.jakiro.ip: expected an address");
                    }
                    return false;
                }
            } else {
                error = fail(error_code::unsupported_field,
                             "args.jakiro: unknown key '" + key + "' (security_groups, qos, ip)");
                return false;
            }
        }
    }
    // CNI_ARGS: "K=V;K=V". Keys meant for other plugins (K8S_POD_NAME, ...) are ignored.
    std::size_t start = 0;
    while (start < cni_args.size()) {
        const auto end = std::min(cni_args.find(';', start), cni_args.size());
        const auto pair = cni_args.substr(start, end - start);
        start = end + 1;
        const auto eq = pair.find('=');
        if (pair.empty()) {
            continue;
        }
        if (eq == std::string::npos) {
            error =
                fail(error_code::invalid_environment, "CNI_ARGS: '" + pair + "' is not KEY=VALUE");
            return false;
        }
        const auto key = pair.substr(0, eq);
        const auto value = pair.substr(eq + 1);
        if (key == "IP") {
            if (!override_ip(value, "CNI_ARGS IP", c, error)) {
                return false;
            }
        } else if (key == "JAKIRO_SECURITY_GROUPS") {
            YAML::Node list(YAML::NodeType::Sequence);
            std::size_t s = 0;
            while (s <= value.size() && !value.empty()) {
                const auto e = std::min(value.find(',', s), value.size());
                list.push_back(value.substr(s, e - s));
                s = e + 1;
            }
            if (!parse_groups(list, "CNI_ARGS JAKIRO_SECURITY_GROUPS", c.security_groups, error)) {
                return false;
            }
        } else if (key == "JAKIRO_QOS_RATE") {
            if (!c.qos.IsMap()) {
                c.qos = YAML::Node(YAML::NodeType::Map);
            } else {
                c.qos = YAML::Clone(c.qos);
            }
            c.qos["rate"] = value;
        }
    }
    return true;
}

}  // namespace

bool valid_identifier(const std::string& text, std::size_t max) {
    if (text.empty() || text.size() > max || !std::isalnum(static_cast<unsigned char>(text[0]))) {
        return false;
    }
    for (unsigned char c : text) {
        if (!std::isalnum(c) && c != '_' && c != '.' && c != '-') {
            return false;
        }
    }
    return true;
}

bool valid_ifname(const std::string& text) {
    if (text.empty() || text.size() > 15 || text == "." || text == "..") {
        return false;
    }
    for (unsigned char c : text) {
        if (c == '/' || c == ':' || std::isspace(c) || c < 0x21 || c > 0x7e) {
            return false;
        }
    }
    return true;
}

std::optional<request> parse_request(const std::map<std::string, std::string>& env,
                                     const std::string& stdin_text, cni_error& error) {
    const auto get = [&](const char* name) {
        const auto it = env.find(name);
        return it == env.end() ? std::string() : it->second;
    };
    request r;
    const auto cmd = get("CNI_COMMAND");
    if (cmd == "VERSION") {
        r.cmd = command::version;
        return r;
    }
    if (cmd == "ADD") {
        r.cmd = command::add;
    } else if (cmd == "DEL") {
        r.cmd = command::del;
    } else if (cmd == "CHECK") {
        r.cmd = command::check;
    } else {
        error = fail(error_code::invalid_environment,
                     "CNI_COMMAND: '" + cmd + "' is not ADD, DEL, CHECK or VERSION");
        return std::nullopt;
    }
    r.container_id = get("CNI_CONTAINERID");
    if (!valid_identifier(r.container_id, 128)) {
        error = fail(error_code::invalid_environment,
                     "CNI_CONTAINERID: expected [A-Za-z0-9][A-Za-z0-9_.-]*, at most 128 "
                     "characters");
        return std::nullopt;
    }
    r.ifname = get("CNI_IFNAME");
    if (!valid_ifname(r.ifname)) {
        error = fail(error_code::invalid_environment,
                     "CNI_IFNAME: expected an interface name (1 to 15 characters, no '/', ':' or "
                     "spaces, not '.' or '..')");
        return std::nullopt;
    }
    r.netns = get("CNI_NETNS");
    if ((r.cmd != command::del || !r.netns.empty()) && !absolute_path(r.netns)) {
        error = fail(error_code::invalid_environment,
                     "CNI_NETNS: expected the absolute path of the container's network namespace");
        return std::nullopt;
    }
    if (stdin_text.size() > max_stdin) {
        error = fail(error_code::undecodable, "the network configuration is over 1 MiB");
        return std::nullopt;
    }
    YAML::Node root;
    try {
        root = YAML::Load(stdin_text);
    } catch (const YAML::Exception& e) {
        error = fail(error_code::undecodable,
                     "the network configuration on stdin is not JSON: " + e.msg,
                     "line " + std::to_string(e.mark.line + 1));
        return std::nullopt;
    }
    if (!root.IsMap()) {
        error = fail(error_code::undecodable,
                     "the network configuration on stdin is not a JSON object");
        return std::nullopt;
    }
    try {
        if (!parse_config(root, r.config, error) ||
            !apply_overrides(root, get("CNI_ARGS"), r.config, error)) {
            return std::nullopt;
        }
    } catch (const YAML::Exception& e) {
        error = fail(error_code::invalid_config, "the network configuration: " + e.msg);
        return std::nullopt;
    }
    return r;
}

}  // namespace jakiro::cni
