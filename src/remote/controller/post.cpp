#include "remote/controller/post.hpp"

#include "remote/controller/event.hpp"

namespace rig::remote {
namespace {

// A posted function. Owner: the reactor's queue, then itself: it frees itself once run.
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
  post_function(reactor, [&] {
    fn();
    done.set();
  });
  while (!done.wait_for_ms(1000)) {
  }
}

}  // namespace rig::remote
