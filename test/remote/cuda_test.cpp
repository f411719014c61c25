// CUDA devices through a rigd agent, on the fake driver (test/backends/fake_cuda/), which rigd's
// job processes load through --cuda-lib: copies of many sizes both ways and between the agent's
// GPUs, kernel runs, and a device lost in the agent: the job fails with the CUDA error's name, the
// job's process exits, and the same rigd serves the next job on a fresh process where CUDA works.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <signal.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "backends/cuda/support.hpp"
#include "rig/program.hpp"
#include "rig/remote.hpp"
#include "rig/rig.hpp"
#include "support/job_fixtures.hpp"

using rig::test::Rigd;

namespace {

// How long rigd may take to log a job's end (its process exits first) on a loaded machine.
constexpr int job_end_ms = 20'000;

// What the fake driver says when a launch fails with 719, as the backend reports it.
constexpr const char* launch_failed = "CUDA_ERROR_LAUNCH_FAILED (719): unspecified launch failure";

// A rigd serving CPU, SIM and CUDA devices, the last on the fake driver; `env_extra` reaches the
// job processes (RIG_FAKE_CUDA_INJECT, say).
std::unique_ptr<Rigd> cuda_rigd(const std::string& key_file,
                                const std::vector<std::string>& env_extra = {}) {
  return std::make_unique<Rigd>(key_file,
                                std::vector<std::string>{"--kinds", "CPU,SIM,CUDA", "--cuda-lib",
                                                         rig::test::env("RIG_TEST_FAKE_CUDA")},
                                env_extra);
}

rig::remote::Job start(const std::string& key_file, const Rigd& agent) {
  auto job = rig::remote::connect(rig::test::load_key(key_file), {agent.address()});
  REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
  return *job;
}

std::vector<rig::Device> gpus(const rig::remote::Job& job) {
  auto d = rig::remote::devices(job.hosts().at(0), "CUDA");
  REQUIRE_MESSAGE(d.ok(), (d.ok() ? "" : d.error()));
  return *d;
}

rig::Image load_ok(const rig::Device& d, const rig::Program& p) {
  auto image = rig::load(d, p);
  REQUIRE_MESSAGE(image.ok(), (image.ok() ? "" : image.error()));
  return *image;
}

// Fills `count` u32 elements of a new buffer on `d` with `value` by a kernel (only the first
// `covered`: the shape's threads), brings them back and checks every one.
void fill_and_check(const rig::Device& d, const rig::Image& image, std::uint32_t value) {
  constexpr std::size_t count = 10'000, covered = 9'000;
  std::vector<std::uint32_t> in(count), out(count, 0);
  for (std::size_t i = 0; i < count; ++i) in[i] = static_cast<std::uint32_t>(i);
  const rig::Buffer dev = rig::Buffer::make(d, count * 4);
  rig::copy(dev, rig::Buffer::borrow(in.data(), count * 4));
  rig::submit(d, rig::Run{image,
                          "fill_u32",
                          rig::Shape::linear(36, 250),
                          {rig::Arg::word(count), rig::Arg::word(value), rig::Arg::out(dev)}});
  rig::copy(rig::Buffer::borrow(out.data(), count * 4), dev).wait();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (out[i] != (i < covered ? value : in[i])) ++wrong;
  }
  CHECK(wrong == 0);
}

// `n` bytes to CUDA:0 and back, every byte, with the bytes either side of the destination kept.
void round_trip(const rig::Device& d, std::size_t n, std::uint32_t seed) {
  const auto in = rig::test::pattern(n, seed);
  std::vector<std::uint8_t> out(n + 2, 0xA5);
  const rig::Buffer dev = rig::Buffer::make(d, n);
  rig::copy(dev, rig::Buffer::borrow(const_cast<std::uint8_t*>(in.data()), n));
  rig::copy(rig::Buffer::borrow(out.data() + 1, n), dev).wait();
  CHECK(std::memcmp(out.data() + 1, in.data(), n) == 0);
  CHECK(out[0] == 0xA5);
  CHECK(out[n + 1] == 0xA5);
}

bool process_gone(pid_t pid) {
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

}  // namespace

TEST_CASE("CUDA devices through an agent: copies of 1 B to 64 MiB both ways and between its GPUs") {
  const auto key = rig::test::make_key_file("cuda-copies");
  const auto a = cuda_rigd(key);
  auto job = start(key, *a);
  const auto g = gpus(job);
  REQUIRE(g.size() == 2);
  CHECK(g[0].name() == "CUDA:0@" + a->name());
  CHECK(g[1].name() == "CUDA:1@" + a->name());
  CHECK(g[0].kind() == rig::Kind::cuda);
  CHECK(g[0].arch() == "sm_90");
  CHECK(g[0].budget() == (std::uint64_t{1} << 30));
  CHECK(rig::reaches(g[0], g[1]));  // peers on the agent's machine
  const rig::Device remote_host = job.hosts()[0];
  CHECK(rig::reaches(g[0], remote_host));
  std::uint32_t seed = 1;
  // Around the backend's 4 MiB staging chunk, and past its three slots.
  for (std::size_t n :
       {std::size_t{1}, std::size_t{7}, std::size_t{4096}, std::size_t{65537}, std::size_t{4} << 20,
        (std::size_t{4} << 20) + 1, (std::size_t{13} << 20) + 5, std::size_t{64} << 20}) {
    CAPTURE(n);
    const auto in = rig::test::pattern(n, seed++);
    std::vector<std::uint8_t> direct(n + 2, 0xA5), through_host(n + 2, 0xA5);
    const rig::Buffer a0 = rig::Buffer::make(g[0], n);
    const rig::Buffer b1 = rig::Buffer::make(g[1], n);
    const rig::Buffer h = rig::Buffer::make(remote_host, n);
    // This process -> CUDA:0 -> CUDA:1 (a peer copy on the agent) -> this process, and CUDA:1 ->
    // the agent's host memory -> this process; no waits between.
    rig::copy(a0, rig::Buffer::borrow(const_cast<std::uint8_t*>(in.data()), n));
    rig::copy(b1, a0);
    const rig::Fence f1 = rig::copy(rig::Buffer::borrow(direct.data() + 1, n), b1);
    rig::copy(h, b1);
    const rig::Fence f2 = rig::copy(rig::Buffer::borrow(through_host.data() + 1, n), h);
    f1.wait();
    f2.wait();
    CHECK(std::memcmp(direct.data() + 1, in.data(), n) == 0);
    CHECK(std::memcmp(through_host.data() + 1, in.data(), n) == 0);
    CHECK((direct[0] == 0xA5 && direct[n + 1] == 0xA5));
    CHECK((through_host[0] == 0xA5 && through_host[n + 1] == 0xA5));
  }
  // A kernel on each GPU, from a program this process sends.
  for (const rig::Device& d : g) fill_and_check(d, load_ok(d, rig::test::ptx_kernels()), 0xC0DA);
  CHECK_FALSE(job.failed());
  job.close();
  CHECK(a->job_end(1, job_end_ms).value_or("").ends_with("job 1: closed"));
}

TEST_CASE(
    "a CUDA error in an agent's run fails the job with its exact name; the job's process exits "
    "and the same rigd serves the next job, where CUDA works") {
  const auto key = rig::test::make_key_file("cuda-loss");
  // Each job process's second launch fails with 719, breaking its context (a sticky error), as a
  // kernel that faults does. The count starts again in every process.
  const auto a = cuda_rigd(key, {"RIG_FAKE_CUDA_INJECT=cuLaunchKernel:2:719"});
  const std::string cuda_cause = std::string("CUDA:0: cuLaunchKernel: ") + launch_failed;
  pid_t first = 0;
  {
    auto job = start(key, *a);
    first = a->job_pid(1);
    const rig::Device d = gpus(job)[0];
    round_trip(d, (std::size_t{1} << 20) + 3, 11);
    const rig::Image image = load_ok(d, rig::test::ptx_kernels());
    fill_and_check(d, image, 7);  // the first launch: fine
    // The second launch loses CUDA:0 in the agent; the copy behind it never reports.
    const auto t0 = std::chrono::steady_clock::now();
    const rig::Buffer dev = rig::Buffer::make(d, 64);
    rig::submit(d, rig::Run{image,
                            "fill_u32",
                            rig::Shape::linear(1, 16),
                            {rig::Arg::word(16), rig::Arg::word(9), rig::Arg::out(dev)}});
    std::vector<std::uint8_t> out(64);
    const rig::Fence back = rig::copy(rig::Buffer::borrow(out.data(), 64), dev);
    const auto cause = rig::test::wait_for_failure(job, t0, 10);
    REQUIRE(cause.has_value());
    CHECK(*cause == a->name() + " aborted: " + cuda_cause);
    CHECK_THROWS_WITH_AS(back.wait(), cause->c_str(), rig::Lost);
    CHECK_THROWS_WITH_AS(rig::Buffer::make(d, 16), cause->c_str(), rig::Lost);
    // rigd logs the job's end with the agent's own cause, once the job's process has exited.
    CHECK(a->job_end(1, job_end_ms).value_or("").ends_with("job 1: failed " + cuda_cause));
    CHECK(process_gone(first));
    job.close();
  }
  // The next job: a fresh process, whose GPU works.
  auto job = start(key, *a);
  CHECK(a->job_pid(2) != first);
  const rig::Device d = gpus(job)[0];
  round_trip(d, (std::size_t{5} << 20) + 1, 12);
  fill_and_check(d, load_ok(d, rig::test::ptx_kernels()), 8);
  CHECK_FALSE(job.failed());
  job.close();
  CHECK(a->job_end(2, job_end_ms).value_or("").ends_with("job 2: closed"));
}

TEST_CASE("a trapping kernel in an agent fails the job with 719; the next job's GPU works") {
  const auto key = rig::test::make_key_file("cuda-trap");
  const auto a = cuda_rigd(key);
  {
    auto job = start(key, *a);
    const rig::Device d = gpus(job)[0];
    const rig::Image image = load_ok(d, rig::test::ptx_kernels());
    const auto t0 = std::chrono::steady_clock::now();
    rig::submit(d, rig::Run{image, "trap", rig::Shape::linear(1), {}});
    const auto cause = rig::test::wait_for_failure(job, t0, 10);
    REQUIRE(cause.has_value());
    MESSAGE("the trap's cause: " << *cause);
    // Which call reports a sticky error depends on when the fake's stream thread runs the trap
    // (usually the stream check after the launch's first, successful, wait); the error does not.
    CHECK(cause->starts_with(a->name() + " aborted: CUDA:0: cu"));
    CHECK(cause->ends_with(std::string(": ") + launch_failed));
    const std::string agent_cause = cause->substr((a->name() + " aborted: ").size());
    CHECK(a->job_end(1, job_end_ms).value_or("").ends_with("job 1: failed " + agent_cause));
    job.close();
  }
  auto job = start(key, *a);
  const rig::Device d = gpus(job)[0];
  fill_and_check(d, load_ok(d, rig::test::ptx_kernels()), 3);
  CHECK_FALSE(job.failed());
  job.close();
}

TEST_CASE(
    "an agent's loop notices its GPU's small work itself, with no hand-off to another thread") {
  const auto key = rig::test::make_key_file("cuda-loop-looks");
  // In the agent, an event reads as reached only to the thread that recorded it (the loop, which
  // issues small work itself) until that thread has seen it: the completion thread's looks find
  // nothing until then. The loop polls for a second before it hands a wait to a helper thread, so
  // that a slow machine still finds the work within the poll. On a contended core the loop stops
  // polling at once, as it should (core/spin.hpp): once it has not looked for 100 ms, the fake lets
  // the completion thread see the work, and says so on stderr (a sanitizer's build, among other
  // tests on 2 cores, saw that; before the fake did this, the work was never reached).
  const auto a =
      cuda_rigd(key, {"RIG_FAKE_CUDA_RECORDER_FIRST=1", "RIG_FAKE_CUDA_RECORDER_QUIET_MS=100",
                      "RIG_AGENT_POLL_US=1000000"});
  auto job = start(key, *a);
  const rig::Device d = gpus(job)[0];
  const rig::Image image = load_ok(d, rig::test::ptx_kernels());
  const rig::Buffer dev = rig::Buffer::make(d, 4096);
  // Reached within 10 s, or never: a wait that hangs fails the test instead.
  const auto reached_soon = [](const rig::Fence& f) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!f.reached() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return f.reached();
  };
  for (std::uint32_t i = 0; i < 50; ++i) {
    CAPTURE(i);
    const auto in = rig::test::pattern(64, i);
    std::vector<std::uint8_t> out(64, 0);
    const rig::Buffer from = rig::Buffer::borrow(const_cast<std::uint8_t*>(in.data()), 64);
    REQUIRE(reached_soon(rig::copy(dev, from)));  // from the staging piece the bytes came into
    REQUIRE(reached_soon(rig::copy(dev, 64, dev, 0, 64)));  // on the GPU
    const rig::Fence back = rig::copy(rig::Buffer::borrow(out.data(), 64), 0, dev, 64, 64);
    REQUIRE(reached_soon(back));
    CHECK(out == in);
  }
  const rig::Fence ran{
      d, rig::submit(d, rig::Run{image,
                                 "fill_u32",
                                 rig::Shape::linear(1, 16),
                                 {rig::Arg::word(16), rig::Arg::word(5), rig::Arg::out(dev)}})};
  REQUIRE(reached_soon(ran));
  CHECK_FALSE(job.failed());
  job.close();
  // The works the loop gave up on, from the fake's lines before the job's end: a few or many on a
  // contended machine (15-76 of 151 seen beside 4 busy loops on 2 cores), none on a quiet one. A
  // loop that never looks itself, leaving every work to the completion thread, gives up on all
  // 151 (checked with the loop's Driver::progress call taken out).
  int gave_up = 0;
  std::optional<std::string> end;
  while ((end = a->p->err_line(job_end_ms))) {
    if (end->find("fake cuda: the recorder stopped looking") != std::string::npos) ++gave_up;
    if (end->find("job 1: ") != std::string::npos && !Rigd::is_job_progress(*end)) break;
  }
  MESSAGE("works the loop stopped looking at (contended): ", gave_up, " of 151");
  CHECK(gave_up < 151);
  CHECK(end.value_or("").ends_with("job 1: closed"));
}
