// jakiro-cni: a CNI plugin (spec 1.0.0) that attaches a container's network namespace as a vNIC
// of a Jakiro VPC. A runtime runs it with the CNI_* environment and the network configuration
// on stdin; it prints the result (or the spec's error object) on stdout. README.md in this
// folder has the configuration keys, the error codes and what each command does.

#include <unistd.h>

#include <cstring>
#include <iostream>
#include <map>
#include <string>

#include "cni/attachment.hh"
#include "cni/cdi_spec.hh"
#include "cni/request.hh"

extern char** environ;

namespace {

using namespace jakiro::cni;

constexpr std::size_t stdin_limit = (1 << 20) + 1;  // one byte over parse_request's limit

const char* usage =
    "usage: jakiro-cni            (as a CNI plugin: CNI_COMMAND=ADD|DEL|CHECK|VERSION, the\n"
    "                              network configuration on stdin; see cni/README.md)\n"
    "       jakiro-cni cdi [--lib PATH] [--run PATH]\n"
    "                             print a CDI spec (jakiro.io/rdma=vnic) that gives a container\n"
    "                             the verbs shim and jakiro-run (podman --device "
    "jakiro.io/rdma=vnic)\n";

std::string read_stdin() {
    std::string text;
    char buffer[65536];
    while (text.size() < stdin_limit) {
        const ssize_t n = read(0, buffer, sizeof(buffer));
        if (n <= 0) {
            break;
        }
        text.append(buffer, static_cast<std::size_t>(n));
    }
    return text;
}

int fail(const cni_error& error, const std::string& version) {
    std::cout << error_json(error, version);
    return 1;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc > 1 && std::strcmp(argv[1], "cdi") == 0) {
        return run_cdi_command(argc - 2, argv + 2);
    }
    if (argc > 1) {
        std::cout << usage;
        return std::strcmp(argv[1], "--help") == 0 ? 0 : 2;
    }
    std::map<std::string, std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
        const char* eq = std::strchr(*e, '=');
        if (eq != nullptr && std::strncmp(*e, "CNI_", 4) == 0) {
            env.emplace(std::string(*e, static_cast<std::size_t>(eq - *e)), std::string(eq + 1));
        }
    }
    cni_error error;
    const auto r = parse_request(
        env,
        env.count("CNI_COMMAND") && env["CNI_COMMAND"] == "VERSION" ? std::string() : read_stdin(),
        error);
    if (!r) {
        return fail(error, supported_version);
    }
    const auto& version =
        r->config.cni_version.empty() ? std::string(supported_version) : r->config.cni_version;
    switch (r->cmd) {
        case command::version:
            std::cout << "{\"cniVersion\":\"" << supported_version << "\",\"supportedVersions\":[\""
                      << supported_version << "\"]}\n";
            return 0;
        case command::add: {
            std::string out;
            if (!add(*r, out, error)) {
                return fail(error, version);
            }
            std::cout << out;
            return 0;
        }
        case command::del:
            return del(*r, error) ? 0 : fail(error, version);
        case command::check:
            return check(*r, error) ? 0 : fail(error, version);
    }
    return fail({error_code::invalid_environment, "unknown command"}, version);
}
