#pragma once
// A YAML-mode host: the container's vNIC is one line in the host YAML's vnics: list, marked as
// the plugin's, and the file is applied live through jakirod's control socket (as `jakiroctl
// apply`). The file stays the whole truth: a restarted jakirod, `systemctl reload` and the
// operator's next `apply` all keep the container's vNIC; everything else in the file (comments
// included) is left as the operator wrote it.

#include <memory>
#include <string>

#include "cni/vnic_registry.hh"
#include "dataplane/config/host_config.hh"

namespace jakiro::cni {

// The host YAML with `line` added to its vnics: list (made if absent); nullopt with `error` if
// the file's vnics: is not a block list this can extend.
std::optional<std::string> with_vnic_line(const std::string& text, const std::string& line,
                                          std::string& error);
// The host YAML without the plugin's line for `vnic` (unchanged if it has none).
std::string without_vnic_line(const std::string& text, const std::string& vnic);
// The line a vNIC entry is written as ("  - {name: ..., ...}  # jakiro-cni OWNER").
std::string vnic_line(const vnic_entry& entry, const std::string& port_template);

std::unique_ptr<vnic_registry> make_host_file_registry(const std::string& path,
                                                       const std::string& text, host_config config,
                                                       const std::string& socket,
                                                       const std::string& port_template);

}  // namespace jakiro::cni
