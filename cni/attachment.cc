#include "cni/attachment.hh"

#include <cstdio>
#include <iostream>

#include "cni/jakirod_status.hh"
#include "cni/lease_store.hh"
#include "cni/links.hh"
#include "cni/vnic_registry.hh"
#include "dataplane/config/host_config.hh"
#include "dataplane/control/json_writer.hh"

namespace jakiro::cni {

namespace {

constexpr unsigned lock_timeout_ms = 30000;
// Addresses tried when etcd says another host took the one picked meanwhile.
constexpr int max_address_attempts = 16;

std::string prefix_text(uint32_t ip, uint8_t length) {
    return format_ipv4(ip) + "/" + std::to_string(int{length});
}

std::string socket_of(const network_config& c, const vnic_registry& registry) {
    return c.socket.empty() ? default_socket(registry.host_name()) : c.socket;
}

std::string result_json(const request& r, const std::string& vnic, const std::string& mac,
                        uint32_t ip) {
    const auto& c = r.config;
    json_writer out;
    out.begin_object().value("cniVersion", c.cni_version).begin_array("interfaces");
    out.begin_object().value("name", vnic).end_object();
    out.begin_object()
        .value("name", r.ifname)
        .value("mac", mac)
        .value("sandbox", r.netns)
        .end_object();
    out.end_array().begin_array("ips").begin_object().value("address",
                                                            prefix_text(ip, c.subnet_length));
    if (c.gateway) {
        out.value("gateway", format_ipv4(*c.gateway));
    }
    out.value("interface", uint64_t{1}).end_object().end_array().begin_array("routes");
    for (const auto& route : c.routes) {
        out.begin_object().value("dst", prefix_text(route.dst, route.length));
        if (route.gw) {
            out.value("gw", format_ipv4(*route.gw));
        }
        out.end_object();
    }
    out.end_array().end_object();
    return out.str() + "\n";
}

std::string owner_of(const request& r) {
    return r.config.name + " " + r.container_id + " " + r.ifname;
}

vnic_entry entry_of(const request& r, const std::string& vnic, const std::string& mac,
                    uint32_t ip) {
    vnic_entry e;
    e.name = vnic;
    e.vpc = r.config.vpc;
    e.mac = mac;
    e.ip = ip;
    e.length = r.config.subnet_length;
    e.security_groups = r.config.security_groups;
    e.qos = r.config.qos;
    e.owner = owner_of(r);
    return e;
}

// Undoes an ADD's steps that were done; what fails is said on stderr (the runtime's log).
void undo(vnic_registry* registry, bool declared, const vnic_entry& entry, bool face,
          const lease_store& store, bool leased) {
    cni_error error;
    std::string why;
    if (declared && registry != nullptr &&
        !registry->remove(entry.name, entry.vpc, entry.ip, error)) {
        std::cerr << "jakiro-cni: could not withdraw vNIC " << entry.name << ": " << error.msg
                  << "\n";
    }
    if (face && !delete_face(entry.name, why)) {
        std::cerr << "jakiro-cni: could not delete veth " << entry.name << ": " << why << "\n";
    }
    if (leased && !store.erase(entry.ip, why)) {
        std::cerr << "jakiro-cni: " << why << "\n";
    }
}

}  // namespace

std::string vnic_name(const std::string& network, const std::string& container_id,
                      const std::string& ifname) {
    uint64_t hash = 1469598103934665603ull;  // FNV-1a 64
    for (const auto& part : {network, container_id, ifname}) {
        for (unsigned char c : part) {
            hash = (hash ^ c) * 1099511628211ull;
        }
        hash = (hash ^ 0xff) * 1099511628211ull;  // a separator no name contains
    }
    char text[16];
    std::snprintf(text, sizeof(text), "jc%010llx",
                  static_cast<unsigned long long>(hash & 0xffffffffffull));
    return text;
}

std::string vnic_mac(uint32_t vni, uint32_t ip) {
    char text[18];
    std::snprintf(text, sizeof(text), "02:%02x:%02x:%02x:%02x:%02x", (vni ^ (vni >> 8)) & 0xff,
                  ip >> 24, (ip >> 16) & 0xff, (ip >> 8) & 0xff, ip & 0xff);
    return text;
}

bool add(const request& r, std::string& out, cni_error& error) {
    const auto& c = r.config;
    std::string why;
    if (!netns_usable(r.netns, why)) {
        error = {error_code::unknown_container, why};
        return false;
    }
    const auto vnic = vnic_name(c.name, r.container_id, r.ifname);
    lease_store store(c.data_dir, c.name);
    std::string socket;
    vnic_entry entry;
    {
        host_lock lock(c.data_dir, lock_timeout_ms);
        if (!lock.held()) {
            error = {error_code::try_again_later, lock.error()};
            return false;
        }
        if (store.find(r.container_id, r.ifname)) {
            error = {error_code::already_attached, "container " + r.container_id + " has " +
                                                       r.ifname + " on network " + c.name +
                                                       " already (DEL it first)"};
            return false;
        }
        auto registry = open_registry(c, error);
        if (!registry) {
            return false;
        }
        uint32_t vni = 0;
        if (!registry->vpc_vni(c.vpc, vni, error)) {
            return false;
        }
        socket = socket_of(c, *registry);
        // A host end of this name without a lease is what a killed ADD left: not anyone's.
        if (host_link_exists(vnic) && !delete_face(vnic, why)) {
            error = {error_code::io_failure, "a stale veth " + vnic + " cannot be deleted: " + why};
            return false;
        }
        auto taken = registry->taken(c.vpc);
        for (const auto& l : store.all()) {
            taken.insert(l.ip);
        }
        if (c.gateway) {
            taken.insert(*c.gateway);
        }
        for (int attempt = 0;; ++attempt) {
            const auto ip = pick_address(c.range_start, c.range_end, taken, c.requested_ip);
            if (!ip) {
                error = c.requested_ip
                            ? cni_error{error_code::invalid_config,
                                        "the requested address " + format_ipv4(*c.requested_ip) +
                                            " is taken in VPC " + c.vpc}
                            : cni_error{error_code::subnet_exhausted,
                                        "no free address in " + format_ipv4(c.range_start) + "-" +
                                            format_ipv4(c.range_end) + " of VPC " + c.vpc};
                return false;
            }
            entry = entry_of(r, vnic, vnic_mac(vni, *ip), *ip);
            if (!store.put({*ip, r.container_id, r.ifname, vnic}, why)) {
                error = {error_code::io_failure, why};
                return false;
            }
            container_face face{vnic, r.netns,         r.ifname, entry.mac, registry->tenant_mtu(),
                                *ip,  c.subnet_length, c.routes};
            if (c.gateway) {
                face.routes.push_back({0, 0, c.gateway});
            }
            if (!create_face(face, why)) {
                undo(nullptr, false, entry, false, store, true);
                error = {error_code::io_failure, "cannot make the container's interface: " + why};
                return false;
            }
            bool address_taken = false;
            if (registry->add(entry, address_taken, error)) {
                break;
            }
            undo(nullptr, false, entry, true, store, true);
            if (!address_taken || c.requested_ip || attempt + 1 == max_address_attempts) {
                if (address_taken) {
                    error = {
                        error_code::try_again_later,
                        "address " + format_ipv4(*ip) + " was taken by another host meanwhile"};
                }
                return false;
            }
            taken.insert(*ip);
        }
    }
    if (!wait_forwarding(socket, vnic, c.ready_timeout_ms, why)) {
        host_lock lock(c.data_dir, lock_timeout_ms);
        cni_error ignored;
        auto registry = open_registry(c, ignored);
        undo(registry.get(), registry != nullptr, entry, true, store, true);
        error = {error_code::not_forwarding, "vNIC " + vnic + " did not forward within " +
                                                 std::to_string(c.ready_timeout_ms) +
                                                 " ms: " + why + " (undone)"};
        return false;
    }
    out = result_json(r, vnic, entry.mac, entry.ip);
    return true;
}

bool del(const request& r, cni_error& error) {
    const auto& c = r.config;
    host_lock lock(c.data_dir, lock_timeout_ms);
    if (!lock.held()) {
        error = {error_code::try_again_later, lock.error()};
        return false;
    }
    lease_store store(c.data_dir, c.name);
    const auto lease = store.find(r.container_id, r.ifname);
    const auto vnic = lease ? lease->vnic : vnic_name(c.name, r.container_id, r.ifname);
    auto registry = open_registry(c, error);
    if (!registry) {
        return false;
    }
    if (!registry->remove(vnic, c.vpc, lease ? lease->ip : 0, error)) {
        return false;
    }
    std::string why;
    if (!delete_face(vnic, why)) {
        error = {error_code::io_failure, "cannot delete veth " + vnic + ": " + why};
        return false;
    }
    if (lease && !store.erase(lease->ip, why)) {
        error = {error_code::io_failure, why};
        return false;
    }
    return true;
}

bool check(const request& r, cni_error& error) {
    const auto& c = r.config;
    const auto drift = [&](std::string why) {
        error = {error_code::drift, std::move(why)};
        return false;
    };
    lease_store store(c.data_dir, c.name);
    const auto lease = store.find(r.container_id, r.ifname);
    if (!lease) {
        return drift("container " + r.container_id + " has no address lease on network " + c.name);
    }
    auto registry = open_registry(c, error);
    if (!registry) {
        return false;
    }
    uint32_t vni = 0;
    if (!registry->vpc_vni(c.vpc, vni, error)) {
        return drift(error.msg);
    }
    const auto entry = entry_of(r, lease->vnic, vnic_mac(vni, lease->ip), lease->ip);
    std::string why;
    if (!registry->declared_as(entry, why)) {
        return drift(why);
    }
    if (!host_link_exists(entry.name)) {
        return drift("the host end of the veth, " + entry.name + ", is gone");
    }
    const auto face = read_container_face(r.netns, r.ifname, why);
    if (!face) {
        return drift("the container's " + r.ifname + ": " + why);
    }
    const auto address = prefix_text(entry.ip, entry.length);
    if (face->mac != entry.mac) {
        return drift(r.ifname + " has MAC " + face->mac + ", not " + entry.mac);
    }
    if (face->addresses.size() != 1 || face->addresses[0] != address) {
        std::string has;
        for (const auto& a : face->addresses) {
            has += (has.empty() ? "" : ", ") + a;
        }
        return drift(r.ifname + " has " + (has.empty() ? "no address" : has) + ", not " + address);
    }
    if (vnic_forwarding(socket_of(c, *registry), entry.name, why) != forwarding::yes) {
        return drift(why);
    }
    return true;
}

}  // namespace jakiro::cni
