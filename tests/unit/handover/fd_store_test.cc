#include "handover/fd_store.hh"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <thread>

namespace jakiro::handover {
namespace {

using namespace std::chrono_literals;

bool is_open(int fd) {
    return fcntl(fd, F_GETFD) >= 0;
}

// systemd's side of the protocol: a SOCK_DGRAM notify socket; BARRIER=1 is answered by closing
// its descriptor, everything else is kept as received.
class fake_manager {
  public:
    struct message {
        std::string text;
        std::vector<int> fds;
    };

    fake_manager() {
        path = (std::filesystem::temp_directory_path() /
                ("jakiro-notify-" + std::to_string(getpid()) + "-" + std::to_string(++serial)))
                   .string();
        unlink(path.c_str());
        sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        std::strcpy(addr.sun_path, path.c_str());
        EXPECT_EQ(bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
        thread = std::thread([this] { serve(); });
    }
    ~fake_manager() {
        stop = true;
        if (thread.joinable()) {
            thread.join();
        }
        close(sock);
        unlink(path.c_str());
        for (auto& m : messages) {
            for (int fd : m.fds) {
                if (fd >= 0) {
                    close(fd);
                }
            }
        }
    }
    // The messages so far (the receiving thread is stopped first).
    std::vector<message>& received() {
        stop = true;
        if (thread.joinable()) {
            thread.join();
        }
        return messages;
    }
    // What a restart passes: every stored descriptor with its name, in `order` of storing.
    std::vector<passed_fd> stored(bool reversed) {
        std::vector<passed_fd> out;
        for (auto& m : received()) {
            if (m.text.starts_with("FDSTORE=1\nFDNAME=")) {
                for (int& fd : m.fds) {
                    out.push_back({fd, m.text.substr(std::strlen("FDSTORE=1\nFDNAME="))});
                    fd = -1;  // handed on
                }
            }
        }
        if (reversed) {
            std::reverse(out.begin(), out.end());
        }
        return out;
    }

    std::string path;

  private:
    void serve() {
        while (!stop) {
            pollfd p{sock, POLLIN, 0};
            if (poll(&p, 1, 20) <= 0) {
                continue;
            }
            char text[4096];
            iovec iov{text, sizeof text};
            alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 253)];
            msghdr msg{};
            msg.msg_iov = &iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control;
            msg.msg_controllen = sizeof control;
            const ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
            if (n < 0) {
                continue;
            }
            message m{std::string(text, static_cast<std::size_t>(n)), {}};
            for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                    m.fds.resize(count);
                    std::memcpy(m.fds.data(), CMSG_DATA(c), count * sizeof(int));
                }
            }
            if (m.text == "BARRIER=1") {
                for (int fd : m.fds) {
                    close(fd);
                }
                m.fds.clear();
            }
            messages.push_back(std::move(m));
        }
    }

    static inline std::atomic<int> serial{0};
    int sock = -1;
    std::atomic<bool> stop{false};
    std::thread thread;
    std::vector<message> messages;
};

int memfd_with(const std::string& text) {
    const int fd = memfd_create("test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    EXPECT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    return fd;
}

std::string contents(int fd) {
    char buf[256] = {};
    const ssize_t n = pread(fd, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
}

// An image with three descriptor fields: a memfd, an eventfd and the memfd again (a dup, as a
// tenant sending one file twice gives).
struct sample_image {
    int memfd = memfd_with("memory region");
    int event = eventfd(7, EFD_CLOEXEC);
    int again = fcntl(memfd, F_DUPFD_CLOEXEC, 3);
    image_writer w{"jakirod test"};
    sample_image() {
        w.begin(section_kind::daemon);
        w.string("h1");
        w.fd(memfd);
        w.fd(event);
        w.fd(again);
        w.end();
    }
    ~sample_image() {
        close(memfd);
        close(event);
        close(again);
    }
};

TEST(FdStore, MessagesAreWhatSystemdReads) {
    EXPECT_EQ(store_message("jakiro-state"), "FDSTORE=1\nFDNAME=jakiro-state");
    EXPECT_EQ(remove_message("jakiro-fd-12"), "FDSTOREREMOVE=1\nFDNAME=jakiro-fd-12");
    EXPECT_EQ(stored_fd_name(12), "jakiro-fd-12");
    EXPECT_TRUE(valid_fd_name("jakiro-state"));
    EXPECT_TRUE(valid_fd_name(stored_fd_name(65535)));
    EXPECT_FALSE(valid_fd_name(""));
    EXPECT_FALSE(valid_fd_name("a:b"));  // LISTEN_FDNAMES is ':'-separated
    EXPECT_FALSE(valid_fd_name("new\nline"));
    EXPECT_FALSE(valid_fd_name(std::string(256, 'x')));
}

TEST(FdStore, DescriptorsOfOneOpenFileShareASlot) {
    sample_image s;
    const store_plan plan = plan_store(s.w.fds());
    ASSERT_EQ(plan.slots.size(), 2u);
    EXPECT_EQ(plan.slot_of, (std::vector<uint32_t>{0, 1, 0}));
    // Two opens of one file are two open files: two slots.
    const int a = open("/dev/null", O_RDONLY | O_CLOEXEC);
    const int b = open("/dev/null", O_RDONLY | O_CLOEXEC);
    const int list[] = {a, b};
    EXPECT_EQ(plan_store(list).slots.size(), 2u);
    close(a);
    close(b);
}

TEST(FdStore, SavedStateComesBackWithItsDescriptorsInImageOrderWhateverTheStoreOrder) {
    sample_image s;
    fake_manager manager;
    std::string error;
    ASSERT_TRUE(save_to_store(manager.path, s.w, 16, error)) << error;
    auto all = manager.received();
    // First the names it is about to use are cleared of anything stale.
    ASSERT_EQ(all.size(), 7u);
    EXPECT_EQ(all[0].text, "FDSTOREREMOVE=1\nFDNAME=jakiro-state");
    EXPECT_EQ(all[1].text, "FDSTOREREMOVE=1\nFDNAME=jakiro-fd-0");
    EXPECT_EQ(all[2].text, "FDSTOREREMOVE=1\nFDNAME=jakiro-fd-1");
    std::vector<fake_manager::message> messages(all.begin() + 3, all.end());
    all.clear();
    EXPECT_EQ(messages[0].text, "FDSTORE=1\nFDNAME=jakiro-fd-0");
    EXPECT_EQ(messages[1].text, "FDSTORE=1\nFDNAME=jakiro-fd-1");
    EXPECT_EQ(messages[2].text, "FDSTORE=1\nFDNAME=jakiro-state");
    EXPECT_EQ(messages[3].text, "BARRIER=1");
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(messages[i].fds.size(), 1u);
    }
    // The state is sealed: nobody changes it while it is stored.
    EXPECT_LT(write(messages[2].fds[0], "x", 1), 0);

    for (const bool reversed : {false, true}) {
        std::vector<passed_fd> passed;
        for (auto& m : messages) {
            if (!m.fds.empty()) {
                passed.push_back({fcntl(m.fds[0], F_DUPFD_CLOEXEC, 3),
                                  m.text.substr(std::strlen("FDSTORE=1\nFDNAME="))});
            }
        }
        if (reversed) {
            std::reverse(passed.begin(), passed.end());
        }
        restored_state r = take_stored_state(passed, 1 << 20);
        ASSERT_TRUE(r.state) << r.error;
        EXPECT_EQ(r.missing, 0u);
        EXPECT_EQ(r.names.size(), 3u);
        EXPECT_EQ(r.state->written, s.w.written());
        EXPECT_EQ(r.state->required, s.w.required());
        ASSERT_EQ(r.fds.size(), 3u);
        EXPECT_EQ(contents(r.fds[0]), "memory region");
        uint64_t value = 0;
        EXPECT_EQ(read(r.fds[1], &value, sizeof value), 8);
        EXPECT_EQ(value, 7u);
        EXPECT_EQ(eventfd_write(r.fds[1], 7), 0);
        EXPECT_EQ(contents(r.fds[2]), "memory region");
        // The image reads as it was written.
        image_reader reader(r.state->image, r.fds);
        ASSERT_TRUE(reader.open()) << reader.error();
        auto d = reader.section(section_kind::daemon);
        EXPECT_EQ(d.string(), "h1");
        for (int i = 0; i < 3; ++i) {
            const int fd = d.fd();
            EXPECT_GE(fd, 0);
            close(fd);
        }
        EXPECT_TRUE(d.done() && reader.ok()) << reader.error();
    }
}

TEST(FdStore, ADescriptorTheManagerDroppedComesBackAsAHungUpSocket) {
    sample_image s;
    fake_manager manager;
    std::string error;
    ASSERT_TRUE(save_to_store(manager.path, s.w, 16, error)) << error;
    auto passed = manager.stored(false);
    // systemd drops a stored socket that hangs up: slot 1 (the eventfd here) is gone.
    auto gone = std::find_if(passed.begin(), passed.end(),
                             [](const passed_fd& p) { return p.name == "jakiro-fd-1"; });
    ASSERT_NE(gone, passed.end());
    close(gone->fd);
    passed.erase(gone);
    restored_state r = take_stored_state(passed, 1 << 20);
    ASSERT_TRUE(r.state) << r.error;
    EXPECT_EQ(r.missing, 1u);
    ASSERT_EQ(r.fds.size(), 3u);
    char byte;
    EXPECT_EQ(recv(r.fds[1], &byte, 1, MSG_DONTWAIT), 0);  // end of stream: a disconnection
    close_fds(r.fds);
}

TEST(FdStore, ATruncatedOrCorruptStateIsRefusedAndEveryDescriptorClosed) {
    sample_image s;
    const store_plan plan = plan_store(s.w.fds());
    const std::vector<std::byte> whole = envelope(s.w, plan);
    std::string error;
    ASSERT_TRUE(parse_envelope(whole, error)) << error;
    for (std::size_t cut :
         {std::size_t{0}, std::size_t{5}, std::size_t{20}, whole.size() / 2, whole.size() - 1}) {
        EXPECT_FALSE(parse_envelope(std::span(whole).first(cut), error)) << cut;
        EXPECT_FALSE(error.empty());
    }
    auto bad_slot = whole;
    // The first index's slot (after magic, format, the table, the slot and index counts).
    const std::size_t at = 8 + 4 + 4 + s.w.written().size() * 5 + 4 + 4;
    const uint32_t huge = 99;
    std::memcpy(bad_slot.data() + at, &huge, 4);
    EXPECT_FALSE(parse_envelope(bad_slot, error));
    EXPECT_NE(error.find("slot 99"), std::string::npos) << error;

    // Through take_stored_state: a sealed memfd holding half the state.
    const int state = memfd_create("state", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ASSERT_EQ(write(state, whole.data(), whole.size() / 2), static_cast<ssize_t>(whole.size() / 2));
    ASSERT_EQ(fcntl(state, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW), 0);
    const int slot0 = dup(s.memfd), slot1 = dup(s.event);
    restored_state r = take_stored_state(
        {{slot0, "jakiro-fd-0"}, {state, "jakiro-state"}, {slot1, "jakiro-fd-1"}}, 1 << 20);
    EXPECT_FALSE(r.state);
    EXPECT_NE(r.error.find("cut short"), std::string::npos) << r.error;
    EXPECT_TRUE(r.fds.empty());
    EXPECT_EQ(r.names.size(), 3u);  // to be removed from the store all the same
    EXPECT_FALSE(is_open(slot0) || is_open(slot1) || is_open(state));
}

TEST(FdStore, OnlyASealedMemfdOfBoundedSizeIsRead) {
    sample_image s;
    const auto bytes = envelope(s.w, plan_store(s.w.fds()));
    const int unsealed = memfd_create("state", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ASSERT_EQ(write(unsealed, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    restored_state r = take_stored_state({{unsealed, "jakiro-state"}}, 1 << 20);
    EXPECT_FALSE(r.state);
    EXPECT_NE(r.error.find("not a sealed memfd"), std::string::npos) << r.error;
    EXPECT_FALSE(is_open(unsealed));

    const int sealed = memfd_create("state", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ASSERT_EQ(write(sealed, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    ASSERT_EQ(fcntl(sealed, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW), 0);
    r = take_stored_state({{sealed, "jakiro-state"}}, bytes.size() - 1);
    EXPECT_FALSE(r.state);
    EXPECT_NE(r.error.find("more than"), std::string::npos) << r.error;
}

TEST(FdStore, StoredDescriptorsWithoutTheStateAreClosedAndNamedForRemoval) {
    const int a = eventfd(0, EFD_CLOEXEC);
    const int other = eventfd(0, EFD_CLOEXEC);
    restored_state r = take_stored_state({{a, "jakiro-fd-0"}, {other, "unknown"}}, 1 << 20);
    EXPECT_FALSE(r.state);
    EXPECT_NE(r.error.find("without the state"), std::string::npos) << r.error;
    EXPECT_EQ(r.names, std::vector<std::string>{"jakiro-fd-0"});
    EXPECT_FALSE(is_open(a) || is_open(other));
    // Nothing of ours passed: nothing to say.
    r = take_stored_state({}, 1 << 20);
    EXPECT_FALSE(r.state);
    EXPECT_EQ(r.error, "");
}

TEST(FdStore, AStateThatDoesNotFitTheStoreIsNotSent) {
    sample_image s;
    fake_manager manager;
    std::string error;
    EXPECT_FALSE(save_to_store(manager.path, s.w, 2, error));  // 2 slots + the state
    EXPECT_NE(error.find("FileDescriptorStoreMax"), std::string::npos) << error;
    EXPECT_TRUE(manager.received().empty());
}

TEST(FdStore, NoManagerListeningIsAnErrorNotAHang) {
    sample_image s;
    std::string error;
    EXPECT_FALSE(save_to_store("/nonexistent/notify", s.w, 16, error));
    EXPECT_NE(error.find("NOTIFY_SOCKET"), std::string::npos) << error;
}

TEST(FdStore, RemovingSendsOneMessagePerNameAndWaitsForTheManager) {
    fake_manager manager;
    std::string error;
    ASSERT_TRUE(remove_from_store(manager.path, {"jakiro-state", "jakiro-fd-0"}, error)) << error;
    std::this_thread::sleep_for(100ms);
    auto& m = manager.received();
    ASSERT_EQ(m.size(), 3u);
    EXPECT_EQ(m[0].text, "FDSTOREREMOVE=1\nFDNAME=jakiro-state");
    EXPECT_EQ(m[1].text, "FDSTOREREMOVE=1\nFDNAME=jakiro-fd-0");
    EXPECT_EQ(m[2].text, "BARRIER=1");
}

}  // namespace
}  // namespace jakiro::handover
