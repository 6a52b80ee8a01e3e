// jakirod as a service, the parts that need no EAL: the metrics listener on the control
// thread (HTTP next to the control socket, post(), the tick), the HTTP answers, the per-vNIC QP
// totals, the log's format and rate limit, and sd_notify's datagrams.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>

#include "dataplane/control/command_socket.hh"
#include "dataplane/control/metrics.hh"
#include "dataplane/log.hh"
#include "dataplane/service/notify.hh"
#include "rnic/engine.hh"

namespace jakiro {
namespace {

using std::chrono::milliseconds;

std::string read_all(int fd, milliseconds limit) {
    std::string reply;
    const auto end = std::chrono::steady_clock::now() + limit;
    char buffer[4096];
    for (;;) {
        const auto left =
            std::chrono::duration_cast<milliseconds>(end - std::chrono::steady_clock::now());
        pollfd in{fd, POLLIN, 0};
        if (left.count() <= 0 || poll(&in, 1, static_cast<int>(left.count())) <= 0) {
            return reply + "<timeout>";
        }
        const ssize_t n = read(fd, buffer, sizeof(buffer));
        if (n <= 0) {
            return reply;
        }
        reply.append(buffer, static_cast<std::size_t>(n));
    }
}

int connect_tcp(uint16_t port) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    return fd;
}

class ControlThread : public testing::Test {
  protected:
    void SetUp() override {
        path = "/tmp/jakiro-svc-" + std::to_string(getpid()) + ".sock";
        command_socket::limits lim;
        lim.read_deadline_ms = 1000;
        lim.write_deadline_ms = 1000;
        server = std::make_unique<command_socket>(
            path, [](const std::string& line) { return "OK\n" + line + "\n"; }, lim);
        std::string error;
        const int fd = command_socket::open_tcp_listener(0x7f000001, 0, error);
        ASSERT_GE(fd, 0) << error;
        server->set_http_listener(fd, [this](const std::string& head) {
            http_thread = std::this_thread::get_id();
            return http_metrics_response(head, [] { return std::string("jakiro_up 1\n"); });
        });
        server->set_tick([this] { ++ticks; }, 20);
        ASSERT_TRUE(server->start(error)) << error;
        port = server->http_port();
        ASSERT_NE(port, 0);
    }
    void TearDown() override { server->stop(); }

    std::string http(const std::string& request) const {
        const int fd = connect_tcp(port);
        (void)!send(fd, request.data(), request.size(), MSG_NOSIGNAL);
        std::string reply = read_all(fd, milliseconds(2000));
        close(fd);
        return reply;
    }
    std::string ask(const std::string& line) const {
        const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
        EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
        const std::string text = line + "\n";
        (void)!send(fd, text.data(), text.size(), MSG_NOSIGNAL);
        std::string reply = read_all(fd, milliseconds(2000));
        close(fd);
        return reply;
    }

    std::string path;
    uint16_t port = 0;
    std::unique_ptr<command_socket> server;
    std::atomic<int> ticks{0};
    std::thread::id http_thread;
};

TEST_F(ControlThread, ServesMetricsOverHttpNextToTheControlSocket) {
    const std::string reply = http("GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n");
    EXPECT_EQ(reply.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << reply;
    EXPECT_NE(reply.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
    EXPECT_NE(reply.find("Content-Length: 12\r\n"), std::string::npos);
    EXPECT_EQ(reply.substr(reply.size() - 12), "jakiro_up 1\n");
    EXPECT_EQ(ask("status"), "OK\nstatus\n");
}

TEST_F(ControlThread, HttpRunsOnTheSameThreadAsPostedWorkAndTheTick) {
    http("GET /metrics HTTP/1.0\r\n\r\n");
    std::promise<std::thread::id> posted;
    server->post([&] { posted.set_value(std::this_thread::get_id()); });
    auto id = posted.get_future();
    ASSERT_EQ(id.wait_for(std::chrono::seconds(2)), std::future_status::ready);
    EXPECT_EQ(id.get(), http_thread) << "one control thread serves both";
    const int before = ticks.load();
    std::this_thread::sleep_for(milliseconds(200));
    EXPECT_GE(ticks.load() - before, 3) << "the tick runs about every 20 ms";
}

TEST_F(ControlThread, AHttpClientThatNeverFinishesItsRequestDelaysNobody) {
    const int slow = connect_tcp(port);
    ASSERT_EQ(send(slow, "GET /met", 8, MSG_NOSIGNAL), 8);
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(ask("status"), "OK\nstatus\n");
    EXPECT_NE(http("GET /metrics HTTP/1.1\r\n\r\n").find("jakiro_up 1"), std::string::npos);
    EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(500));
    EXPECT_EQ(read_all(slow, milliseconds(3000)).find("<timeout>"), std::string::npos)
        << "dropped at its deadline";
    close(slow);
}

TEST_F(ControlThread, AListenerReplacedFromTheThreadItselfServesAtOnce) {
    std::string error;
    const int fd = command_socket::open_tcp_listener(0x7f000001, 0, error);
    ASSERT_GE(fd, 0) << error;
    std::promise<void> done;
    server->post([&] {
        server->set_http_listener(fd, [](const std::string& head) {
            return http_metrics_response(head, [] { return std::string("moved 1\n"); });
        });
        done.set_value();
    });
    done.get_future().wait();
    const uint16_t old_port = port;
    port = server->http_port();
    EXPECT_NE(port, old_port);
    EXPECT_NE(http("GET /metrics HTTP/1.1\r\n\r\n").find("moved 1"), std::string::npos);
    const int fd_old = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(old_port);
    EXPECT_NE(connect(fd_old, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
        << "the old port is closed";
    close(fd_old);
}

TEST(HttpMetrics, AnswersGetAndHeadOfMetricsAndRefusesTheRest) {
    int calls = 0;
    auto body = [&] {
        ++calls;
        return std::string("x 1\n");
    };
    auto status = [&](const std::string& request) {
        const std::string r = http_metrics_response(request, body);
        return r.substr(0, r.find("\r\n"));
    };
    EXPECT_EQ(status("GET /metrics HTTP/1.1\r\n\r\n"), "HTTP/1.1 200 OK");
    EXPECT_EQ(status("GET /metrics?x=1 HTTP/1.0\n\n"), "HTTP/1.1 200 OK");
    const std::string head = http_metrics_response("HEAD /metrics HTTP/1.1\r\n\r\n", body);
    EXPECT_NE(head.find("Content-Length: 4\r\n"), std::string::npos);
    EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n") << "HEAD: no body";
    EXPECT_EQ(status("GET / HTTP/1.1\r\n\r\n"), "HTTP/1.1 200 OK");
    EXPECT_EQ(status("GET /other HTTP/1.1\r\n\r\n"), "HTTP/1.1 404 Not Found");
    EXPECT_EQ(status("POST /metrics HTTP/1.1\r\n\r\n"), "HTTP/1.1 405 Method Not Allowed");
    EXPECT_EQ(status("GET /metrics\r\n\r\n"), "HTTP/1.1 400 Bad Request");
    EXPECT_EQ(status("GET /metrics HTTP/1.1\r\nHost: x\r\n"), "HTTP/1.1 400 Bad Request")
        << "cut before the blank line";
    EXPECT_EQ(status("\x16\x03\x01 garbage"), "HTTP/1.1 400 Bad Request");
    EXPECT_EQ(calls, 3) << "the body is made only for GET/HEAD /metrics";
}

rnic::qp_report qp(uint16_t vnic, uint32_t qpn, uint64_t retransmitted, uint64_t naks) {
    rnic::qp_report r;
    r.vnic = vnic;
    r.qpn = qpn;
    r.retransmitted = retransmitted;
    r.naks_received = naks;
    return r;
}

TEST(QpTotals, EachVnicSumsItsLiveQpsAndWhatItsDestroyedOnesCounted) {
    const auto t = qp_totals::by_vnic({qp(0, 1, 10, 1), qp(0, 2, 5, 0), qp(1, 3, 7, 2)},
                                      {qp(0, 0, 100, 4), qp(2, 0, 3, 0)});
    EXPECT_EQ(t.at(0)[qp_totals::retransmitted], 115u);
    EXPECT_EQ(t.at(0)[qp_totals::naks_received], 5u);
    EXPECT_EQ(t.at(1)[qp_totals::retransmitted], 7u);
    EXPECT_EQ(t.at(2)[qp_totals::retransmitted], 3u) << "every QP of vNIC 2 destroyed";
    EXPECT_EQ(t.size(), 3u);
}

TEST(Log, ValuesAreQuotedOnlyWhenTheyNeedIt) {
    EXPECT_EQ(log::quote("h1"), "h1");
    EXPECT_EQ(log::quote("198.18.0.1:9417"), "198.18.0.1:9417");
    EXPECT_EQ(log::quote(""), "\"\"");
    EXPECT_EQ(log::quote("two words"), "\"two words\"");
    EXPECT_EQ(log::quote("a=b"), "\"a=b\"");
    EXPECT_EQ(log::quote("say \"hi\"\n"), "\"say \\\"hi\\\"\\n\"");
}

TEST(Log, EachEventIsRateLimitedAndTheSuppressedAreCounted) {
    // Capture stderr in a pipe while logging.
    int pipe_fds[2];
    ASSERT_EQ(pipe(pipe_fds), 0);
    const int saved = dup(STDERR_FILENO);
    dup2(pipe_fds[1], STDERR_FILENO);
    log::set_rate_limit(5, 200);
    const uint64_t before = log::suppressed();
    for (int i = 0; i < 50; ++i) {
        log::warning("storm", "the same event again", {{"i", i}});
    }
    log::info("other", "a different event still gets through");
    std::this_thread::sleep_for(milliseconds(250));
    log::warning("storm", "after the window");
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(pipe_fds[1]);
    const std::string out = read_all(pipe_fds[0], milliseconds(1000));
    close(pipe_fds[0]);
    log::set_rate_limit(20, 10000);
    int storm = 0, lines = 0;
    for (std::size_t at = 0; (at = out.find("event=storm", at)) != std::string::npos; ++at) {
        ++storm;
    }
    for (const char c : out) {
        lines += c == '\n';
    }
    EXPECT_EQ(storm, 6) << out;
    EXPECT_EQ(lines, 7) << out;
    EXPECT_EQ(log::suppressed() - before, 45u);
    EXPECT_NE(out.find("suppressed=45"), std::string::npos) << "said when the window opened";
    EXPECT_NE(out.find("level=warning event=storm msg=\"the same event again\" i=0"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("event=other"), std::string::npos);
}

TEST(Notify, SendsOneDatagramToTheSocketNamedByNotifySocket) {
    for (const bool abstract : {false, true}) {
        const std::string name =
            "/tmp/jakiro-notify-" + std::to_string(getpid()) + (abstract ? "-abstract" : "");
        const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        std::strncpy(addr.sun_path, name.c_str(), sizeof(addr.sun_path) - 1);
        socklen_t len = sizeof(addr);
        if (abstract) {
            addr.sun_path[0] = '\0';
            len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
        } else {
            unlink(name.c_str());
        }
        ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
        const std::string env = abstract ? "@" + name.substr(1) : name;
        setenv("NOTIFY_SOCKET", env.c_str(), 1);
        EXPECT_TRUE(service::notify("READY=1\nSTATUS=up"));
        char buffer[256];
        const ssize_t n = recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
        ASSERT_GT(n, 0) << (abstract ? "abstract" : "path");
        EXPECT_EQ(std::string(buffer, static_cast<std::size_t>(n)), "READY=1\nSTATUS=up");
        close(fd);
        if (!abstract) {
            unlink(name.c_str());
        }
    }
    unsetenv("NOTIFY_SOCKET");
    EXPECT_FALSE(service::notify("READY=1")) << "not under systemd: nothing to do";
}

TEST(Notify, WatchdogPeriodIsOursOnlyWhenThePidMatches) {
    setenv("WATCHDOG_USEC", "3000000", 1);
    unsetenv("WATCHDOG_PID");
    EXPECT_EQ(service::watchdog_period(), std::chrono::seconds(3));
    setenv("WATCHDOG_PID", std::to_string(getpid()).c_str(), 1);
    EXPECT_EQ(service::watchdog_period(), std::chrono::seconds(3));
    setenv("WATCHDOG_PID", "1", 1);
    EXPECT_EQ(service::watchdog_period().count(), 0) << "meant for another process";
    unsetenv("WATCHDOG_PID");
    unsetenv("WATCHDOG_USEC");
    EXPECT_EQ(service::watchdog_period().count(), 0);
}

}  // namespace
}  // namespace jakiro
