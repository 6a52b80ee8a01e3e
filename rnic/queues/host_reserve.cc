#include "rnic/queues/host_reserve.hh"

#include <algorithm>

namespace jakiro::verbs {

namespace {

constexpr std::array<host_resource, host_resource_count> every_resource = {
    host_resource::mappings, host_resource::descriptors};

uint64_t saturating_add(uint64_t a, uint64_t b) {
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

}  // namespace

host_reserve::host_reserve(host_amounts capacity) : _capacity(capacity) {}

host_reserve::member* host_reserve::find(const vnic_account* account) {
    for (auto& m : _members) {
        if (m.account == account) {
            return &m;
        }
    }
    return nullptr;
}

uint64_t host_reserve::committed_by(const member& m, host_resource r, uint64_t held) {
    return std::max(m.share[r], held);
}

void host_reserve::rebalance() {
    for (const host_resource r : every_resource) {
        uint64_t demand = 0;
        for (const auto& m : _members) {
            demand = saturating_add(demand, m.demand[r]);
        }
        const uint64_t capacity = _capacity[r];
        uint64_t committed = 0;
        for (auto& m : _members) {
            // Every quota fits: each vNIC is guaranteed all of it. Otherwise the quotas
            // overcommit the host, and each vNIC is guaranteed its part of the capacity in
            // proportion to its quota (rounded down: the shares never add up past it).
            m.share[r] = demand <= capacity
                             ? m.demand[r]
                             : static_cast<uint64_t>(static_cast<unsigned __int128>(capacity) *
                                                     m.demand[r] / demand);
            committed = saturating_add(committed, committed_by(m, r, m.held[r]));
        }
        _committed[r] = committed;
    }
}

void host_reserve::set_capacity(host_amounts capacity) {
    const std::lock_guard lock(_mutex);
    _capacity = capacity;
    rebalance();
}

host_amounts host_reserve::capacity() const {
    const std::lock_guard lock(_mutex);
    return _capacity;
}

host_amounts host_reserve::demand() const {
    const std::lock_guard lock(_mutex);
    host_amounts sum;
    for (const auto& m : _members) {
        for (const host_resource r : every_resource) {
            sum[r] = saturating_add(sum[r], m.demand[r]);
        }
    }
    return sum;
}

host_amounts host_reserve::held() const {
    const std::lock_guard lock(_mutex);
    return _held;
}

bool host_reserve::overcommitted(host_resource r) const {
    const host_amounts d = demand();
    const std::lock_guard lock(_mutex);
    return d[r] > _capacity[r];
}

std::shared_ptr<vnic_account> vnic_account::open(std::shared_ptr<host_reserve> reserve,
                                                 host_amounts demand) {
    if (reserve == nullptr) {
        reserve = std::make_shared<host_reserve>();
    }
    std::shared_ptr<vnic_account> account(new vnic_account(reserve));
    const std::lock_guard lock(reserve->_mutex);
    reserve->_members.push_back({account.get(), demand, {}, {}});
    reserve->rebalance();
    return account;
}

vnic_account::~vnic_account() {
    // Every charge holds the account, so nothing is held any more.
    const std::lock_guard lock(_reserve->_mutex);
    auto& members = _reserve->_members;
    members.erase(
        std::remove_if(members.begin(), members.end(),
                       [this](const host_reserve::member& m) { return m.account == this; }),
        members.end());
    _reserve->rebalance();
}

void vnic_account::set_demand(host_amounts demand) {
    const std::lock_guard lock(_reserve->_mutex);
    if (host_reserve::member* m = _reserve->find(this)) {
        m->demand = demand;
        _reserve->rebalance();
    }
}

bool vnic_account::take(host_resource r, uint64_t n) {
    const std::lock_guard lock(_reserve->_mutex);
    host_reserve::member* m = _reserve->find(this);
    const uint64_t before = host_reserve::committed_by(*m, r, m->held[r]);
    const uint64_t after = host_reserve::committed_by(*m, r, saturating_add(m->held[r], n));
    const uint64_t capacity = _reserve->_capacity[r];
    // Within its share `after` equals `before`: admitted whatever the others hold, unless the
    // host itself is full, which happens only just after the shares shrank (a vNIC joined,
    // the capacity went down) while another vNIC still holds more than its new share; that
    // one cannot grow, so the moment ends as it lets go.
    if (saturating_add(_reserve->_held[r], n) > capacity ||
        (after > before && saturating_add(_reserve->_committed[r], after - before) > capacity)) {
        _refused[static_cast<std::size_t>(r)].fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    m->held[r] += n;
    _reserve->_held[r] += n;
    _reserve->_committed[r] += after - before;
    return true;
}

void vnic_account::give(host_resource r, uint64_t n) {
    const std::lock_guard lock(_reserve->_mutex);
    host_reserve::member* m = _reserve->find(this);
    const uint64_t before = host_reserve::committed_by(*m, r, m->held[r]);
    const uint64_t given = std::min(n, m->held[r]);
    m->held[r] -= given;
    _reserve->_held[r] -= given;
    _reserve->_committed[r] -= before - host_reserve::committed_by(*m, r, m->held[r]);
}

host_amounts vnic_account::held() const {
    const std::lock_guard lock(_reserve->_mutex);
    const host_reserve::member* m = _reserve->find(this);
    return m != nullptr ? m->held : host_amounts{};
}

host_amounts vnic_account::share() const {
    const std::lock_guard lock(_reserve->_mutex);
    const host_reserve::member* m = _reserve->find(this);
    return m != nullptr ? m->share : host_amounts{};
}

bool vnic_account::take_mr(uint64_t length) {
    if (!take(host_resource::mappings, 1)) {
        return false;
    }
    _mrs.fetch_add(1, std::memory_order_relaxed);
    _mr_bytes.fetch_add(length, std::memory_order_relaxed);
    return true;
}

void vnic_account::give_mr(uint64_t length) {
    _mr_bytes.fetch_sub(length, std::memory_order_relaxed);
    _mrs.fetch_sub(1, std::memory_order_relaxed);
    give(host_resource::mappings, 1);
}

}  // namespace jakiro::verbs
