// Functions run on a loop's thread: the controller's calls that may allocate (a job's start, a
// round trip, a close) go to the loop this way; the submission path posts a preallocated command
// instead (link.hpp, Submission).
#pragma once

#include <functional>

#include "remote/io/reactor.hpp"

namespace rig::remote {

// Runs `fn` on `reactor`'s loop thread, later; `fn` must not throw. Any thread.
void post_function(Reactor& reactor, std::function<void()> fn);

// Runs `fn` on `reactor`'s loop thread and returns once it has run, raising here what `fn` raised
// there. Any thread but the loop's.
void call_function(Reactor& reactor, std::function<void()> fn);

}  // namespace rig::remote
