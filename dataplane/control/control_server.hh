#pragma once
// jakirod's control socket: a Unix stream socket that takes one command line per connection
// and answers "OK\n<body>" or "ERR <message>\n". Runs on its own (non-EAL) thread.

#include <atomic>
#include <string>
#include <thread>

#include "daemon_state.hh"
#include "host_manager.hh"

namespace jakiro {

class control_server {
  public:
    control_server(daemon_state& state, host_manager& host, std::string socket_path);
    ~control_server();
    control_server(const control_server&) = delete;
    control_server& operator=(const control_server&) = delete;

    // Binds the socket; false with `error` set if that fails (e.g. another jakirod owns it).
    bool start(std::string& error);
    void stop();

    // Exposed for tests: the reply to one command line.
    std::string handle(const std::string& command_line);

  private:
    void serve();

    daemon_state& _state;
    host_manager& _host;
    std::string _path;
    int _listen_fd = -1;
    std::atomic<bool> _stopping{false};
    std::thread _thread;
};

}  // namespace jakiro
