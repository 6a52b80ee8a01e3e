#pragma once
// The MR table of one vNIC (docs/architecture.md §3, "MR"): key → PD, IOVA range, access rights and
// jakirod's own mapping of the region's pages (the memfd the shim remapped them onto, so the
// engine reads and writes the application's memory with no copy). The verbs channel server
// registers and deregisters; the RoCE engine looks keys up with find(), which applies the
// IB protection checks and returns the bytes to touch, or why not.
//
// Thread-safety: insert() and erase() on the control thread (channel server) only; find() and
// size() from any thread. Slots are std::atomic<std::shared_ptr>: a lookup pins its region,
// so a deregistration never unmaps memory a worker is still copying (the mapping goes when
// the last pin does). The engine may later trade this for an rte_rcu_qsbr-reclaimed
// snapshot like the other tables; the API stays.

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "rnic/queues/host_reserve.hh"
#include "rnic/queues/key_allocator.hh"

namespace jakiro::verbs {

struct mw_entry;  // memory_window.hh

// One registration, immutable once published. Owns jakirod's mapping of the region.
struct mr_entry {
    uint32_t key = 0;     // lkey == rkey == handle
    uint32_t pd = 0;      // PD handle (unique per vNIC)
    uint64_t owner = 0;   // client id of the connection that registered it
    uint32_t access = 0;  // verbs_proto::mr_access
    uint64_t iova = 0;    // what the first byte is called
    uint64_t length = 0;
    uint64_t addr = 0;          // the application's address of the first byte (reports only)
    std::byte* data = nullptr;  // jakirod's address of the first byte
    void* map_base = nullptr;   // jakirod's mapping (page-aligned span), unmapped on destruction
    std::size_t map_length = 0;
    // The vNIC the registration is charged to (its mapping, one of its MRs, `length` bytes)
    // from registration until this entry goes: after the last pin, not at dereg_mr, so an MR
    // that work requests still name keeps counting against the vNIC's quota and share.
    // Null: not charged (vnic_account::take_mr was not called for it).
    std::shared_ptr<vnic_account> account;

    mr_entry() = default;
    mr_entry(const mr_entry&) = delete;
    mr_entry& operator=(const mr_entry&) = delete;
    ~mr_entry();
};

// Why an access is refused, in the order the checks run (IB: key, PD, rights, bounds).
enum class mr_status {
    ok,
    bad_key,        // no such key (never was, deregistered, or stale tag)
    pd_mismatch,    // the key's MR belongs to another protection domain
    no_access,      // the MR lacks a right the operation needs
    out_of_bounds,  // [iova, iova + length) is not inside the MR (wrap-around included)
};

// Where an access is checked: a local key of the QP's own work request, or a remote key
// carried by a peer's RETH/AtomicETH.
enum class mr_side { local, remote };

// The work completion status a refused access surfaces as: a local violation fails the WR
// with IBV_WC_LOC_PROT_ERR; a remote one is NAKed (remote access error) and surfaces at the
// requester as IBV_WC_REM_ACCESS_ERR.
ibv_wc_status wc_status_for(mr_status status, mr_side side);

struct mr_lookup {
    mr_status status = mr_status::bad_key;
    std::span<std::byte> bytes;          // the accessed range in jakirod's mapping
    std::shared_ptr<const mr_entry> mr;  // keeps the mapping alive while `bytes` is used
    explicit operator bool() const { return status == mr_status::ok; }
};

class mr_table {
  public:
    explicit mr_table(uint32_t capacity);
    mr_table(const mr_table&) = delete;
    mr_table& operator=(const mr_table&) = delete;

    // Control thread. Assigns the key (entry->key) and publishes the entry; false when the
    // table is full (the entry, and its mapping, are then released by the caller's pointer).
    bool insert(std::shared_ptr<mr_entry> entry);
    // Control thread. The live entry for `key`, or nullptr.
    std::shared_ptr<const mr_entry> get(uint32_t key) const;
    // Control thread. Publishes `entry` under the live `key` instead of what was there (rereg);
    // lookups holding the old entry keep it until they drop their pin. False if `key` is dead.
    bool replace(uint32_t key, std::shared_ptr<mr_entry> entry);
    // Control thread. Unpublishes `key`; its mapping goes when the last lookup drops its pin.
    void erase(uint32_t key);
    // Control thread. Every MR and window, unpublished (the vNIC is going away).
    void clear();
    // Control thread. Every MR of one client: unpublished / counted.
    void erase_owned_by(uint64_t owner);
    std::size_t count_owned_by(uint64_t owner) const;
    // Control thread. Bytes registered by one client (the sum of its MRs' lengths).
    uint64_t bytes_owned_by(uint64_t owner) const;

    // Any thread. Checks an access of `length` bytes at `iova` needing `access`
    // (verbs_proto::mr_access bits; 0 = local read, which every MR allows) through `key`
    // within PD `pd`. A zero-length access only needs a valid key, PD and rights, and an iova
    // inside the MR or just past its end.
    mr_lookup find(uint32_t pd, uint32_t key, uint64_t iova, uint64_t length,
                   uint32_t access) const;
    // Any thread. find() for an rkey carried by a peer's request to QP `qpn`: the key may
    // also name a memory window (memory_window.hh), checked through the window.
    mr_lookup find_remote(uint32_t pd, uint32_t qpn, uint32_t rkey, uint64_t iova, uint64_t length,
                          uint32_t access) const;

    // Memory windows share the MRs' key space (an rkey names one or the other) and capacity.
    // Control thread: publishes a window under a fresh key (window->handle); false when full.
    bool insert_window(std::shared_ptr<mw_entry> window);
    void erase_window(uint32_t handle);
    void erase_windows_owned_by(uint64_t owner);
    std::size_t count_windows_owned_by(uint64_t owner) const;
    // Control thread: windows bound onto MR `key` (dereg_mr refuses while there are any).
    std::size_t windows_bound_to(uint32_t key) const;
    // Any thread: the live window in the slot `key` names (any tag: the caller checks the
    // handle or the binding's rkey), or nullptr.
    std::shared_ptr<mw_entry> window_at(uint32_t key) const;
    // Any thread: the MR published under `key` (its tag current), or nullptr.
    std::shared_ptr<const mr_entry> get_published(uint32_t key) const;
    // Any thread: is `mr` still the registration published under its key?
    bool published(const mr_entry& mr) const;
    std::size_t window_count() const { return _window_count.load(std::memory_order_relaxed); }

    std::size_t size() const { return _size.load(std::memory_order_relaxed); }
    uint32_t capacity() const { return _keys.capacity(); }

    // A state image (handover/), control thread: the key allocator as it stands, and in a
    // successor, after resuming it, each MR and window published again under its own key.
    // place() and place_window() are false when the key is not live or its slot is taken.
    key_allocator::state save_keys() const { return _keys.save(); }
    bool resume_keys(const key_allocator::state& s) { return _keys.resume(s); }
    bool place(std::shared_ptr<mr_entry> entry);
    bool place_window(std::shared_ptr<mw_entry> window);
    // Every live MR and window, by slot.
    template <class F>
    void for_each(F&& visit_mr, auto&& visit_window) const {
        for (uint32_t slot = 0; slot < _keys.capacity(); ++slot) {
            if (auto entry = _slots[slot].load(std::memory_order_acquire)) {
                visit_mr(*entry);
            }
            if (auto window = _windows[slot].load(std::memory_order_acquire)) {
                visit_window(*window);
            }
        }
    }

  private:
    key_allocator _keys;  // control thread
    std::unique_ptr<std::atomic<std::shared_ptr<const mr_entry>>[]> _slots;
    std::atomic<std::size_t> _size{0};
    // Per slot: the window published there (a slot holds an MR or a window, never both).
    std::unique_ptr<std::atomic<std::shared_ptr<mw_entry>>[]> _windows;
    std::atomic<std::size_t> _window_count{0};
};

// The bounds check alone, for the engine's scatter/gather walks and the tests: is
// [iova, iova + length) inside [start, start + size)? Never computes an end that could wrap.
constexpr bool range_inside(uint64_t start, uint64_t size, uint64_t iova, uint64_t length) {
    if (iova < start) {
        return false;
    }
    const uint64_t offset = iova - start;
    return offset <= size && length <= size - offset;
}

}  // namespace jakiro::verbs
