#pragma once
// A small synchronous etcd v3 client over gRPC (etcd_v3.proto): prefix reads, transactions,
// leases and watches. Every call has a deadline; nothing here retries (the agent decides).
//
// Why gRPC and not the JSON gateway: the watch is a long-lived server stream of many small
// events, which gRPC carries natively (HTTP/2, flow control, keepalive pings that notice a
// dead peer), whereas the gateway returns a chunked HTTP/1.1 body of JSON with base64 keys
// that we would have to frame and decode; the typed messages also give revisions as int64,
// not JSON strings. Debian ships libgrpc++ and protoc, so the cost is only a build dependency.
//
// Thread-safety: one etcd_client may be used from several threads (gRPC stubs are
// thread-safe); a watch_stream belongs to one thread, except cancel() which any may call.

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dataplane/control_plane/etcd_v3.grpc.pb.h"

namespace jakiro::control_plane {

struct key_value {
    std::string key;
    std::string value;
    int64_t mod_revision = 0;
    int64_t lease = 0;
};

class etcd_client {
  public:
    // `endpoints`: "http://ADDR:PORT" URLs; gRPC picks the first that answers.
    // `wait_for_ready`: calls wait (up to their deadline; a watch: until cancelled) for etcd
    // to answer instead of failing at once while it is unreachable. A long-lived client
    // (jakirod) needs it: a call that waits is also what drives gRPC's reconnection (the
    // sync API has no other poller but a slow backup one), so with fail-fast calls a client
    // whose etcd restarted would keep timing out its handshakes. jakiroctl fails fast.
    etcd_client(const std::vector<std::string>& endpoints, bool wait_for_ready);

    // The gRPC target for `endpoints` ("ipv4:198.18.0.250:2379,..." or "dns:///name:port").
    static std::string target_of(const std::vector<std::string>& endpoints);

    // Every key under `prefix` at revision `revision`, or at the newest when it is 0 (in pages;
    // all at one revision, which `revision` holds afterwards). Appends to `out`.
    bool range_prefix(const std::string& prefix, std::vector<key_value>& out, int64_t& revision,
                      std::string& error, std::chrono::milliseconds timeout);
    bool txn(const etcdserverpb::TxnRequest& request, etcdserverpb::TxnResponse& response,
             std::string& error, std::chrono::milliseconds timeout);
    bool lease_grant(int64_t ttl_s, int64_t& id, std::string& error,
                     std::chrono::milliseconds timeout);
    // One keep-alive round trip; `ttl_s` <= 0 afterwards means the lease is gone.
    bool lease_keep_alive(int64_t id, int64_t& ttl_s, std::string& error,
                          std::chrono::milliseconds timeout);

    // A watch on every key under a prefix from a revision (inclusive).
    class watch_stream {
      public:
        // Nothing is sent yet: the first next() opens the stream, so that cancel() can be
        // registered with whoever must be able to end it before anything blocks.
        watch_stream(etcd_client& client, const std::string& prefix, int64_t start_revision);
        // Blocks for the next response (the first opens the stream and waits for etcd);
        // false when the stream ended or could not open (error has why).
        bool next(etcdserverpb::WatchResponse& response, std::string& error);
        // Ends a next() in progress from another thread, the first one included; a cancel()
        // before the first next() makes it return false at once.
        void cancel();

      private:
        etcd_client& _client;
        std::string _prefix;
        int64_t _start_revision;
        grpc::ClientContext _context;
        std::unique_ptr<
            grpc::ClientReaderWriter<etcdserverpb::WatchRequest, etcdserverpb::WatchResponse>>
            _stream;
    };

  private:
    void prepare(grpc::ClientContext& context, std::chrono::milliseconds timeout) const;

    bool _wait_for_ready;
    std::shared_ptr<grpc::Channel> _channel;
    std::unique_ptr<etcdserverpb::KV::Stub> _kv;
    std::unique_ptr<etcdserverpb::Watch::Stub> _watch;
    std::unique_ptr<etcdserverpb::Lease::Stub> _lease;
};

}  // namespace jakiro::control_plane
