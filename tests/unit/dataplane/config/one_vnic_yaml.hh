#pragma once
// A host YAML with one vNIC (t1, blue) whose entry ends the file, so a test appends keys of
// that vNIC (indented four spaces) and loads it as h1.yaml: line 12 is the first appended line.

#include <string>

#include "dataplane/config/config_loader.hh"

namespace jakiro::test {

inline const char* one_vnic_yaml = R"(host:
  name: h1
  underlay: {port: "net_af_packet0,iface=ul0", ip: 198.18.0.1}
vpcs:
  - {name: blue, vni: 100}
vnics:
  - name: t1
    vpc: blue
    mac: "02:00:c6:13:01:01"
    ip: 198.19.1.1/24
    port: "net_af_packet1,iface=t1"
)";

inline config_result load_with_vnic_keys(const std::string& extra) {
    return load_host_config_text(std::string(one_vnic_yaml) + extra, "h1.yaml");
}

}  // namespace jakiro::test
