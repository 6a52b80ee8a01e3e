#pragma once
// The container's interface: a veth whose host end is the vNIC's port (named as the vNIC) and
// whose other end is CNI_IFNAME in the container's namespace. Made with iproute2's `ip` (and
// `ethtool` for its offloads), run in either namespace (setns before exec), each call bounded in
// time.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cni/request.hh"

namespace jakiro::cni {

struct container_face {
    std::string host_name;  // the host end: the vNIC's name
    std::string netns;      // CNI_NETNS
    std::string ifname;     // CNI_IFNAME
    std::string mac;        // aa:bb:cc:dd:ee:ff
    uint32_t mtu = 1450;    // inside the container: the underlay's less VXLAN's 50 bytes
    uint32_t ip = 0;        // host order
    uint8_t length = 24;
    std::vector<route> routes;
};

// Runs `ip ARGS...` in `netns` (a path; empty: the plugin's own). Output is stdout; a failure
// sets `error` to ip's own message.
bool run_ip(const std::string& netns, const std::vector<std::string>& args, std::string& output,
            std::string& error);

// Whether `netns` is a network namespace this process can enter.
bool netns_usable(const std::string& netns, std::string& error);

// Creates the veth, moves and names its end, sets MAC, MTU, address, routes, turns its
// segmentation offloads other than TCP's off (the container's kernel cuts UDP GSO sends and
// the like itself), brings both up.
// On failure nothing is left (the host end is deleted, which deletes both).
bool create_face(const container_face& face, std::string& error);

// Deletes the host end (and with it the container's); absent is no error.
bool delete_face(const std::string& host_name, std::string& error);

bool host_link_exists(const std::string& name);

// What CHECK compares with: the container interface's MAC, MTU and IPv4 addresses ("a/len").
struct face_state {
    std::string mac;
    uint32_t mtu = 0;
    bool up = false;
    std::vector<std::string> addresses;
};
std::optional<face_state> read_container_face(const std::string& netns, const std::string& ifname,
                                              std::string& error);

}  // namespace jakiro::cni
