#include "dataplane/config/host_config.hh"

#include <arpa/inet.h>

#include <charconv>
#include <cstdio>

namespace jakiro {

const vpc_config* host_config::find_vpc(const std::string& vpc_name) const {
    for (const auto& vpc : vpcs) {
        if (vpc.name == vpc_name) {
            return &vpc;
        }
    }
    return nullptr;
}

int host_config::group_index(const std::string& vpc, const std::string& group_name) const {
    for (std::size_t i = 0; i < security_groups.size(); ++i) {
        if (security_groups[i].name == group_name && security_groups[i].vpc == vpc) {
            return static_cast<int>(i);
        }
    }
    return -1;
}

const secgroup::group* host_config::find_group(const std::string& vpc,
                                               const std::string& group_name) const {
    const int index = group_index(vpc, group_name);
    return index < 0 ? nullptr : &security_groups[index];
}

std::string format_ipv4(uint32_t host_order) {
    char text[INET_ADDRSTRLEN];
    const uint32_t net = htonl(host_order);
    inet_ntop(AF_INET, &net, text, sizeof(text));
    return text;
}

std::string format_mac(const mac_address& mac) {
    char text[18];
    std::snprintf(text, sizeof(text), "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2],
                  mac[3], mac[4], mac[5]);
    return text;
}

std::optional<uint32_t> parse_ipv4(const std::string& text) {
    in_addr addr{};
    // inet_pton accepts only the dotted-quad form, which is what a config should contain.
    if (inet_pton(AF_INET, text.c_str(), &addr) != 1) {
        return std::nullopt;
    }
    return ntohl(addr.s_addr);
}

std::optional<ipv4_prefix> parse_ipv4_prefix(const std::string& text) {
    const auto slash = text.find('/');
    ipv4_prefix prefix;
    const auto address = parse_ipv4(text.substr(0, slash));
    if (!address) {
        return std::nullopt;
    }
    prefix.address = *address;
    if (slash != std::string::npos) {
        const char* first = text.data() + slash + 1;
        const char* last = text.data() + text.size();
        unsigned length = 0;
        auto [end, ec] = std::from_chars(first, last, length);
        if (ec != std::errc() || end != last || first == last || length > 32) {
            return std::nullopt;
        }
        prefix.length = static_cast<uint8_t>(length);
    }
    return prefix;
}

std::optional<mac_address> parse_mac(const std::string& text) {
    mac_address mac{};
    if (text.size() != 17) {
        return std::nullopt;
    }
    for (std::size_t i = 0; i < 6; ++i) {
        const char* first = text.data() + i * 3;
        if (i < 5 && first[2] != ':') {
            return std::nullopt;
        }
        unsigned value = 0;
        auto [end, ec] = std::from_chars(first, first + 2, value, 16);
        if (ec != std::errc() || end != first + 2) {
            return std::nullopt;
        }
        mac[i] = static_cast<uint8_t>(value);
    }
    return mac;
}

std::string format_ipv6(const ipv6_address& address) {
    char text[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, address.data(), text, sizeof(text));
    return text;
}

std::optional<ipv6_address> parse_ipv6(const std::string& text) {
    ipv6_address address{};
    if (inet_pton(AF_INET6, text.c_str(), address.data()) != 1) {
        return std::nullopt;
    }
    return address;
}

std::optional<ipv6_prefix> parse_ipv6_prefix(const std::string& text) {
    const auto slash = text.find('/');
    const auto address = parse_ipv6(text.substr(0, slash));
    if (!address) {
        return std::nullopt;
    }
    ipv6_prefix prefix;
    prefix.address = *address;
    if (slash != std::string::npos) {
        const char* first = text.data() + slash + 1;
        const char* last = text.data() + text.size();
        unsigned length = 0;
        auto [end, ec] = std::from_chars(first, last, length);
        if (ec != std::errc() || end != last || first == last || length > 128) {
            return std::nullopt;
        }
        prefix.length = static_cast<uint8_t>(length);
    }
    return prefix;
}

std::string ipv6_vnic_address_problem(const ipv6_prefix& prefix) {
    const auto& a = prefix.address;
    const auto zero = [&](std::size_t first, std::size_t last) {
        for (std::size_t i = first; i < last; ++i) {
            if (a[i] != 0) {
                return false;
            }
        }
        return true;
    };
    if (prefix.length == 0) {
        return "prefix length 0 is no subnet";
    }
    if (zero(0, 16)) {
        return "is the unspecified address ::";
    }
    if (zero(0, 15) && a[15] == 1) {
        return "is the loopback address ::1";
    }
    if (a[0] == 0xff) {
        return "is a multicast address (ff00::/8)";
    }
    if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80) {
        return "is link-local (fe80::/10); every vNIC has its own link-local address already";
    }
    if (zero(0, 10) && a[10] == 0xff && a[11] == 0xff) {
        return "is IPv4-mapped (::ffff:0:0/96); an IPv4 address belongs in ip:";
    }
    // RFC 4291 2.6.1: the address of the prefix with every host bit zero is the subnet-router
    // anycast address, which the tenant's neighbours would take for a router.
    bool host_bits_zero = prefix.length < 128;
    for (unsigned bit = prefix.length; bit < 128 && host_bits_zero; ++bit) {
        host_bits_zero = (a[bit / 8] & (0x80u >> (bit % 8))) == 0;
    }
    if (host_bits_zero) {
        return "is the subnet-router anycast address of its /" +
               std::to_string(int{prefix.length}) + " (every host bit zero)";
    }
    return "";
}

std::optional<metrics_config> parse_listen_address(const std::string& text) {
    const auto colon = text.rfind(':');
    if (colon == std::string::npos) {
        return std::nullopt;
    }
    const auto ip = parse_ipv4(text.substr(0, colon));
    const char* first = text.data() + colon + 1;
    const char* last = text.data() + text.size();
    unsigned port = 0;
    auto [end, ec] = std::from_chars(first, last, port);
    if (!ip || ec != std::errc() || end != last || first == last || port == 0 || port > 65535) {
        return std::nullopt;
    }
    return metrics_config{*ip, static_cast<uint16_t>(port)};
}

std::string metrics_config::text() const {
    return format_ipv4(ip) + ":" + std::to_string(port);
}

std::string_view overlay_encryption_name(overlay_encryption e) {
    switch (e) {
        case overlay_encryption::optional:
            return "optional";
        case overlay_encryption::required:
            return "required";
        case overlay_encryption::off:
            break;
    }
    return "off";
}

bool overlay_config::may_seal() const {
    if (encryption != overlay_encryption::off) {
        return true;
    }
    for (const auto& h : hosts) {
        if (h.encryption.value_or(encryption) != overlay_encryption::off) {
            return true;
        }
    }
    return false;
}

}  // namespace jakiro
