#pragma once
// IB Communication Management MADs (IBTA vol. 1 ch. 12 and 13.4): what jakirod's CM agent puts
// on QP1 and reads off it. 256-byte MADs, the 24-byte common MAD header then the attribute's
// fields at the spec's byte and bit positions (big-endian; a "bit offset" counts from the most
// significant bit of its byte). Only what a RoCE rdma_cm peer uses: REQ, MRA, REJ, REP, RTU,
// DREQ, DREP, SIDR_REQ, SIDR_REP; LAP/APR and alternate paths are not decoded.
//
// decode() takes bytes off the wire: everything it returns was range-checked; anything it does
// not understand (another base/class version, management class, method or attribute, a short
// buffer) is std::nullopt, never a partial message. Plain C++, no DPDK.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <variant>

namespace jakiro::rdmacm {

constexpr std::size_t mad_bytes = 256;
constexpr std::size_t mad_header_bytes = 24;
constexpr uint8_t mad_base_version = 1;
constexpr uint8_t cm_management_class = 0x07;
constexpr uint8_t cm_class_version = 2;
constexpr uint8_t mad_method_send = 0x03;
// The Q_Key of every QP1 (IBTA 13.4.6.1: the well-known GSI Q_Key).
constexpr uint32_t gsi_qkey = 0x8001'0000u;
constexpr uint32_t gsi_qpn = 1;

enum class cm_attribute : uint16_t {
    req = 0x10,
    mra = 0x11,
    rej = 0x12,
    rep = 0x13,
    rtu = 0x14,
    dreq = 0x15,
    drep = 0x16,
    sidr_req = 0x17,
    sidr_rep = 0x18,
};

// Private data each message carries (the bytes left after its fields).
constexpr std::size_t req_private_bytes = 92;
constexpr std::size_t mra_private_bytes = 222;
constexpr std::size_t rej_private_bytes = 148;
constexpr std::size_t rep_private_bytes = 196;
constexpr std::size_t rtu_private_bytes = 224;
constexpr std::size_t dreq_private_bytes = 220;
constexpr std::size_t drep_private_bytes = 224;
constexpr std::size_t sidr_req_private_bytes = 216;
constexpr std::size_t sidr_rep_private_bytes = 136;

using gid = std::array<uint8_t, 16>;

// Transport service types of REQ byte 43 (IBTA table 106).
enum class cm_transport : uint8_t { rc = 0, uc = 1, rd = 2 };

// REJ reasons the agent sends or interprets (IBTA table 109).
enum class rej_reason : uint16_t {
    no_qp = 1,
    timeout = 15,
    invalid_service_id = 8,
    stale_connection = 10,
    consumer_defined = 28,
};

// MRA and REJ say which message they answer (2 bits).
enum class message_kind : uint8_t { req = 0, rep = 1, other = 2 };

struct cm_req {
    uint32_t local_comm_id = 0;
    uint64_t service_id = 0;
    uint64_t local_ca_guid = 0;  // as on the wire (big-endian value read as an integer)
    uint32_t local_qkey = 0;
    uint32_t local_qpn = 0;  // 24 bits
    uint8_t responder_resources = 0;
    uint8_t initiator_depth = 0;
    uint8_t remote_cm_response_timeout = 0;  // 5 bits
    cm_transport transport = cm_transport::rc;
    bool end_to_end_flow_control = false;
    uint32_t starting_psn = 0;              // 24 bits
    uint8_t local_cm_response_timeout = 0;  // 5 bits
    uint8_t retry_count = 0;                // 3 bits
    uint16_t pkey = 0xFFFF;
    uint8_t path_mtu = 0;         // 4 bits, IB MTU enum
    uint8_t rnr_retry_count = 0;  // 3 bits
    uint8_t max_cm_retries = 0;   // 4 bits
    bool srq = false;
    uint16_t primary_local_lid = 0;
    uint16_t primary_remote_lid = 0;
    gid primary_local_gid{};
    gid primary_remote_gid{};
    uint32_t primary_flow_label = 0;  // 20 bits
    uint8_t primary_packet_rate = 0;  // 6 bits
    uint8_t primary_traffic_class = 0;
    uint8_t primary_hop_limit = 0;
    uint8_t primary_sl = 0;  // 4 bits
    bool primary_subnet_local = false;
    uint8_t primary_local_ack_timeout = 0;  // 5 bits
    std::array<uint8_t, req_private_bytes> private_data{};
};

struct cm_mra {
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    message_kind message_mraed = message_kind::req;
    uint8_t service_timeout = 0;  // 5 bits
};

struct cm_rej {
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    message_kind message_rejected = message_kind::req;
    uint8_t reject_info_length = 0;  // 7 bits
    uint16_t reason = 0;
    std::array<uint8_t, rej_private_bytes> private_data{};
};

struct cm_rep {
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    uint32_t local_qkey = 0;
    uint32_t local_qpn = 0;     // 24 bits
    uint32_t starting_psn = 0;  // 24 bits
    uint8_t responder_resources = 0;
    uint8_t initiator_depth = 0;
    uint8_t target_ack_delay = 0;   // 5 bits
    uint8_t failover_accepted = 0;  // 2 bits
    bool end_to_end_flow_control = false;
    uint8_t rnr_retry_count = 0;  // 3 bits
    bool srq = false;
    uint64_t local_ca_guid = 0;
    std::array<uint8_t, rep_private_bytes> private_data{};
};

struct cm_rtu {
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
};

struct cm_dreq {
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    uint32_t remote_qpn = 0;  // 24 bits
};

struct cm_drep {
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
};

struct cm_sidr_req {
    uint32_t request_id = 0;
    uint16_t pkey = 0xFFFF;
    uint64_t service_id = 0;
    std::array<uint8_t, sidr_req_private_bytes> private_data{};
};

// SIDR_REP status (IBTA table 120).
enum class sidr_status : uint8_t { valid = 0, no_service = 1, rejected = 2, no_qp = 3 };

struct cm_sidr_rep {
    uint32_t request_id = 0;
    sidr_status status = sidr_status::valid;
    uint32_t qpn = 0;  // 24 bits
    uint64_t service_id = 0;
    uint32_t qkey = 0;
    std::array<uint8_t, sidr_rep_private_bytes> private_data{};
};

using cm_body = std::variant<cm_req, cm_mra, cm_rej, cm_rep, cm_rtu, cm_dreq, cm_drep, cm_sidr_req,
                             cm_sidr_rep>;

struct cm_message {
    uint64_t transaction_id = 0;
    cm_body body;
};

using mad_buffer = std::array<uint8_t, mad_bytes>;

// The whole MAD (header and fields; unused bytes zero).
mad_buffer encode(const cm_message& m);

// A MAD off the wire (the UD payload after the DETH), or nullopt when it is not a CM message
// this agent speaks or is shorter than a MAD.
std::optional<cm_message> decode(std::span<const uint8_t> mad);

cm_attribute attribute_of(const cm_body& b);
const char* attribute_name(cm_attribute a);

}  // namespace jakiro::rdmacm
