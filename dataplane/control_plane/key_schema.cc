#include "dataplane/control_plane/key_schema.hh"

namespace jakiro::control_plane {

std::string_view kind_segment(record_kind kind) {
    switch (kind) {
        case record_kind::vpc:
            return "vpcs";
        case record_kind::group:
            return "groups";
        case record_kind::vnic:
            return "vnics";
        case record_kind::host:
            return "hosts";
        case record_kind::alive:
            return "alive";
    }
    return "";
}

std::string prefix_of(record_kind kind) {
    return std::string(key_root) + std::string(kind_segment(kind)) + "/";
}

std::string key_of(const record_key& key) {
    std::string out = prefix_of(key.kind);
    if (key.kind == record_kind::group) {
        out += key.vpc + "/";
    }
    return out + key.name;
}

bool valid_name(std::string_view name) {
    if (name.empty() || name.size() > 253) {
        return false;
    }
    for (char c : name) {
        if (c <= ' ' || c > '~' || c == '/') {
            return false;
        }
    }
    return true;
}

std::optional<record_key> parse_key(std::string_view key) {
    if (key.substr(0, key_root.size()) != key_root) {
        return std::nullopt;
    }
    key.remove_prefix(key_root.size());
    const auto slash = key.find('/');
    if (slash == std::string_view::npos) {
        return std::nullopt;
    }
    const auto segment = key.substr(0, slash);
    auto rest = key.substr(slash + 1);
    record_key out;
    bool found = false;
    for (auto kind : {record_kind::vpc, record_kind::group, record_kind::vnic, record_kind::host,
                      record_kind::alive}) {
        if (segment == kind_segment(kind)) {
            out.kind = kind;
            found = true;
        }
    }
    if (!found) {
        return std::nullopt;
    }
    if (out.kind == record_kind::group) {
        const auto inner = rest.find('/');
        if (inner == std::string_view::npos) {
            return std::nullopt;
        }
        out.vpc = std::string(rest.substr(0, inner));
        rest.remove_prefix(inner + 1);
        if (!valid_name(out.vpc)) {
            return std::nullopt;
        }
    }
    if (!valid_name(rest)) {
        return std::nullopt;
    }
    out.name = std::string(rest);
    return out;
}

std::string prefix_range_end(std::string_view prefix) {
    std::string end(prefix);
    // Drop trailing 0xff bytes (they cannot be incremented), then add one to the last byte.
    while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) {
        end.pop_back();
    }
    if (end.empty()) {
        return std::string(1, '\0');  // etcd: "\0" means "to the end of the key space"
    }
    end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
    return end;
}

}  // namespace jakiro::control_plane
