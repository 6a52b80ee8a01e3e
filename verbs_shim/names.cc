#include "verbs_shim/names.hh"

#include <cstddef>
#include <iterator>

namespace jakiro::verbs_shim {

namespace {

template <std::size_t N>
const char* pick(const char* const (&names)[N], int value) {
    return value >= 0 && static_cast<std::size_t>(value) < N ? names[value] : "unknown";
}

// Index = enum value (IB spec numbering, as in verbs.h).
const char* const node_types[] = {"unknown",           "InfiniBand channel adapter",
                                  "InfiniBand switch", "InfiniBand router",
                                  "iWARP NIC",         "usNIC",
                                  "usNIC UDP",         "unspecified"};
const char* const port_states[] = {"no state change (NOP)", "down", "init", "armed", "active",
                                   "active defer"};
const char* const event_types[] = {"CQ error",
                                   "local work queue catastrophic error",
                                   "invalid request local work queue error",
                                   "local access violation work queue error",
                                   "communication established",
                                   "send queue drained",
                                   "path migrated",
                                   "path migration request error",
                                   "local catastrophic error",
                                   "port active",
                                   "port error",
                                   "LID change",
                                   "P_Key change",
                                   "SM change",
                                   "SRQ catastrophic error",
                                   "SRQ limit reached",
                                   "last WQE reached",
                                   "client reregistration",
                                   "GID table change",
                                   "WQ fatal"};
const char* const wc_statuses[] = {"success",
                                   "local length error",
                                   "local QP operation error",
                                   "local EE context operation error",
                                   "local protection error",
                                   "Work Request Flushed Error",
                                   "memory management operation error",
                                   "bad response error",
                                   "local access error",
                                   "remote invalid request error",
                                   "remote access error",
                                   "remote operation error",
                                   "transport retry counter exceeded",
                                   "RNR retry counter exceeded",
                                   "local RDD violation error",
                                   "remote invalid RD request",
                                   "aborted error",
                                   "invalid EE context number",
                                   "invalid EE context state",
                                   "fatal error",
                                   "response timeout error",
                                   "general error",
                                   "TM error",
                                   "TM software rendezvous"};

// Static rate encodings (IBTA): multiple of 2.5 Gb/s (-1 where the rate is not one) and the
// exact Mb/s of the lane encoding.
struct rate_entry {
    int rate;
    int mult;
    int mbps;
};
constexpr rate_entry rates[] = {
    {IBV_RATE_2_5_GBPS, 1, 2500},       {IBV_RATE_5_GBPS, 2, 5000},
    {IBV_RATE_10_GBPS, 4, 10000},       {IBV_RATE_20_GBPS, 8, 20000},
    {IBV_RATE_30_GBPS, 12, 30000},      {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},      {IBV_RATE_80_GBPS, 32, 80000},
    {IBV_RATE_120_GBPS, 48, 120000},    {IBV_RATE_14_GBPS, -1, 14062},
    {IBV_RATE_56_GBPS, -1, 56250},      {IBV_RATE_112_GBPS, -1, 112500},
    {IBV_RATE_168_GBPS, -1, 168750},    {IBV_RATE_25_GBPS, -1, 25781},
    {IBV_RATE_100_GBPS, -1, 103125},    {IBV_RATE_200_GBPS, -1, 206250},
    {IBV_RATE_300_GBPS, -1, 309375},    {IBV_RATE_28_GBPS, 11, 28125},
    {IBV_RATE_50_GBPS, 20, 53125},      {IBV_RATE_400_GBPS, 160, 425000},
    {IBV_RATE_600_GBPS, 240, 637500},   {23 /* 800 Gb/s */, 320, 850000},
    {24 /* 1200 Gb/s */, 480, 1275000},
};

}  // namespace

const char* node_type_name(ibv_node_type type) {
    return pick(node_types, static_cast<int>(type));
}

const char* port_state_name(ibv_port_state state) {
    return pick(port_states, static_cast<int>(state));
}

const char* event_type_name(ibv_event_type event) {
    return pick(event_types, static_cast<int>(event));
}

const char* wc_status_name(ibv_wc_status status) {
    return pick(wc_statuses, static_cast<int>(status));
}

int rate_to_mult(ibv_rate rate) {
    for (const auto& r : rates) {
        if (r.rate == rate) {
            return r.mult;
        }
    }
    return -1;
}

ibv_rate mult_to_rate(int mult) {
    for (const auto& r : rates) {
        if (r.mult == mult && mult > 0) {
            return static_cast<ibv_rate>(r.rate);
        }
    }
    return IBV_RATE_MAX;
}

int rate_to_mbps(ibv_rate rate) {
    for (const auto& r : rates) {
        if (r.rate == rate) {
            return r.mbps;
        }
    }
    return -1;
}

ibv_rate mbps_to_rate(int mbps) {
    for (const auto& r : rates) {
        if (r.mbps == mbps) {
            return static_cast<ibv_rate>(r.rate);
        }
    }
    return IBV_RATE_MAX;
}

}  // namespace jakiro::verbs_shim
