#pragma once
// Shared memory jakirod hands to a tenant: a memfd of a fixed size, sealed so that neither side
// can shrink it (a tenant truncating a ring under jakirod would turn its next access into
// SIGBUS) or grow it, and mapped read-write here. Used for the CQ, QP and SRQ rings and the
// doorbell page.

#include <cstddef>

namespace jakiro::verbs {

struct sealed_memfd {
    int fd = -1;
    void* base = nullptr;
};

// Creates, sizes, seals and maps `bytes` of zeros. Returns 0, or the errno of the step that
// failed (nothing is left open then).
int create_sealed_memfd(const char* name, std::size_t bytes, sealed_memfd& out);

}  // namespace jakiro::verbs
