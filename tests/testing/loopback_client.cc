#include "tests/testing/loopback_client.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

namespace pdserve::testing {

int ConnectLoopback(int port, const std::string& partial) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const timeval second{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &second, sizeof(second));  // Bounds connect().
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  if (!partial.empty()) (void)!send(fd, partial.data(), partial.size(), MSG_NOSIGNAL);
  return fd;
}

}  // namespace pdserve::testing
