#include "cni/vnic_registry.hh"

#include <fstream>
#include <sstream>

#include "cni/etcd_registry.hh"
#include "cni/host_file_registry.hh"
#include "dataplane/config/config_loader.hh"

namespace jakiro::cni {

std::string default_socket(const std::string& host) {
    return "/run/jakiro/" + host + ".sock";
}

bool vni_in(const host_config& config, const std::string& vpc, const std::string& where,
            uint32_t& vni, cni_error& error) {
    const auto* found = config.find_vpc(vpc);
    if (found == nullptr) {
        std::string known;
        for (const auto& v : config.vpcs) {
            known += (known.empty() ? "" : ", ") + v.name;
        }
        error = {error_code::invalid_config, "vpc: '" + vpc + "' is not a VPC " + where + " (" +
                                                 (known.empty() ? "it has none" : known) + ")"};
        return false;
    }
    vni = found->vni;
    return true;
}

std::set<uint32_t> vnic_addresses_in(const host_config& config, const std::string& vpc) {
    std::set<uint32_t> out;
    for (const auto& v : config.vnics) {
        if (v.vpc == vpc) {
            out.insert(v.ip.address);
        }
    }
    return out;
}

std::unique_ptr<vnic_registry> open_registry(const network_config& config, cni_error& error) {
    std::ifstream in(config.host_config);
    if (!in) {
        error = {error_code::invalid_config,
                 "host_config: " + config.host_config + " cannot be read"};
        return nullptr;
    }
    std::stringstream text;
    text << in.rdbuf();
    auto loaded = load_host_config_text(text.str(), config.host_config);
    if (!loaded.ok()) {
        error = {error_code::invalid_config,
                 "host_config: " + config.host_config +
                     " is not a valid host YAML: " + loaded.errors[0].to_string()};
        return nullptr;
    }
    if (loaded.config.control) {
        std::string why;
        auto registry = make_etcd_registry(std::move(loaded.config), why);
        if (!registry) {
            error = {error_code::try_again_later, why};
        }
        return registry;
    }
    const auto socket = config.socket.empty() ? default_socket(loaded.config.name) : config.socket;
    return make_host_file_registry(config.host_config, text.str(), std::move(loaded.config), socket,
                                   config.port);
}

}  // namespace jakiro::cni
