#pragma once
// A stand-in for jakirod's verbs socket, for testing the shim in-process: one listening path
// socket, one client connection served on a thread, answering HELLO, PDs, CQs and QPs with
// real objects (a sealed memfd QP ring and a sealed one-page memfd doorbell, a CQ ring memfd,
// an async event socket) and recording what it was asked. No engine: the test plays it,
// reading WQEs out of the ring, retiring slots, setting `sleeping`, sending async events.
//
// Thread-safety: the serving thread and the test share the records under `mutex()`; the
// shim's control verbs are synchronous, so a verb's request is recorded before it returns.

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "verbs_abi/protocol.hh"
#include "verbs_abi/rings.hh"
#include "verbs_shim/device.hh"

namespace jakiro::verbs_shim::testing {

// The device limits the fake reports: jakirod's (verbs_shim/README.md's table).
verbs_proto::limits fake_limits();

class fake_jakirod {
  public:
    struct qp_record {
        verbs_proto::create_qp_request request{};
        verbs_proto::qp_ring_header* ring = nullptr;  // the fake's own mapping
        std::size_t ring_bytes = 0;
        int doorbell_fd = -1;                            // the fake's doorbell page (memfd)
        verbs_proto::doorbell_page* doorbell = nullptr;  // the fake's mapping: the test reads it
        verbs_proto::qp_attr_wire attr{};  // what modify_qp set (masked fields merged)
        bool destroyed = false;
    };

    // Changes a create_qp answer before it is sent: the reply, the ring header as it will be
    // shared, and the fds (ring, doorbell) that go with it (a test may close or reorder them).
    using qp_tamper = std::function<void(verbs_proto::create_qp_reply&,
                                         verbs_proto::qp_ring_header&, std::vector<int>& fds)>;

    fake_jakirod();
    ~fake_jakirod();
    fake_jakirod(const fake_jakirod&) = delete;
    fake_jakirod& operator=(const fake_jakirod&) = delete;

    // A context opened through the shim's own open_device on a hand-made device.
    ibv_context* open();
    // Ends the connection as a dying jakirod would (the shim then reads EIO).
    void stop();

    // The next request with opcode `op` is answered with `status` (a bare reply_header).
    void fail_next(verbs_proto::opcode op, int status);
    void tamper_next_qp(qp_tamper t);
    // resize_cq is answered with a fresh ring into which the fake publishes `completions`
    // (wr_id 1000, 1001, ...) before replying that it moved none: jakirod's engine completing
    // into the new ring before the shim has mapped it. `producer_skew` is added to the
    // published producer index (a ring that claims more than it holds).
    void on_resize(uint32_t completions, uint32_t producer_skew = 0);
    // Sends an async event on the client's async channel.
    void send_async(verbs_proto::event_type type, uint64_t handle, uint32_t port = 0);

    // open_fd_count() once the fake has finished with the last request: it closes its copies
    // of what it sent just after sending, on its own thread, while the shim's verb returns.
    int idle_fd_count();

    std::mutex& mutex() { return _mutex; }
    // Under mutex(): QPs by handle, every request's opcode in order, the last modify.
    std::map<uint32_t, qp_record>& qps() { return _qps; }
    std::vector<uint16_t>& opcodes() { return _opcodes; }
    verbs_proto::modify_qp_request& last_modify() { return _last_modify; }
    std::size_t count(verbs_proto::opcode op);
    // The QP created last (its handle), for tests with one QP.
    uint32_t last_qp() { return _last_qp; }
    qp_record& qp(uint32_t handle);

  private:
    void serve();
    // Descriptors that came with a request are the caller's (closed after).
    void answer(const std::byte* data, std::size_t size);
    void reply(const void* data, std::size_t size, const std::vector<int>& fds = {});
    void create_qp(const verbs_proto::create_qp_request& req);
    void create_cq(const verbs_proto::create_cq_request& req);
    void resize_cq(const verbs_proto::resize_cq_request& req);

    std::string _dir;
    std::string _path;
    int _listen = -1;
    int _conn = -1;
    int _stop = -1;                  // eventfd: wakes the thread to end
    int _async_server = -1;          // our end of the client's async channel
    std::atomic<bool> _busy{false};  // between receiving a request and closing what went out
    shim_device _device{};
    std::thread _thread;
    std::mutex _mutex;
    std::map<verbs_proto::opcode, int> _failures;
    qp_tamper _tamper;
    uint32_t _resize_completions = 0;
    uint32_t _resize_skew = 0;
    std::map<uint32_t, qp_record> _qps;
    std::vector<uint16_t> _opcodes;
    verbs_proto::modify_qp_request _last_modify{};
    uint32_t _next_handle = 0x100;
    uint32_t _last_qp = 0;
    std::vector<std::pair<void*, std::size_t>> _cq_rings;
};

// Descriptors this process has open (entries of /proc/self/fd), for leak checks.
int open_fd_count();

}  // namespace jakiro::verbs_shim::testing
