#include "cni/cdi_spec.hh"

#include <sys/utsname.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <vector>

#include "dataplane/control/json_writer.hh"

namespace jakiro::cni {

namespace {

std::string self_dir() {
    char path[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
    if (n <= 0) {
        return ".";
    }
    std::string text(path, static_cast<std::size_t>(n));
    return text.substr(0, text.rfind('/'));
}

std::string first_existing(const std::vector<std::string>& candidates) {
    for (const auto& c : candidates) {
        char resolved[PATH_MAX];
        if (realpath(c.c_str(), resolved) != nullptr) {
            return resolved;
        }
    }
    return "";
}

}  // namespace

std::string cdi_spec_json(const cdi_options& options) {
    json_writer out;
    out.begin_object()
        .value("cdiVersion", "0.5.0")
        .value("kind", "jakiro.io/rdma")
        .begin_array("devices")
        .begin_object()
        .value("name", "vnic")
        .begin_object("containerEdits")
        .begin_array("env");
    out.value("", std::string("JAKIRO_VERBS_LIB=") + cdi_lib_path);
    if (options.preload) {
        out.value("", std::string("LD_PRELOAD=") + cdi_lib_path);
    }
    out.end_array().begin_array("mounts");
    for (const auto& [host, container] :
         {std::pair{options.lib, std::string(cdi_lib_path)}, {options.run, cdi_run_path}}) {
        out.begin_object()
            .value("hostPath", host)
            .value("containerPath", container)
            .begin_array("options")
            .value("", "ro")
            .value("", "bind")
            .end_array()
            .end_object();
    }
    out.end_array().end_object().end_object().end_array().end_object();
    return out.str() + "\n";
}

int run_cdi_command(int argc, char** argv) {
    cdi_options options;
    for (int i = 0; i < argc; ++i) {
        const std::string arg = argv[i];
        if ((arg == "--lib" || arg == "--run") && i + 1 < argc) {
            (arg == "--lib" ? options.lib : options.run) = argv[++i];
        } else if (arg == "--no-preload") {
            options.preload = false;
        } else {
            std::cerr << "usage: jakiro-cni cdi [--lib PATH] [--run PATH] [--no-preload]\n";
            return 2;
        }
    }
    // Installed: <prefix>/libexec/cni/jakiro-cni, <prefix>/bin/jakiro-run and
    // <prefix>/lib/<triplet>/libjakiro_verbs.so; in a build tree: build/cni, build/verbs_shim.
    const auto here = self_dir();
    utsname u{};
    uname(&u);
    const std::string triplet = std::string(u.machine) + "-linux-gnu";
    if (options.lib.empty()) {
        options.lib = first_existing({here + "/../../lib/" + triplet + "/libjakiro_verbs.so",
                                      here + "/../../lib64/libjakiro_verbs.so",
                                      here + "/../../lib/libjakiro_verbs.so",
                                      here + "/../verbs_shim/libjakiro_verbs.so"});
    }
    if (options.run.empty()) {
        options.run =
            first_existing({here + "/../../bin/jakiro-run", here + "/../../tools/jakiro-run"});
    }
    for (std::string* path : {&options.lib, &options.run}) {
        char resolved[PATH_MAX];
        if (path->empty() || realpath(path->c_str(), resolved) == nullptr) {
            std::cerr << "jakiro-cni cdi: "
                      << (path == &options.lib ? "libjakiro_verbs.so" : "jakiro-run")
                      << " not found" << (path->empty() ? "" : " at " + *path) << "; name it with "
                      << (path == &options.lib ? "--lib" : "--run") << " PATH\n";
            return 2;
        }
        *path = resolved;
    }
    std::cout << cdi_spec_json(options);
    return 0;
}

}  // namespace jakiro::cni
