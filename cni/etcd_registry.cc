#include "cni/etcd_registry.hh"

#include "dataplane/config/config_loader.hh"
#include "dataplane/control_plane/cluster_records.hh"
#include "dataplane/control_plane/etcd_client.hh"
#include "dataplane/control_plane/key_schema.hh"

namespace jakiro::cni {

namespace {

using namespace jakiro::control_plane;

constexpr auto timeout = std::chrono::seconds(5);

std::string address_key(const std::string& vpc, uint32_t ip) {
    return std::string(address_key_root) + vpc + "/" + format_ipv4(ip);
}

std::string vnic_key(const std::string& vpc, const std::string& name) {
    return key_of({record_kind::vnic, vpc, name});
}

// The host's index entry for the vNIC: how its jakirod learns to follow the VPC.
std::string home_key(const std::string& host, const std::string& vpc, const std::string& name) {
    return key_of({record_kind::home, vpc, name, host});
}

class etcd_registry final : public vnic_registry {
  public:
    explicit etcd_registry(host_config host)
        : _host(std::move(host)), _client(_host.control->etcd, false) {}

    // Reads the cluster (and the address keys) once; false with why.
    bool load(std::string& error) {
        std::vector<key_value> kvs;
        int64_t revision = 0;
        if (!_client.range_prefix(std::string(key_root), kvs, revision, error, timeout)) {
            error = "etcd: " + error;
            return false;
        }
        _records.reset(revision);
        for (auto& kv : kvs) {
            _records.put(kv.key, std::move(kv.value), kv.mod_revision);
        }
        _view = _records.build_view();
        std::vector<key_value> addresses;
        if (!_client.range_prefix(address_key_root, addresses, revision, error, timeout)) {
            error = "etcd: " + error;
            return false;
        }
        _addresses.clear();
        for (const auto& kv : addresses) {
            _addresses.push_back(kv.key);
        }
        return true;
    }

    bool vpc_vni(const std::string& vpc, uint32_t& vni, cni_error& error) override {
        return vni_in(_view->cluster, vpc, "in etcd", vni, error);
    }
    uint32_t tenant_mtu() const override { return _host.tenant_mtu(); }
    std::string host_name() const override { return _host.name; }

    std::set<uint32_t> taken(const std::string& vpc) override {
        std::set<uint32_t> out = vnic_addresses_in(_view->cluster, vpc);
        const std::string prefix = std::string(address_key_root) + vpc + "/";
        for (const auto& key : _addresses) {
            if (key.rfind(prefix, 0) == 0) {
                if (const auto ip = parse_ipv4(key.substr(prefix.size()))) {
                    out.insert(*ip);
                }
            }
        }
        return out;
    }

    bool add(const vnic_entry& entry, bool& address_taken, cni_error& error) override {
        address_taken = false;
        const auto flow = record_value(entry);
        host_config context = _view->cluster;
        std::string why;
        const auto vnic = load_cluster_vnic_text(flow, context, why);
        if (!vnic) {
            error = {error_code::invalid_config, "the vNIC does not fit the cluster: " + why};
            return false;
        }
        for (const auto& other : _view->cluster.vnics) {
            if (format_mac(other.mac) == entry.mac) {
                error = {error_code::invalid_config,
                         "MAC " + entry.mac + " is taken by vNIC " + other.name + " already"};
                return false;
            }
        }
        etcdserverpb::TxnRequest txn;
        for (const auto& key :
             {vnic_key(entry.vpc, entry.name), address_key(entry.vpc, entry.ip)}) {
            auto* compare = txn.add_compare();
            compare->set_key(key);
            compare->set_result(etcdserverpb::Compare::EQUAL);
            compare->set_target(etcdserverpb::Compare::VERSION);
            compare->set_version(0);
        }
        auto* put = txn.add_success()->mutable_request_put();
        put->set_key(vnic_key(entry.vpc, entry.name));
        put->set_value(flow);
        put = txn.add_success()->mutable_request_put();
        put->set_key(home_key(_host.name, entry.vpc, entry.name));
        put->set_value("{name: " + entry.name + "}");
        put = txn.add_success()->mutable_request_put();
        put->set_key(address_key(entry.vpc, entry.ip));
        put->set_value(entry.name + " " + entry.owner);
        etcdserverpb::TxnResponse response;
        if (!_client.txn(txn, response, why, timeout)) {
            error = {error_code::jakirod_refused, "etcd: " + why + " (nothing written)"};
            return false;
        }
        if (!response.succeeded()) {
            // Either key exists: which one decides whether another address may do.
            std::string ignored;
            load(ignored);
            for (const auto& v : _view->cluster.vnics) {
                if (v.name == entry.name) {
                    error = {error_code::invalid_config,
                             "vNIC " + entry.name + " exists in etcd already"};
                    return false;
                }
            }
            address_taken = true;
            return false;
        }
        return true;
    }

    bool remove(const std::string& vnic, const std::string& vpc, uint32_t ip,
                cni_error& error) override {
        // Without a lease (a DEL after the lease file was lost) the record says which address
        // key is the vNIC's.
        std::string vpc_of = vpc;
        for (const auto& v : _view->cluster.vnics) {
            if (ip == 0 && v.name == vnic) {
                vpc_of = v.vpc;
                ip = v.ip.address;
            }
        }
        etcdserverpb::TxnRequest txn;
        txn.add_success()->mutable_request_delete_range()->set_key(vnic_key(vpc_of, vnic));
        txn.add_success()->mutable_request_delete_range()->set_key(
            home_key(_host.name, vpc_of, vnic));
        if (ip != 0) {
            txn.add_success()->mutable_request_delete_range()->set_key(address_key(vpc_of, ip));
        }
        etcdserverpb::TxnResponse response;
        std::string why;
        if (!_client.txn(txn, response, why, timeout)) {
            error = {error_code::jakirod_refused, "etcd: " + why + " (nothing deleted)"};
            return false;
        }
        return true;
    }

    bool declared_as(const vnic_entry& entry, std::string& error) override {
        for (const auto& v : _view->cluster.vnics) {
            if (v.name != entry.name) {
                continue;
            }
            if (v.vpc != entry.vpc || format_mac(v.mac) != entry.mac || v.ip.address != entry.ip ||
                v.host != _host.name) {
                error = "vNIC " + entry.name + " in etcd is no longer as it was added";
                return false;
            }
            return true;
        }
        error = "vNIC " + entry.name + " is not in etcd (or etcd refuses its record)";
        return false;
    }

  private:
    std::string record_value(const vnic_entry& entry) const {
        YAML::Emitter out;
        out.SetMapFormat(YAML::Flow);
        out.SetSeqFormat(YAML::Flow);
        out << YAML::BeginMap;
        out << YAML::Key << "name" << YAML::Value << entry.name;
        out << YAML::Key << "vpc" << YAML::Value << entry.vpc;
        out << YAML::Key << "ip" << YAML::Value
            << format_ipv4(entry.ip) + "/" + std::to_string(int{entry.length});
        out << YAML::Key << "mac" << YAML::Value << YAML::DoubleQuoted << entry.mac;
        out << YAML::Key << "host" << YAML::Value << _host.name;
        out << YAML::Key << "security_groups" << YAML::Value << YAML::BeginSeq;
        for (const auto& g : entry.security_groups) {
            out << g;
        }
        out << YAML::EndSeq;
        if (entry.qos.IsMap()) {
            out << YAML::Key << "qos" << YAML::Value << entry.qos;
        }
        out << YAML::EndMap;
        return out.c_str();
    }

    host_config _host;
    etcd_client _client;
    cluster_records _records;
    std::shared_ptr<const cluster_view> _view;
    std::vector<std::string> _addresses;
};

}  // namespace

std::unique_ptr<vnic_registry> make_etcd_registry(host_config host, std::string& error) {
    auto registry = std::make_unique<etcd_registry>(std::move(host));
    if (!registry->load(error)) {
        return nullptr;
    }
    return registry;
}

}  // namespace jakiro::cni
