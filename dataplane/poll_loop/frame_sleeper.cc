#include "dataplane/poll_loop/frame_sleeper.hh"

#include <sys/epoll.h>
#include <unistd.h>

#include <ctime>

#include "dataplane/vnet_face/face_registry.hh"

namespace jakiro {

namespace {
constexpr uint32_t woken_by_faces = 0;
constexpr uint32_t woken_by_call = 1;
}  // namespace

frame_sleeper::~frame_sleeper() {
    if (_epoll_fd >= 0) {
        close(_epoll_fd);
    }
}

bool frame_sleeper::ready() {
    if (_epoll_fd >= 0 || _failed) {
        return _epoll_fd >= 0;
    }
    const int faces = vnet_face::faces_epoll_fd();
    if (faces < 0 || _wake_fd < 0) {
        return false;  // no face yet: asked again at the next nap
    }
    _epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    epoll_event from_faces{};
    from_faces.events = EPOLLIN;
    from_faces.data.u32 = woken_by_faces;
    epoll_event from_calls{};
    from_calls.events = EPOLLIN;
    from_calls.data.u32 = woken_by_call;
    const bool made = _epoll_fd >= 0 &&
                      epoll_ctl(_epoll_fd, EPOLL_CTL_ADD, faces, &from_faces) == 0 &&
                      epoll_ctl(_epoll_fd, EPOLL_CTL_ADD, _wake_fd, &from_calls) == 0;
    if (!made) {
        if (_epoll_fd >= 0) {
            close(_epoll_fd);
        }
        _epoll_fd = -1;
        _failed = true;  // the doorbell nap it is, for good
    }
    return made;
}

bool frame_sleeper::sleep(uint64_t us) {
    epoll_event events[2];
    const timespec timeout{static_cast<time_t>(us / 1000000),
                           static_cast<long>(us % 1000000) * 1000};
    const int n = epoll_pwait2(_epoll_fd, events, 2, &timeout, nullptr);
    bool frames = false;
    for (int i = 0; i < n; ++i) {
        if (events[i].data.u32 == woken_by_call) {
            uint64_t count = 0;
            (void)!read(_wake_fd, &count, sizeof(count));
        } else {
            frames = true;
        }
    }
    return frames;
}

}  // namespace jakiro
