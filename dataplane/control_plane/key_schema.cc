#include "dataplane/control_plane/key_schema.hh"

#include <vector>

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
        case record_kind::home:
            return "homes";
        case record_kind::reader:
            return "readers";
        case record_kind::schema:
            return "schema";
    }
    return "";
}

std::string prefix_of(record_kind kind) {
    return std::string(key_root) + std::string(kind_segment(kind)) + "/";
}

std::string prefix_of(record_kind kind, std::string_view vpc) {
    return prefix_of(kind) + std::string(vpc) + "/";
}

std::string homes_prefix_of(std::string_view host) {
    return prefix_of(record_kind::home) + std::string(host) + "/";
}

std::string schema_marker_key() {
    return std::string(key_root) + std::string(kind_segment(record_kind::schema));
}

std::string key_of(const record_key& key) {
    switch (key.kind) {
        case record_kind::schema:
            return schema_marker_key();
        case record_kind::group:
            return prefix_of(key.kind, key.vpc) + key.name;
        case record_kind::vnic:
            return key.legacy ? prefix_of(key.kind) + key.name
                              : prefix_of(key.kind, key.vpc) + key.name;
        case record_kind::home:
            return homes_prefix_of(key.host) + key.vpc + "/" + key.name;
        default:
            return prefix_of(key.kind) + key.name;
    }
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
    std::vector<std::string_view> segments;
    for (;;) {
        const auto slash = key.find('/');
        segments.push_back(key.substr(0, slash));
        if (slash == std::string_view::npos) {
            break;
        }
        key.remove_prefix(slash + 1);
    }
    for (std::size_t i = 1; i < segments.size(); ++i) {
        if (!valid_name(segments[i])) {
            return std::nullopt;
        }
    }
    record_key out;
    bool found = false;
    for (auto kind :
         {record_kind::vpc, record_kind::group, record_kind::vnic, record_kind::host,
          record_kind::alive, record_kind::home, record_kind::reader, record_kind::schema}) {
        if (segments[0] == kind_segment(kind)) {
            out.kind = kind;
            found = true;
        }
    }
    if (!found) {
        return std::nullopt;
    }
    const auto names = segments.size() - 1;
    switch (out.kind) {
        case record_kind::schema:
            if (names != 0) {
                return std::nullopt;
            }
            return out;
        case record_kind::group:
            if (names != 2) {
                return std::nullopt;
            }
            out.vpc = std::string(segments[1]);
            out.name = std::string(segments[2]);
            return out;
        case record_kind::vnic:
            if (names == 1) {
                out.legacy = true;
                out.name = std::string(segments[1]);
                return out;
            }
            if (names != 2) {
                return std::nullopt;
            }
            out.vpc = std::string(segments[1]);
            out.name = std::string(segments[2]);
            return out;
        case record_kind::home:
            if (names != 3) {
                return std::nullopt;
            }
            out.host = std::string(segments[1]);
            out.vpc = std::string(segments[2]);
            out.name = std::string(segments[3]);
            return out;
        default:
            if (names != 1) {
                return std::nullopt;
            }
            out.name = std::string(segments[1]);
            return out;
    }
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
