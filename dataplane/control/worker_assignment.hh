#pragma once
// Which worker (poll loop) owns a vNIC. Every vNIC belongs to exactly one worker for as long
// as it exists: that worker polls its port, runs its security groups against its own flow
// table, meters and shapes it, and is the only one that transmits on its port. A vNIC added
// live goes to the worker that owns the fewest vNICs now, so apply keeps the load even
// without ever moving a vNIC that already runs (moving one would need its flows, queues and
// meters moved with it).

#include <cstdint>
#include <span>

namespace jakiro {

// The worker for a new vNIC, given the owners of the vNICs that exist now (removed ones are
// not in the list): the one with the fewest, the lowest id on a tie. `workers` >= 1.
uint8_t least_loaded_worker(std::span<const uint8_t> owners, unsigned workers);

}  // namespace jakiro
