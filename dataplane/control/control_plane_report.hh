#pragma once
// What `jakiroctl status` shows of the cluster this host follows (`control:` in its YAML).
// control/ owns this interface and control_plane/ implements it (cluster_follower): the
// follower applies views through host_manager, so control_plane/ includes control/ and
// control/ must not include control_plane/ (the folder DAG in dataplane/README.md).
//
// Thread-safety: control thread only, as the follower's status it reports.

#include <string>

namespace jakiro {

class json_writer;

class control_plane_report {
  public:
    // The lines `status` prints after the host's own.
    virtual std::string text() const = 0;
    // Its member of `status --json`.
    virtual void write_json(json_writer& out) const = 0;

  protected:
    control_plane_report() = default;
    control_plane_report(const control_plane_report&) = default;
    control_plane_report& operator=(const control_plane_report&) = default;
    ~control_plane_report() = default;
};

}  // namespace jakiro
