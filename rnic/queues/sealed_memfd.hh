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

// Maps `bytes` of a memfd create_sealed_memfd made (a predecessor's, from a state image) read-
// write; `fd` is borrowed. EINVAL unless it is sealed against shrinking and exactly that size,
// so no later access can fault.
int map_sealed_memfd(int fd, std::size_t bytes, void*& base);

// Gives back the pages under [base, base + bytes) of jakirod's mapping (page-aligned) by
// punching them out of the memfd (MADV_REMOVE). A tenant keeps its own mapping of a ring
// jakirod let go (it may unmap whenever it likes), and a mapping keeps the file alive: without
// this, every old ring a tenant kept one page of would stay whole in the host's shared memory,
// charged to jakirod's cgroup, not the tenant's. After the punch the tenant reads zeros, and a
// page it touches again is a new one, charged to the tenant. The seals allow it (only
// F_SEAL_WRITE forbids a punch), and jakirod never reads the range again.
void give_back_pages(void* base, std::size_t bytes);

// give_back_pages() over the whole mapping, then unmaps it: how jakirod lets go of every ring
// and doorbell page it made.
void release_sealed_mapping(void* base, std::size_t bytes);

}  // namespace jakiro::verbs
