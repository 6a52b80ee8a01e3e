#pragma once
// What jakirod holds of the kernel's per-process limits on behalf of tenants, and who holds it.
// Every MR is a mapping in jakirod, every CQ, QP and SRQ ring another, every verbs connection
// and completion channel a descriptor; the kernel gives the whole process ~65 530 mappings
// (vm.max_map_count) and RLIMIT_NOFILE descriptors, for every vNIC of the host together. So
// each vNIC's objects are charged to its account (vnic_account), and the host's reserve decides
// whether the vNIC may take more:
//
//   - Each vNIC is guaranteed a share: its demand (what its quota lets it hold at most) when
//     the demands of all vNICs fit the capacity, otherwise its demand scaled down to the
//     capacity in proportion (the operator is warned: the quotas overcommit the host).
//   - Below its share a vNIC is always admitted. Above it, only from what no vNIC's guarantee
//     covers: the reserve keeps sum over vNICs of max(share, held) <= capacity, so taking
//     beyond a share never eats into another vNIC's unused guarantee.
//
// So a vNIC within its share is not refused because of another, the host never crosses the
// capacity, and the vNIC that is refused is the one over its share (its `refused` counter).
// (One exception, short: just after the shares shrank, when a vNIC joined or the capacity was
// lowered, another vNIC may still hold more than its new share; the host is then full for a
// while, and since that vNIC cannot grow, the while ends as it lets go.) A vNIC leaving the
// host (its account gone) leaves nothing held: its objects went first.
//
// A charge is given back when the object really goes, which for an MR is when the last work
// request that pinned it is done, on the engine's thread: so an MR a tenant deregistered while
// WQEs still name it stays charged, as its mapping stays.
//
// Thread-safety: every call from any thread (one mutex per host, taken per object created or
// destroyed, never per packet).

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace jakiro::verbs {

enum class host_resource : uint8_t { mappings, descriptors };
constexpr std::size_t host_resource_count = 2;

// An amount of each resource; max() means no bound.
struct host_amounts {
    uint64_t mappings = 0;
    uint64_t descriptors = 0;
    uint64_t& operator[](host_resource r) {
        return r == host_resource::mappings ? mappings : descriptors;
    }
    uint64_t operator[](host_resource r) const {
        return r == host_resource::mappings ? mappings : descriptors;
    }
};

constexpr host_amounts unbounded_amounts{UINT64_MAX, UINT64_MAX};

class vnic_account;

class host_reserve {
  public:
    explicit host_reserve(host_amounts capacity = unbounded_amounts);
    host_reserve(const host_reserve&) = delete;
    host_reserve& operator=(const host_reserve&) = delete;

    // What every vNIC together may hold (config load, `apply`); shares follow at once. Lowering
    // it below what is held refuses growth beyond the shares, never takes anything back.
    void set_capacity(host_amounts capacity);
    host_amounts capacity() const;
    host_amounts demand() const;  // summed over the vNICs
    host_amounts held() const;    // summed over the vNICs
    // Do the vNICs' demands pass the capacity (their shares are then scaled down)?
    bool overcommitted(host_resource r) const;

  private:
    friend class vnic_account;
    struct member {
        vnic_account* account;
        host_amounts demand;
        host_amounts share;
        host_amounts held;
    };
    // With _mutex held.
    member* find(const vnic_account* account);
    void rebalance();
    static uint64_t committed_by(const member& m, host_resource r, uint64_t held);

    mutable std::mutex _mutex;
    host_amounts _capacity;
    host_amounts _committed{};  // sum of max(share, held) over the members
    host_amounts _held{};       // sum of held over the members
    std::vector<member> _members;
};

// One vNIC's side: what it holds of the host's resources and of its MR quota, its share and
// what was refused. Shared by the objects that hold a charge, so it outlives the vNIC's
// resources while an MR pinned by a WQE (or a ring the engine still holds) is alive.
class vnic_account {
  public:
    // Joins `reserve` with what the vNIC's quota lets it hold at most.
    static std::shared_ptr<vnic_account> open(std::shared_ptr<host_reserve> reserve,
                                              host_amounts demand);
    ~vnic_account();
    vnic_account(const vnic_account&) = delete;
    vnic_account& operator=(const vnic_account&) = delete;

    void set_demand(host_amounts demand);  // a new quota (`apply`)
    // Takes `n` of `r`: false (counted in refused()) when the vNIC is over its share and the
    // host has nothing unguaranteed left.
    bool take(host_resource r, uint64_t n);
    void give(host_resource r, uint64_t n);

    host_amounts held() const;
    host_amounts share() const;
    uint64_t refused(host_resource r) const {
        return _refused[static_cast<std::size_t>(r)].load(std::memory_order_relaxed);
    }

    // MR registrations alive (published, or deregistered and still pinned by work requests),
    // and their bytes: what rdma.max_mrs and rdma.max_mr_bytes hold the vNIC to.
    uint64_t mrs() const { return _mrs.load(std::memory_order_relaxed); }
    uint64_t mr_bytes() const { return _mr_bytes.load(std::memory_order_relaxed); }
    // A registration of `length` bytes: one mapping from the host (false if refused).
    bool take_mr(uint64_t length);
    void give_mr(uint64_t length);

  private:
    explicit vnic_account(std::shared_ptr<host_reserve> reserve) : _reserve(std::move(reserve)) {}

    std::shared_ptr<host_reserve> _reserve;
    std::array<std::atomic<uint64_t>, host_resource_count> _refused{};
    std::atomic<uint64_t> _mrs{0};
    std::atomic<uint64_t> _mr_bytes{0};
};

// `n` of a resource held by a vNIC until this goes (or reset()): what a ring or a completion
// channel keeps with it. Move-only.
class account_charge {
  public:
    account_charge() = default;
    account_charge(std::shared_ptr<vnic_account> account, host_resource r, uint64_t n)
        : _account(std::move(account)), _resource(r), _n(n) {}
    account_charge(account_charge&& o) noexcept
        : _account(std::move(o._account)), _resource(o._resource), _n(o._n) {}
    account_charge& operator=(account_charge&& o) noexcept {
        if (this != &o) {
            reset();
            _account = std::move(o._account);
            _resource = o._resource;
            _n = o._n;
        }
        return *this;
    }
    ~account_charge() { reset(); }
    void reset() {
        if (_account != nullptr) {
            _account->give(_resource, _n);
            _account.reset();
        }
    }
    explicit operator bool() const { return _account != nullptr; }

  private:
    std::shared_ptr<vnic_account> _account;
    host_resource _resource = host_resource::mappings;
    uint64_t _n = 0;
};

// Takes `n` of `r` for `account` (null: nothing to charge, always succeeds); on success `out`
// holds the charge. False: refused at the host reserve.
inline bool charge(const std::shared_ptr<vnic_account>& account, host_resource r, uint64_t n,
                   account_charge& out) {
    if (account == nullptr) {
        out = account_charge{};
        return true;
    }
    if (!account->take(r, n)) {
        return false;
    }
    out = account_charge(account, r, n);
    return true;
}

}  // namespace jakiro::verbs
