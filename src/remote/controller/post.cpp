#include "remote/controller/post.hpp"

#include <exception>

#include "remote/controller/event.hpp"

namespace rig::remote {
namespace {

// A posted function. Owner: the reactor's queue, then itself: it frees itself once run. The
// function must not throw (a command runs noexcept): post_function's callers guard their bodies,
// and call_function carries a throw back to its caller.
struct FnCommand final : Command {
  std::function<void()> fn;
  void run(Reactor&) noexcept override {
    fn();
    delete this;
  }
};

}  // namespace

void post_function(Reactor& reactor, std::function<void()> fn) {
  auto* c = new FnCommand();
  c->fn = std::move(fn);
  reactor.post(c);
}

void call_function(Reactor& reactor, std::function<void()> fn) {
  Event done;
  std::exception_ptr thrown;
  post_function(reactor, [&] {
    try {
      fn();
    } catch (...) {
      thrown = std::current_exception();
    }
    done.set();
  });
  while (!done.wait_for_ms(1000)) {
  }
  if (thrown) std::rethrow_exception(thrown);
}

}  // namespace rig::remote
