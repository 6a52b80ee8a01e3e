#include "dataplane/control_plane/etcd_client.hh"

#include <grpcpp/grpcpp.h>

#include "dataplane/control_plane/key_schema.hh"

namespace jakiro::control_plane {

namespace {

// A full read of 50 000 records is ~10 MB: above gRPC's 4 MB default for one message.
constexpr int max_message_bytes = 256 << 20;
// HTTP/2 pings while a watch is idle: a peer that vanished without a reset (a dead host, a
// cut link) is noticed in about keepalive_ms + keepalive_timeout_ms, not at TCP's minutes.
constexpr int keepalive_ms = 2000;
constexpr int keepalive_timeout_ms = 2000;
// Keys per page of a prefix read: bounded messages and etcd memory per request.
constexpr int64_t page_keys = 10000;

std::string describe(const grpc::Status& status) {
    return status.error_message().empty() ? "gRPC status " + std::to_string(status.error_code())
                                          : status.error_message();
}

}  // namespace

std::string etcd_client::target_of(const std::vector<std::string>& endpoints) {
    std::vector<std::string> hosts;
    bool all_ipv4 = true;
    for (const auto& url : endpoints) {
        std::string host = url;
        if (host.rfind("http://", 0) == 0) {
            host = host.substr(7);
        }
        if (const auto slash = host.find('/'); slash != std::string::npos) {
            host.resize(slash);
        }
        const auto colon = host.rfind(':');
        const auto address = colon == std::string::npos ? host : host.substr(0, colon);
        all_ipv4 &=
            !address.empty() && address.find_first_not_of("0123456789.") == std::string::npos;
        hosts.push_back(colon == std::string::npos ? host + ":2379" : host);
    }
    if (hosts.empty()) {
        return "";
    }
    if (!all_ipv4) {
        return "dns:///" + hosts[0];
    }
    std::string target = "ipv4:";
    for (std::size_t i = 0; i < hosts.size(); ++i) {
        target += (i ? "," : "") + hosts[i];
    }
    return target;
}

void etcd_client::prepare(grpc::ClientContext& context, std::chrono::milliseconds timeout) const {
    context.set_deadline(std::chrono::system_clock::now() + timeout);
    context.set_wait_for_ready(_wait_for_ready);
}

etcd_client::etcd_client(const std::vector<std::string>& endpoints, bool wait_for_ready)
    : _wait_for_ready(wait_for_ready) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(max_message_bytes);
    args.SetMaxSendMessageSize(max_message_bytes);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, keepalive_ms);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, keepalive_timeout_ms);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    // Reconnect promptly when etcd comes back (gRPC's default backoff grows to 120 s).
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 1000);  // also the connect timeout
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    _channel =
        grpc::CreateCustomChannel(target_of(endpoints), grpc::InsecureChannelCredentials(), args);
    _kv = etcdserverpb::KV::NewStub(_channel);
    _watch = etcdserverpb::Watch::NewStub(_channel);
    _lease = etcdserverpb::Lease::NewStub(_channel);
}

bool etcd_client::range_prefix(const std::string& prefix, std::vector<key_value>& out,
                               int64_t& revision, std::string& error,
                               std::chrono::milliseconds timeout) {
    const auto end = prefix_range_end(prefix);
    std::string from = prefix;
    for (;;) {
        etcdserverpb::RangeRequest request;
        request.set_key(from);
        request.set_range_end(end);
        request.set_limit(page_keys);
        // Later pages read at the first page's revision: one consistent snapshot.
        request.set_revision(revision);
        etcdserverpb::RangeResponse response;
        grpc::ClientContext context;
        prepare(context, timeout);
        const auto status = _kv->Range(&context, request, &response);
        if (!status.ok()) {
            error = "range " + prefix + ": " + describe(status);
            return false;
        }
        if (revision == 0) {
            revision = response.header().revision();
        }
        for (const auto& kv : response.kvs()) {
            out.push_back({kv.key(), kv.value(), kv.mod_revision(), kv.lease()});
        }
        if (!response.more() || response.kvs().empty()) {
            return true;
        }
        from = response.kvs().rbegin()->key() + std::string(1, '\0');  // the next key after
    }
}

bool etcd_client::txn(const etcdserverpb::TxnRequest& request, etcdserverpb::TxnResponse& response,
                      std::string& error, std::chrono::milliseconds timeout) {
    grpc::ClientContext context;
    prepare(context, timeout);
    const auto status = _kv->Txn(&context, request, &response);
    if (!status.ok()) {
        error = "transaction: " + describe(status);
        return false;
    }
    return true;
}

bool etcd_client::lease_grant(int64_t ttl_s, int64_t& id, std::string& error,
                              std::chrono::milliseconds timeout) {
    etcdserverpb::LeaseGrantRequest request;
    request.set_ttl(ttl_s);
    etcdserverpb::LeaseGrantResponse response;
    grpc::ClientContext context;
    prepare(context, timeout);
    const auto status = _lease->LeaseGrant(&context, request, &response);
    if (!status.ok() || !response.error().empty()) {
        error = "lease grant: " + (status.ok() ? response.error() : describe(status));
        return false;
    }
    id = response.id();
    return true;
}

bool etcd_client::lease_keep_alive(int64_t id, int64_t& ttl_s, std::string& error,
                                   std::chrono::milliseconds timeout) {
    grpc::ClientContext context;
    prepare(context, timeout);
    auto stream = _lease->LeaseKeepAlive(&context);
    etcdserverpb::LeaseKeepAliveRequest request;
    request.set_id(id);
    etcdserverpb::LeaseKeepAliveResponse response;
    const bool exchanged =
        stream->Write(request) && stream->WritesDone() && stream->Read(&response);
    const auto status = stream->Finish();
    if (!exchanged) {
        error = "lease keep-alive: " + (status.ok() ? std::string("no answer") : describe(status));
        return false;
    }
    ttl_s = response.ttl();
    return true;
}

etcd_client::watch_stream::watch_stream(etcd_client& client, const std::string& prefix,
                                        int64_t start_revision)
    : _client(client), _prefix(prefix), _start_revision(start_revision) {
    _context.set_wait_for_ready(client._wait_for_ready);  // no deadline: cancel() ends it
}

bool etcd_client::watch_stream::next(etcdserverpb::WatchResponse& response, std::string& error) {
    if (_stream == nullptr) {
        // Opening the stream waits for a connection to etcd (wait_for_ready), however long:
        // here, after the owner could register cancel(), so a stop never waits on a dead etcd.
        _stream = _client._watch->Watch(&_context);
        etcdserverpb::WatchRequest request;
        auto* create = request.mutable_create_request();
        create->set_key(_prefix);
        create->set_range_end(prefix_range_end(_prefix));
        create->set_start_revision(_start_revision);
        // Empty responses now and then while nothing changes: the revision stays fresh.
        create->set_progress_notify(true);
        _stream->Write(request);  // a failure shows up as the Read below failing
    }
    if (_stream->Read(&response)) {
        return true;
    }
    const auto status = _stream->Finish();
    error = "watch: " + (status.ok() ? std::string("stream closed") : describe(status));
    return false;
}

void etcd_client::watch_stream::cancel() {
    _context.TryCancel();
}

}  // namespace jakiro::control_plane
