#pragma once

// The side channel of the test programs: one TCP connection over the tenant's ordinary TCP
// face, one text line per message (readable in a packet capture and in error messages). Every
// wait is bounded by the program's deadline; failures throw test_error.

#include <cstdint>
#include <string>
#include <vector>

#include "tests/rdma/test_error.hh"

namespace jakiro::rdma_test {

class tcp_line {
  public:
    // Listens on every address of the namespace, accepts one connection, stops listening.
    static tcp_line accept_one(uint16_t port);
    // Listens, accepts `n` connections from one listening socket, stops listening.
    static std::vector<tcp_line> accept_many(uint16_t port, std::size_t n);
    // Connects to ip:port, retrying refused connections until the deadline (the server may
    // still be starting).
    static tcp_line connect_to(const std::string& ip, uint16_t port);

    tcp_line(tcp_line&& other) noexcept;
    tcp_line& operator=(tcp_line&&) = delete;
    tcp_line(const tcp_line&) = delete;
    ~tcp_line();

    void send(const std::string& line);
    // The next line, without its newline; throws on end of stream or at the deadline.
    std::string receive();
    // receive(), split at spaces; throws unless the first word is `keyword`.
    std::vector<std::string> expect(const std::string& keyword);
    // Local and peer IPv4 addresses, dotted.
    std::string local_ip() const;
    std::string peer_ip() const;

  private:
    explicit tcp_line(int fd) : _fd(fd) {}
    int _fd = -1;
    std::string _buffer;  // bytes received after the last returned line
};

std::vector<std::string> split_words(const std::string& line);
uint64_t parse_u64(const std::string& word, int base = 10);

}  // namespace jakiro::rdma_test
