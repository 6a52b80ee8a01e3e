#include "rnic/qp_state.hh"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <utility>

namespace jakiro::rnic {
namespace {

const qp_device_limits limits{};  // 1 port, 1 P_Key, 1 GID, MTU 4096, 16 read/atomic

// Attribute values that pass every value check; tests pick which ones the mask sends.
ibv_qp_attr good_attr() {
    ibv_qp_attr a{};
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qkey = 0x11111111;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.ah_attr.grh.sgid_index = 0;
    a.ah_attr.grh.hop_limit = 64;
    a.alt_ah_attr = a.ah_attr;
    a.alt_port_num = 1;
    a.path_mtu = IBV_MTU_1024;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.rq_psn = 0x1000;
    a.sq_psn = 0x2000;
    a.dest_qp_num = 0x42;
    a.max_rd_atomic = 1;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.path_mig_state = IBV_MIG_MIGRATED;
    return a;
}

// Stores an out-of-range value in an enum field the way a C caller can (a static_cast to the
// enum would itself be undefined).
template <typename Enum>
void poke(Enum& field, int value) {
    std::memcpy(&field, &value, sizeof(field));
}

int to_state(qp_state_machine& qp, ibv_qp_state s, int mask) {
    ibv_qp_attr a = good_attr();
    a.qp_state = s;
    return qp.modify(a, IBV_QP_STATE | mask);
}

// The minimal masks of ibv_modify_qp(3), per type.
struct bring_up {
    int init;
    int rtr;
    int rts;
};

bring_up man_page_masks(ibv_qp_type type) {
    switch (type) {
        case IBV_QPT_RC:
            return {IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
                    IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_TIMEOUT};
        case IBV_QPT_UC:
            return {IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
                    IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN, IBV_QP_SQ_PSN};
        default:
            return {IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY, 0, IBV_QP_SQ_PSN};
    }
}

// Moves a fresh QP to `target` along RESET -> INIT -> RTR -> RTS (-> SQD / ERR / SQE).
void drive_to(qp_state_machine& qp, ibv_qp_state target) {
    const bring_up m = man_page_masks(qp.type());
    if (target == IBV_QPS_RESET) {
        return;
    }
    if (target == IBV_QPS_ERR) {
        ASSERT_EQ(to_state(qp, IBV_QPS_ERR, 0), 0);
        return;
    }
    ASSERT_EQ(to_state(qp, IBV_QPS_INIT, m.init), 0);
    if (target == IBV_QPS_INIT) {
        return;
    }
    ASSERT_EQ(to_state(qp, IBV_QPS_RTR, m.rtr), 0);
    if (target == IBV_QPS_RTR) {
        return;
    }
    ASSERT_EQ(to_state(qp, IBV_QPS_RTS, m.rts), 0);
    if (target == IBV_QPS_SQD) {
        ASSERT_EQ(to_state(qp, IBV_QPS_SQD, 0), 0);
    } else if (target == IBV_QPS_SQE) {
        ASSERT_EQ(qp.on_send_error(), IBV_QPS_SQE);
    }
}

constexpr ibv_qp_type types[] = {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD};
constexpr ibv_qp_state states[] = {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS,
                                   IBV_QPS_SQD,   IBV_QPS_SQE,  IBV_QPS_ERR};

TEST(QpState, NewQpStartsInResetWithNothingSet) {
    qp_state_machine qp(IBV_QPT_RC, limits);
    EXPECT_EQ(qp.state(), IBV_QPS_RESET);
    EXPECT_EQ(qp.attr().sq_psn, 0u);
    EXPECT_EQ(qp.send_disposition(), wr_disposition::reject);
    EXPECT_EQ(qp.recv_disposition(), wr_disposition::reject);
    EXPECT_FALSE(qp.accepts_inbound());
}

TEST(QpState, ManPageMasksBringEveryTypeToRts) {
    for (ibv_qp_type type : types) {
        SCOPED_TRACE(type);
        qp_state_machine qp(type, limits);
        drive_to(qp, IBV_QPS_RTS);
        EXPECT_EQ(qp.state(), IBV_QPS_RTS);
        EXPECT_EQ(qp.send_disposition(), wr_disposition::execute);
        EXPECT_TRUE(qp.accepts_inbound());
    }
}

TEST(QpState, RcKeepsTheAttributesItWasGiven) {
    qp_state_machine qp(IBV_QPT_RC, limits);
    drive_to(qp, IBV_QPS_RTS);
    const ibv_qp_attr& a = qp.attr();
    EXPECT_EQ(a.qp_access_flags, unsigned{IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ});
    EXPECT_EQ(a.port_num, 1);
    EXPECT_EQ(a.path_mtu, IBV_MTU_1024);
    EXPECT_EQ(a.dest_qp_num, 0x42u);
    EXPECT_EQ(a.rq_psn, 0x1000u);
    EXPECT_EQ(a.sq_psn, 0x2000u);
    EXPECT_EQ(a.timeout, 14);
    EXPECT_EQ(a.retry_cnt, 7);
    EXPECT_EQ(a.rnr_retry, 7);
    EXPECT_EQ(a.min_rnr_timer, 12);
    EXPECT_EQ(a.max_rd_atomic, 1);
    EXPECT_EQ(a.max_dest_rd_atomic, 1);
    EXPECT_EQ(a.ah_attr.grh.hop_limit, 64);
    EXPECT_EQ(a.qkey, 0u);  // never in an RC mask
}

TEST(QpState, PsnsAndDestQpnAreCutTo24Bits) {
    qp_state_machine qp(IBV_QPT_RC, limits);
    const bring_up m = man_page_masks(IBV_QPT_RC);
    ASSERT_EQ(to_state(qp, IBV_QPS_INIT, m.init), 0);
    ibv_qp_attr a = good_attr();
    a.qp_state = IBV_QPS_RTR;
    a.rq_psn = 0xDEADBEEF;
    a.dest_qp_num = 0xFF000011;
    ASSERT_EQ(qp.modify(a, IBV_QP_STATE | m.rtr), 0);
    EXPECT_EQ(qp.attr().rq_psn, 0xADBEEFu);
    EXPECT_EQ(qp.attr().dest_qp_num, 0x11u);
}

TEST(QpState, EveryMissingRequiredAttributeIsEinval) {
    for (ibv_qp_type type : types) {
        const bring_up m = man_page_masks(type);
        const std::pair<ibv_qp_state, int> steps[] = {
            {IBV_QPS_INIT, m.init}, {IBV_QPS_RTR, m.rtr}, {IBV_QPS_RTS, m.rts}};
        qp_state_machine qp(type, limits);
        for (const auto& [next, required] : steps) {
            for (int bit = 1; bit <= IBV_QP_DEST_QPN; bit <<= 1) {
                if (!(required & bit)) {
                    continue;
                }
                const ibv_qp_state before = qp.state();
                EXPECT_EQ(to_state(qp, next, required & ~bit), EINVAL)
                    << "type " << type << " to " << next << " without bit " << bit;
                EXPECT_EQ(qp.state(), before);
            }
            ASSERT_EQ(to_state(qp, next, required), 0);
        }
    }
}

TEST(QpState, AttributesOutsideTheTransitionAreEinval) {
    {
        qp_state_machine rc(IBV_QPT_RC, limits);
        EXPECT_EQ(to_state(rc, IBV_QPS_INIT, man_page_masks(IBV_QPT_RC).init | IBV_QP_QKEY),
                  EINVAL);
        EXPECT_EQ(rc.state(), IBV_QPS_RESET);
    }
    {
        qp_state_machine ud(IBV_QPT_UD, limits);
        EXPECT_EQ(to_state(ud, IBV_QPS_INIT, man_page_masks(IBV_QPT_UD).init | IBV_QP_ACCESS_FLAGS),
                  EINVAL);
    }
    {
        qp_state_machine uc(IBV_QPT_UC, limits);
        drive_to(uc, IBV_QPS_RTR);
        // UC has no ACKs: no timeout, retries or RNR timer.
        EXPECT_EQ(to_state(uc, IBV_QPS_RTS, IBV_QP_SQ_PSN | IBV_QP_TIMEOUT), EINVAL);
        EXPECT_EQ(to_state(uc, IBV_QPS_RTS, IBV_QP_SQ_PSN | IBV_QP_MIN_RNR_TIMER), EINVAL);
        EXPECT_EQ(to_state(uc, IBV_QPS_RTS, IBV_QP_SQ_PSN | IBV_QP_ACCESS_FLAGS), 0);
    }
    {
        qp_state_machine rc(IBV_QPT_RC, limits);
        drive_to(rc, IBV_QPS_INIT);
        // SQ_PSN belongs to RTR -> RTS.
        EXPECT_EQ(to_state(rc, IBV_QPS_RTR, man_page_masks(IBV_QPT_RC).rtr | IBV_QP_SQ_PSN),
                  EINVAL);
        EXPECT_EQ(rc.state(), IBV_QPS_INIT);
    }
}

TEST(QpState, OptionalAttributesAreAccepted) {
    qp_state_machine rc(IBV_QPT_RC, limits);
    const bring_up m = man_page_masks(IBV_QPT_RC);
    ASSERT_EQ(to_state(rc, IBV_QPS_INIT, m.init), 0);
    ASSERT_EQ(to_state(rc, IBV_QPS_INIT, IBV_QP_ACCESS_FLAGS), 0);  // INIT -> INIT
    ASSERT_EQ(to_state(rc, IBV_QPS_RTR, m.rtr | IBV_QP_ALT_PATH | IBV_QP_PKEY_INDEX), 0);
    ibv_qp_attr a = good_attr();
    a.qp_state = IBV_QPS_RTS;
    a.cur_qp_state = IBV_QPS_RTR;
    ASSERT_EQ(rc.modify(a, IBV_QP_STATE | IBV_QP_CUR_STATE | m.rts | IBV_QP_MIN_RNR_TIMER |
                               IBV_QP_PATH_MIG_STATE | IBV_QP_ACCESS_FLAGS),
              0);
    EXPECT_EQ(rc.state(), IBV_QPS_RTS);
}

TEST(QpState, OnlyTheIbtaTransitionsExist) {
    // (from, to) pairs the kernel table and IBTA allow; everything else must be EINVAL.
    const std::set<std::pair<int, int>> legal = {
        {IBV_QPS_RESET, IBV_QPS_INIT}, {IBV_QPS_INIT, IBV_QPS_INIT}, {IBV_QPS_INIT, IBV_QPS_RTR},
        {IBV_QPS_RTR, IBV_QPS_RTS},    {IBV_QPS_RTS, IBV_QPS_RTS},   {IBV_QPS_RTS, IBV_QPS_SQD},
        {IBV_QPS_SQD, IBV_QPS_RTS},    {IBV_QPS_SQD, IBV_QPS_SQD},   {IBV_QPS_SQE, IBV_QPS_RTS}};
    for (ibv_qp_type type : types) {
        for (ibv_qp_state from : states) {
            for (ibv_qp_state to : states) {
                const bool expected =
                    to == IBV_QPS_RESET || to == IBV_QPS_ERR || legal.count({from, to}) != 0;
                EXPECT_EQ(qp_transition(from, to, type).valid, expected)
                    << "type " << type << " " << from << " -> " << to;
            }
        }
    }
}

TEST(QpState, IllegalTransitionsFailAndLeaveTheQpAlone) {
    struct case_ {
        ibv_qp_state from;
        ibv_qp_state to;
    };
    const case_ cases[] = {{IBV_QPS_RESET, IBV_QPS_RTR}, {IBV_QPS_RESET, IBV_QPS_RTS},
                           {IBV_QPS_INIT, IBV_QPS_RTS},  {IBV_QPS_RTR, IBV_QPS_SQD},
                           {IBV_QPS_RTS, IBV_QPS_RTR},   {IBV_QPS_SQD, IBV_QPS_RTR},
                           {IBV_QPS_ERR, IBV_QPS_RTS},   {IBV_QPS_ERR, IBV_QPS_INIT},
                           {IBV_QPS_RTS, IBV_QPS_SQE},   {IBV_QPS_RTS, IBV_QPS_INIT}};
    for (const auto& c : cases) {
        qp_state_machine qp(IBV_QPT_RC, limits);
        drive_to(qp, c.from);
        ASSERT_EQ(qp.state(), c.from);
        const ibv_qp_attr before = qp.attr();
        // Even with every attribute a real bring-up could send.
        EXPECT_EQ(to_state(qp, c.to, man_page_masks(IBV_QPT_RC).rtr), EINVAL)
            << c.from << " -> " << c.to;
        EXPECT_EQ(to_state(qp, c.to, 0), EINVAL) << c.from << " -> " << c.to;
        EXPECT_EQ(qp.state(), c.from);
        EXPECT_EQ(std::memcmp(&before, &qp.attr(), sizeof(before)), 0);
    }
}

TEST(QpState, ResetAndErrorAreReachableFromEveryStateWithNoAttributes) {
    for (ibv_qp_type type : types) {
        for (ibv_qp_state from : states) {
            if (from == IBV_QPS_SQE && type == IBV_QPT_RC) {
                continue;  // RC never enters SQE
            }
            for (ibv_qp_state to : {IBV_QPS_RESET, IBV_QPS_ERR}) {
                qp_state_machine qp(type, limits);
                drive_to(qp, from);
                ASSERT_EQ(qp.state(), from);
                EXPECT_EQ(to_state(qp, to, IBV_QP_PORT), EINVAL);
                EXPECT_EQ(to_state(qp, to, 0), 0);
                EXPECT_EQ(qp.state(), to);
            }
        }
    }
}

TEST(QpState, ResetForgetsEverything) {
    qp_state_machine qp(IBV_QPT_RC, limits);
    drive_to(qp, IBV_QPS_RTS);
    ASSERT_EQ(to_state(qp, IBV_QPS_RESET, 0), 0);
    ibv_qp_attr zero{};
    zero.qp_state = IBV_QPS_RESET;
    zero.cur_qp_state = IBV_QPS_RESET;
    EXPECT_EQ(std::memcmp(&zero, &qp.attr(), sizeof(zero)), 0);
    drive_to(qp, IBV_QPS_RTS);  // and can be brought up again
    EXPECT_EQ(qp.state(), IBV_QPS_RTS);
}

TEST(QpState, ModifyWithoutStateTunesTheCurrentState) {
    qp_state_machine qp(IBV_QPT_RC, limits);
    drive_to(qp, IBV_QPS_RTS);
    ibv_qp_attr a = good_attr();
    a.min_rnr_timer = 20;
    EXPECT_EQ(qp.modify(a, IBV_QP_MIN_RNR_TIMER), 0);  // RTS -> RTS
    EXPECT_EQ(qp.attr().min_rnr_timer, 20);
    EXPECT_EQ(qp.modify(a, IBV_QP_TIMEOUT), EINVAL);  // not changeable in RTS
    EXPECT_EQ(qp.modify(a, 0), 0);
}

TEST(QpState, CurrentStateClaimMustBeTrueAndAllowed) {
    qp_state_machine qp(IBV_QPT_RC, limits);
    drive_to(qp, IBV_QPS_RTR);
    const int rts = man_page_masks(IBV_QPT_RC).rts;
    ibv_qp_attr a = good_attr();
    a.qp_state = IBV_QPS_RTS;
    a.cur_qp_state = IBV_QPS_INIT;  // wrong
    EXPECT_EQ(qp.modify(a, IBV_QP_STATE | IBV_QP_CUR_STATE | rts), EINVAL);
    a.cur_qp_state = IBV_QPS_RTR;
    EXPECT_EQ(qp.modify(a, IBV_QP_STATE | IBV_QP_CUR_STATE | rts), 0);

    qp_state_machine init(IBV_QPT_RC, limits);
    drive_to(init, IBV_QPS_INIT);
    a.qp_state = IBV_QPS_RTR;
    a.cur_qp_state = IBV_QPS_INIT;  // true, but INIT -> RTR takes no CUR_STATE
    EXPECT_EQ(init.modify(a, IBV_QP_STATE | IBV_QP_CUR_STATE | man_page_masks(IBV_QPT_RC).rtr),
              EINVAL);
}

TEST(QpState, UnknownMaskBitsAndStatesAreRejected) {
    qp_state_machine qp(IBV_QPT_RC, limits);
    ibv_qp_attr a = good_attr();
    a.qp_state = IBV_QPS_INIT;
    const int init = man_page_masks(IBV_QPT_RC).init;
    EXPECT_EQ(qp.modify(a, IBV_QP_STATE | init | (1 << 21)), EOPNOTSUPP);  // kernel-only SMAC
    EXPECT_EQ(qp.modify(a, IBV_QP_STATE | init | (1 << 30)), EOPNOTSUPP);
    EXPECT_EQ(qp.modify(a, IBV_QP_STATE | init | IBV_QP_CAP), EINVAL);         // no QP resize
    EXPECT_EQ(qp.modify(a, IBV_QP_STATE | init | IBV_QP_RATE_LIMIT), EINVAL);  // raw QPs only
    a.qp_state = IBV_QPS_UNKNOWN;
    EXPECT_EQ(qp.modify(a, IBV_QP_STATE | init), EINVAL);
    poke(a.qp_state, 42);
    EXPECT_EQ(qp.modify(a, IBV_QP_STATE | init), EINVAL);
    EXPECT_EQ(qp.state(), IBV_QPS_RESET);
}

TEST(QpState, UnsupportedQpTypesAreEinval) {
    qp_state_machine raw(IBV_QPT_RAW_PACKET, limits);
    EXPECT_EQ(to_state(raw, IBV_QPS_INIT, IBV_QP_PORT), EINVAL);
    EXPECT_FALSE(qp_type_supported(IBV_QPT_XRC_SEND));
    EXPECT_FALSE(qp_transition(IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPT_XRC_RECV).valid);
}

// Attribute values a real RNIC refuses even when the mask is right.
TEST(QpState, BadAttributeValuesAreRejected) {
    const bring_up m = man_page_masks(IBV_QPT_RC);
    struct bad {
        const char* what;
        ibv_qp_state at;  // state to reach first
        ibv_qp_state to;
        int mask;
        void (*spoil)(ibv_qp_attr&);
        int err;
    };
    const bad cases[] = {
        {"port 0", IBV_QPS_RESET, IBV_QPS_INIT, m.init, [](ibv_qp_attr& a) { a.port_num = 0; },
         EINVAL},
        {"port 2", IBV_QPS_RESET, IBV_QPS_INIT, m.init, [](ibv_qp_attr& a) { a.port_num = 2; },
         EINVAL},
        {"pkey index", IBV_QPS_RESET, IBV_QPS_INIT, m.init,
         [](ibv_qp_attr& a) { a.pkey_index = 1; }, EINVAL},
        {"AV without GRH", IBV_QPS_INIT, IBV_QPS_RTR, m.rtr,
         [](ibv_qp_attr& a) { a.ah_attr.is_global = 0; }, EINVAL},
        {"AV port", IBV_QPS_INIT, IBV_QPS_RTR, m.rtr,
         [](ibv_qp_attr& a) { a.ah_attr.port_num = 3; }, EINVAL},
        {"sgid index", IBV_QPS_INIT, IBV_QPS_RTR, m.rtr,
         [](ibv_qp_attr& a) { a.ah_attr.grh.sgid_index = 1; }, EINVAL},
        {"MTU above port", IBV_QPS_INIT, IBV_QPS_RTR, m.rtr,
         [](ibv_qp_attr& a) { poke(a.path_mtu, 6); }, EINVAL},
        {"MTU zero", IBV_QPS_INIT, IBV_QPS_RTR, m.rtr, [](ibv_qp_attr& a) { poke(a.path_mtu, 0); },
         EINVAL},
        {"responder resources", IBV_QPS_INIT, IBV_QPS_RTR, m.rtr,
         [](ibv_qp_attr& a) { a.max_dest_rd_atomic = 17; }, EINVAL},
        {"min RNR timer", IBV_QPS_INIT, IBV_QPS_RTR, m.rtr,
         [](ibv_qp_attr& a) { a.min_rnr_timer = 32; }, EINVAL},
        {"timeout", IBV_QPS_RTR, IBV_QPS_RTS, m.rts, [](ibv_qp_attr& a) { a.timeout = 32; },
         EINVAL},
        {"retry count", IBV_QPS_RTR, IBV_QPS_RTS, m.rts, [](ibv_qp_attr& a) { a.retry_cnt = 8; },
         EINVAL},
        {"RNR retry", IBV_QPS_RTR, IBV_QPS_RTS, m.rts, [](ibv_qp_attr& a) { a.rnr_retry = 8; },
         EINVAL},
        {"initiator depth", IBV_QPS_RTR, IBV_QPS_RTS, m.rts,
         [](ibv_qp_attr& a) { a.max_rd_atomic = 17; }, EINVAL},
        {"alternate path port", IBV_QPS_INIT, IBV_QPS_RTR, m.rtr | IBV_QP_ALT_PATH,
         [](ibv_qp_attr& a) { a.alt_port_num = 0; }, EINVAL},
        {"path migration state", IBV_QPS_RTR, IBV_QPS_RTS, m.rts | IBV_QP_PATH_MIG_STATE,
         [](ibv_qp_attr& a) { poke(a.path_mig_state, 7); }, EINVAL},
    };
    for (const auto& c : cases) {
        qp_state_machine qp(IBV_QPT_RC, limits);
        drive_to(qp, c.at);
        ibv_qp_attr a = good_attr();
        a.qp_state = c.to;
        c.spoil(a);
        EXPECT_EQ(qp.modify(a, IBV_QP_STATE | c.mask), c.err) << c.what;
        EXPECT_EQ(qp.state(), c.at) << c.what;
    }
}

TEST(QpState, ControlledQkeyIsEperm) {
    qp_state_machine ud(IBV_QPT_UD, limits);
    ibv_qp_attr a = good_attr();
    a.qp_state = IBV_QPS_INIT;
    a.qkey = 0x80010000;
    EXPECT_EQ(ud.modify(a, IBV_QP_STATE | man_page_masks(IBV_QPT_UD).init), EPERM);
    a.qkey = 0x7FFFFFFF;
    EXPECT_EQ(ud.modify(a, IBV_QP_STATE | man_page_masks(IBV_QPT_UD).init), 0);
    EXPECT_EQ(ud.attr().qkey, 0x7FFFFFFFu);
}

TEST(QpState, SqdDrainsAndNotifiesWhenAsked) {
    qp_state_machine qp(IBV_QPT_RC, limits);
    drive_to(qp, IBV_QPS_RTS);
    ibv_qp_attr a = good_attr();
    a.qp_state = IBV_QPS_SQD;
    a.en_sqd_async_notify = 1;
    ASSERT_EQ(qp.modify(a, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY), 0);
    EXPECT_TRUE(qp.sq_draining());
    EXPECT_EQ(qp.send_disposition(), wr_disposition::hold);
    EXPECT_TRUE(qp.finish_drain());
    EXPECT_FALSE(qp.sq_draining());
    EXPECT_FALSE(qp.finish_drain());  // only once
    // Drained: path and limits may change, then back to RTS.
    a.timeout = 18;
    ASSERT_EQ(qp.modify(a, IBV_QP_TIMEOUT), 0);  // SQD -> SQD
    EXPECT_EQ(qp.attr().timeout, 18);
    ASSERT_EQ(to_state(qp, IBV_QPS_RTS, 0), 0);
    EXPECT_EQ(qp.state(), IBV_QPS_RTS);
}

TEST(QpState, SqdWithoutNotifyDoesNotAskForTheEvent) {
    qp_state_machine qp(IBV_QPT_UD, limits);
    drive_to(qp, IBV_QPS_SQD);
    EXPECT_TRUE(qp.sq_draining());
    EXPECT_FALSE(qp.finish_drain());
    EXPECT_FALSE(qp.sq_draining());
}

TEST(QpState, SendErrorIsFatalForRcAndParksUcUdInSqe) {
    qp_state_machine rc(IBV_QPT_RC, limits);
    drive_to(rc, IBV_QPS_RTS);
    EXPECT_EQ(rc.on_send_error(), IBV_QPS_ERR);
    EXPECT_EQ(rc.send_disposition(), wr_disposition::flush);
    EXPECT_EQ(rc.recv_disposition(), wr_disposition::flush);
    EXPECT_FALSE(rc.accepts_inbound());

    for (ibv_qp_type type : {IBV_QPT_UC, IBV_QPT_UD}) {
        qp_state_machine qp(type, limits);
        drive_to(qp, IBV_QPS_RTS);
        EXPECT_EQ(qp.on_send_error(), IBV_QPS_SQE);
        EXPECT_EQ(qp.send_disposition(), wr_disposition::flush);
        EXPECT_EQ(qp.recv_disposition(), wr_disposition::execute);
        EXPECT_TRUE(qp.accepts_inbound());  // the receive side keeps working
        ibv_qp_attr a = good_attr();
        a.qp_state = IBV_QPS_RTS;
        a.cur_qp_state = IBV_QPS_SQE;
        EXPECT_EQ(qp.modify(a, IBV_QP_STATE | IBV_QP_CUR_STATE), 0);
        EXPECT_EQ(qp.state(), IBV_QPS_RTS);
    }
}

TEST(QpState, EnterErrorFromAnywhere) {
    qp_state_machine qp(IBV_QPT_RC, limits);
    drive_to(qp, IBV_QPS_SQD);
    qp.enter_error();
    EXPECT_EQ(qp.state(), IBV_QPS_ERR);
    EXPECT_FALSE(qp.sq_draining());
    EXPECT_EQ(to_state(qp, IBV_QPS_RTS, 0), EINVAL);
    EXPECT_EQ(to_state(qp, IBV_QPS_RESET, 0), 0);
}

TEST(QpState, WorkRequestDispositionFollowsTheState) {
    qp_state_machine qp(IBV_QPT_RC, limits);
    drive_to(qp, IBV_QPS_INIT);
    EXPECT_EQ(qp.send_disposition(), wr_disposition::reject);
    EXPECT_EQ(qp.recv_disposition(), wr_disposition::execute);  // pre-post receives
    EXPECT_FALSE(qp.accepts_inbound());
    ASSERT_EQ(to_state(qp, IBV_QPS_RTR, man_page_masks(IBV_QPT_RC).rtr), 0);
    EXPECT_EQ(qp.send_disposition(), wr_disposition::reject);
    EXPECT_TRUE(qp.accepts_inbound());
}

TEST(QpState, MaskRuleMatchesKernelExamples) {
    // ibv_rc_pingpong's RTR mask plus the optional P_Key index.
    EXPECT_TRUE(modify_qp_mask_ok(IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPT_RC,
                                  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                      IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                      IBV_QP_MIN_RNR_TIMER | IBV_QP_PKEY_INDEX));
    // UD RTR needs nothing but the state.
    EXPECT_TRUE(modify_qp_mask_ok(IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPT_UD, IBV_QP_STATE));
    // SQD -> SQD: RC may change its port; UC may not.
    EXPECT_TRUE(modify_qp_mask_ok(IBV_QPS_SQD, IBV_QPS_SQD, IBV_QPT_RC, IBV_QP_PORT));
    EXPECT_FALSE(modify_qp_mask_ok(IBV_QPS_SQD, IBV_QPS_SQD, IBV_QPT_UC, IBV_QP_PORT));
    // RTS -> SQD takes only the notify flag.
    EXPECT_TRUE(modify_qp_mask_ok(IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPT_UC,
                                  IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY));
    EXPECT_FALSE(modify_qp_mask_ok(IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPT_UC,
                                   IBV_QP_STATE | IBV_QP_ACCESS_FLAGS));
}

}  // namespace
}  // namespace jakiro::rnic
