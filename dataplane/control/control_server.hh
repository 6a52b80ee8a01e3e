#pragma once
// jakirod's control socket: a Unix stream socket that takes one command line per connection
// and answers "OK\n<body>" or "ERR <message>\n". Runs on its own (non-EAL) thread; clients are
// served together with deadlines (command_socket.hh), so one that never reads its reply
// cannot wedge it.

#include <string>

#include "command_socket.hh"
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
    daemon_state& _state;
    host_manager& _host;
    command_socket _socket;
};

}  // namespace jakiro
