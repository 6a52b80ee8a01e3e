#pragma once
// jakiroctl --etcd URL ...: the cluster's desired state in etcd (dataplane/control_plane).
//   apply FILE                    write a cluster YAML in one transaction
//   get vnics|vpcs|groups|hosts   read it back
//   migrate [--dry-run] [--force] move legacy vNIC keys to per-VPC ones (schema_migration.hh)

#include <string>
#include <vector>

// Returns the process exit status (0 done, 1 refused/invalid, 2 usage or etcd unreachable).
int run_cluster_command(const std::vector<std::string>& endpoints,
                        const std::vector<std::string>& args);
