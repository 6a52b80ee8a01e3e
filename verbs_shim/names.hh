#pragma once
// The pure helpers of the libibverbs API: enum names and rate conversions. They must print
// what libibverbs prints (tools and logs compare them), which a unit test checks against the
// real library.

#include <infiniband/verbs.h>

namespace jakiro::verbs_shim {

const char* node_type_name(ibv_node_type type);
const char* port_state_name(ibv_port_state state);
const char* event_type_name(ibv_event_type event);
const char* wc_status_name(ibv_wc_status status);

int rate_to_mult(ibv_rate rate);
ibv_rate mult_to_rate(int mult);
int rate_to_mbps(ibv_rate rate);
ibv_rate mbps_to_rate(int mbps);

}  // namespace jakiro::verbs_shim
