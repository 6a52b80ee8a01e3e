#include "cni/cni_error.hh"

#include "dataplane/control/json_writer.hh"

namespace jakiro::cni {

std::string error_json(const cni_error& error, const std::string& cni_version) {
    json_writer out;
    out.begin_object()
        .value("cniVersion", cni_version)
        .value("code", static_cast<uint64_t>(error.code))
        .value("msg", error.msg);
    if (!error.details.empty()) {
        out.value("details", error.details);
    }
    out.end_object();
    return out.str() + "\n";
}

}  // namespace jakiro::cni
