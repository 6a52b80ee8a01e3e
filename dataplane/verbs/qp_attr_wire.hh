#pragma once
// ibv_qp_attr <-> verbs_proto::qp_attr_wire on jakirod's side (the shim has its own half:
// the wire struct is the contract, not either side's code).

#include <infiniband/verbs.h>

#include "verbs_shim/protocol.hh"

namespace jakiro::verbs {

ibv_qp_attr from_wire(const verbs_proto::qp_attr_wire& w);
verbs_proto::qp_attr_wire to_wire(const ibv_qp_attr& a);

}  // namespace jakiro::verbs
