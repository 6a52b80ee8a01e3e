#pragma once
// `jakiro-cni cdi`: the Container Device Interface spec of the RDMA device, kind jakiro.io/rdma,
// device `vnic`. It gives a container the verbs shim (libjakiro_verbs.so, preloaded) and
// jakiro-run; nothing else is needed, because jakirod serves each vNIC's RDMA endpoint as an
// abstract socket inside that vNIC's network namespace: a container sees its own vNIC's device
// and no other (docs/threat-model.md).

#include <string>

namespace jakiro::cni {

struct cdi_options {
    std::string lib;      // the host's libjakiro_verbs.so
    std::string run;      // the host's jakiro-run
    bool preload = true;  // LD_PRELOAD the shim for every process (no jakiro-run needed)
};

// /usr/lib is where jakiro-run (at /usr/bin) looks for the shim beside itself, so
// `podman exec CONTAINER jakiro-run -- CMD` finds it too: podman exec does not apply a CDI
// device's environment, only the container's first process has it.
inline constexpr const char* cdi_lib_path = "/usr/lib/libjakiro_verbs.so";
inline constexpr const char* cdi_run_path = "/usr/bin/jakiro-run";

std::string cdi_spec_json(const cdi_options& options);

// argv after "cdi": [--lib PATH] [--run PATH] [--no-preload]. Prints the spec; 0, or 2 with why.
int run_cdi_command(int argc, char** argv);

}  // namespace jakiro::cni
