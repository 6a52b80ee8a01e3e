#include "verbs_shim/cq_ex.hh"

#include <algorithm>
#include <cerrno>

#include "verbs_abi/rings.hh"
#include "verbs_shim/context.hh"
#include "verbs_shim/cq.hh"
#include "verbs_shim/debug.hh"
#include "verbs_shim/device_death.hh"
#include "verbs_shim/idle_backoff.hh"
#include "verbs_shim/parent_domain.hh"
#include "verbs_shim/pd.hh"

namespace jakiro::verbs_shim {

namespace proto = verbs_proto;

static_assert(offsetof(shim_cq, cq_ex) == 0 && offsetof(ibv_cq_ex, context) == 0 &&
                  offsetof(ibv_cq_ex, async_events_completed) ==
                      offsetof(ibv_cq, async_events_completed),
              "ibv_cq is the prefix of ibv_cq_ex, as libibverbs' verbs_cq relies on");

namespace {

// What a completion of jakirod's carries; the rest needs a clock or hardware we do not have.
// Completion timestamps: jakirod stamps each completion of such a CQ (protocol.hh,
// cap_completion_timestamps), with the device clock and the wall clock.
constexpr uint64_t timestamp_wc_flags = uint64_t{IBV_WC_EX_WITH_COMPLETION_TIMESTAMP} |
                                        uint64_t{IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK};
constexpr uint64_t supported_wc_flags = IBV_WC_STANDARD_FLAGS | timestamp_wc_flags;
constexpr uint64_t known_wc_flags =
    supported_wc_flags | uint64_t{IBV_WC_EX_WITH_COMPLETION_TIMESTAMP} |
    uint64_t{IBV_WC_EX_WITH_CVLAN} | uint64_t{IBV_WC_EX_WITH_FLOW_TAG} |
    uint64_t{IBV_WC_EX_WITH_TM_INFO} | uint64_t{IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK};
constexpr uint32_t known_comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD;
// SINGLE_THREADED is a hint (we lock anyway); IGNORE_OVERRUN would need a ring that may be
// overwritten, which jakirod never does.
constexpr uint32_t supported_create_flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;

shim_cq& cq_of(ibv_cq_ex* cq) {
    return *reinterpret_cast<shim_cq*>(cq);
}

const proto::cqe& current(ibv_cq_ex* cq) {
    return *cq_of(cq).ex_current;
}

// Points the session at slot `index` if jakirod has published it: wr_id and status are
// fields of ibv_cq_ex itself, the rest is read on demand.
int look_at(shim_cq& q, uint32_t index) {
    const uint32_t producer = proto::load_producer_acquire(*q.ring);
    const uint32_t consumer = proto::load_own_consumer(*q.ring);
    // jakirod never runs more than `capacity` ahead; if it seemed to, read only a ring's worth.
    if (index - consumer >= std::min(producer - consumer, q.capacity)) {
        return ENOENT;
    }
    const proto::cqe& e = proto::cq_slots(q.ring)[index & (q.capacity - 1)];
    q.ex_current = &e;
    q.cq_ex.wr_id = e.wr_id;
    q.cq_ex.status = static_cast<ibv_wc_status>(e.status);
    return 0;
}

// jakirod is gone and its ring is read: the next flush completion of a WR it never finished
// (device_death.hh), as a ring slot would hold it.
int look_at_flushed(shim_cq& q) {
    ibv_wc wc{};
    if (q.context->death->flush_completions(q, 1, &wc) != 1) {
        return ENOENT;
    }
    q.ex_flushed = proto::cqe{};
    q.ex_flushed.wr_id = wc.wr_id;
    q.ex_flushed.status = wc.status;
    q.ex_flushed.opcode = wc.opcode;
    q.ex_flushed.vendor_err = wc.vendor_err;
    q.ex_flushed.qp_num = wc.qp_num;
    q.ex_current = &q.ex_flushed;
    q.cq_ex.wr_id = wc.wr_id;
    q.cq_ex.status = wc.status;
    return 0;
}

int start_poll(ibv_cq_ex* cq, ibv_poll_cq_attr* attr) {
    shim_cq* q = to_cq(ibv_cq_ex_to_cq(cq));
    if (q == nullptr || (attr != nullptr && attr->comp_mask != 0)) {
        return EINVAL;
    }
    q->poll_lock.lock();
    q->ex_consumer = proto::load_own_consumer(*q->ring);
    q->ex_flushing = false;
    int error = look_at(*q, q->ex_consumer);
    if (error == ENOENT && q->context->death->check()) {
        q->ex_flushing = true;
        error = look_at_flushed(*q);
    }
    if (error != 0) {
        // Empty: the producer stood at the consumer.
        const bool nap =
            error == ENOENT && idle_backoff::after_empty_poll(*q->ring, q->ex_consumer);
        q->poll_lock.unlock();  // ENOENT: the caller must not call ibv_end_poll
        if (nap) {
            idle_backoff::nap();
        }
        return error;
    }
    idle_backoff::on_progress();
    return 0;
}

int next_poll(ibv_cq_ex* cq) {
    shim_cq& q = cq_of(cq);
    if (q.ex_flushing) {
        return look_at_flushed(q);
    }
    const int error = look_at(q, q.ex_consumer + 1);
    if (error == 0) {
        ++q.ex_consumer;
    }
    return error;
}

void end_poll(ibv_cq_ex* cq) {
    shim_cq& q = cq_of(cq);
    // The completion being looked at is done with too (a flush completion is no ring slot).
    if (!q.ex_flushing) {
        proto::release_slots(*q.ring, q.ex_consumer + 1);
    }
    q.ex_current = nullptr;
    q.poll_lock.unlock();
}

ibv_wc_opcode read_opcode(ibv_cq_ex* cq) {
    return static_cast<ibv_wc_opcode>(current(cq).opcode);
}
uint32_t read_vendor_err(ibv_cq_ex* cq) {
    return current(cq).vendor_err;
}
uint32_t read_byte_len(ibv_cq_ex* cq) {
    return current(cq).byte_len;
}
// The immediate data (network order) or, for IBV_WC_WITH_INV, the invalidated rkey.
__be32 read_imm_data(ibv_cq_ex* cq) {
    return current(cq).imm_data;
}
uint32_t read_qp_num(ibv_cq_ex* cq) {
    return current(cq).qp_num;
}
uint32_t read_src_qp(ibv_cq_ex* cq) {
    return current(cq).src_qp;
}
unsigned int read_wc_flags(ibv_cq_ex* cq) {
    return current(cq).wc_flags;
}
uint32_t read_slid(ibv_cq_ex* cq) {
    return current(cq).slid;
}
uint8_t read_sl(ibv_cq_ex* cq) {
    return current(cq).sl;
}
uint8_t read_dlid_path_bits(ibv_cq_ex* cq) {
    return current(cq).dlid_path_bits;
}
// In the device clock (ns of CLOCK_MONOTONIC: hca_core_clock 1 GHz); 0 in a CQ created
// without IBV_WC_EX_WITH_COMPLETION_TIMESTAMP(_WALLCLOCK), and in a flush completion.
uint64_t read_completion_ts(ibv_cq_ex* cq) {
    return current(cq).completion_ts;
}
uint64_t read_completion_wallclock_ns(ibv_cq_ex* cq) {
    return current(cq).wallclock_ns;
}
// Refused at creation; present so that a program calling them anyway reads 0, not NULL.
uint16_t read_cvlan(ibv_cq_ex*) {
    return 0;
}
uint32_t read_flow_tag(ibv_cq_ex*) {
    return 0;
}
void read_tm_info(ibv_cq_ex*, ibv_wc_tm_info* info) {
    if (info != nullptr) {
        *info = ibv_wc_tm_info{};
    }
}

int check_attr(ibv_context* context, const ibv_cq_init_attr_ex& attr) {
    if ((attr.comp_mask & ~known_comp_mask) != 0) {
        return EINVAL;
    }
    if ((attr.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) != 0 &&
        to_parent_domain(attr.parent_domain, context) == nullptr) {
        debug("ibv_create_cq_ex: IBV_CQ_INIT_ATTR_MASK_PD names no parent domain of ours");
        return EINVAL;  // what a provider says of a PD that is not a parent domain
    }
    if ((attr.wc_flags & ~known_wc_flags) != 0) {
        return EOPNOTSUPP;
    }
    if ((attr.wc_flags & ~supported_wc_flags) != 0) {
        debug("ibv_create_cq_ex: wc_flags %#llx: no CVLAN, flow tags or tag matching",
              static_cast<unsigned long long>(attr.wc_flags & ~supported_wc_flags));
        return EOPNOTSUPP;
    }
    if ((attr.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) != 0 &&
        (attr.flags & ~supported_create_flags) != 0) {
        debug("ibv_create_cq_ex: create flags %#x are not supported", attr.flags);
        return EOPNOTSUPP;
    }
    return 0;
}

}  // namespace

ibv_cq_ex* create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr) {
    if (attr == nullptr || to_context(context) == nullptr) {
        errno = EINVAL;
        return nullptr;
    }
    if (const int error = check_attr(context, *attr); error != 0) {
        errno = error;
        return nullptr;
    }
    if (attr->cqe > static_cast<uint32_t>(INT32_MAX)) {
        errno = EINVAL;
        return nullptr;
    }
    const uint32_t flags =
        (attr->wc_flags & timestamp_wc_flags) != 0 ? uint32_t{proto::cq_with_timestamps} : 0u;
    ibv_cq* cq = create_cq_flagged(context, static_cast<int>(attr->cqe), attr->cq_context,
                                   attr->channel, static_cast<int>(attr->comp_vector), flags);
    if (cq == nullptr) {
        return nullptr;
    }
    shim_cq* q = to_cq(cq);
    ibv_cq_ex& x = q->cq_ex;
    x.comp_mask = 0;
    x.status = IBV_WC_SUCCESS;
    x.wr_id = 0;
    x.start_poll = start_poll;
    x.next_poll = next_poll;
    x.end_poll = end_poll;
    x.read_opcode = read_opcode;
    x.read_vendor_err = read_vendor_err;
    x.read_byte_len = read_byte_len;
    x.read_imm_data = read_imm_data;
    x.read_qp_num = read_qp_num;
    x.read_src_qp = read_src_qp;
    x.read_wc_flags = read_wc_flags;
    x.read_slid = read_slid;
    x.read_sl = read_sl;
    x.read_dlid_path_bits = read_dlid_path_bits;
    x.read_completion_ts = read_completion_ts;
    x.read_cvlan = read_cvlan;
    x.read_flow_tag = read_flow_tag;
    x.read_tm_info = read_tm_info;
    x.read_completion_wallclock_ns = read_completion_wallclock_ns;
    q->ex_current = nullptr;
    return &x;
}

}  // namespace jakiro::verbs_shim
