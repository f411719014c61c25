// What each accept(2) error makes an agent's listener do.
#include <doctest/doctest.h>

#include <cerrno>

#include "remote/io/listener.hpp"

using rig::remote::AcceptError;
using rig::remote::classify_accept_error;

TEST_CASE(
    "accept errors: a shortage waits and retries, a lost connection is skipped, the rest end") {
  // Nothing waiting, or a signal: poll again.
  CHECK(classify_accept_error(EAGAIN) == AcceptError::wait);
  CHECK(classify_accept_error(EWOULDBLOCK) == AcceptError::wait);
  CHECK(classify_accept_error(EINTR) == AcceptError::wait);
  // No descriptor, buffer or memory: the connection stays in the backlog for a later accept.
  for (int e : {EMFILE, ENFILE, ENOBUFS, ENOMEM}) {
    CHECK_MESSAGE(classify_accept_error(e) == AcceptError::retry_later, e);
  }
  // The connection taken failed (Linux passes its network error to accept): take the next.
  for (int e : {ECONNABORTED, EPROTO, ENOPROTOOPT, EHOSTDOWN, ENONET, EHOSTUNREACH, EOPNOTSUPP,
                ENETDOWN, ENETUNREACH, ETIMEDOUT, EPERM}) {
    CHECK_MESSAGE(classify_accept_error(e) == AcceptError::next, e);
  }
  // The listening socket itself is unusable: serve ends with an Error naming it.
  for (int e : {EBADF, EINVAL, ENOTSOCK, EFAULT}) {
    CHECK_MESSAGE(classify_accept_error(e) == AcceptError::fatal, e);
  }
}
