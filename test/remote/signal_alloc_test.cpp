// A submission made in a signal handler calls neither malloc nor free: a handler may interrupt its
// thread anywhere, inside the allocator included, where a second call into it could deadlock or
// corrupt its lists. This program replaces glibc's malloc family with counting forwarders, so it
// sees every allocation a thread makes while it watches. Sanitizer builds (whose runtimes own
// malloc) do not build it; the proxies test covers the same handler path there.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "rig/program.hpp"
#include "rig/remote.hpp"
#include "rig/rig.hpp"
#include "support/alarm.hpp"
#include "support/job_fixtures.hpp"
#include "support/kernels.hpp"

extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void __libc_free(void*);
}

namespace {

// Set by the handler around its rig call; counts what the thread allocated or freed meanwhile.
// Initial-exec TLS: reading it never allocates (the allocator itself reads it).
__attribute__((tls_model("initial-exec"))) thread_local bool watching = false;
__attribute__((tls_model("initial-exec"))) thread_local long allocator_calls = 0;

void note() {
  if (watching) ++allocator_calls;
}

}  // namespace

extern "C" {
void* malloc(std::size_t n) {
  note();
  return __libc_malloc(n);
}
void* calloc(std::size_t count, std::size_t n) {
  note();
  return __libc_calloc(count, n);
}
void* realloc(void* p, std::size_t n) {
  note();
  return __libc_realloc(p, n);
}
void free(void* p) {
  if (p != nullptr) note();
  __libc_free(p);
}
void* aligned_alloc(std::size_t align, std::size_t n) {
  note();
  return __libc_memalign(align, n);
}
void* memalign(std::size_t align, std::size_t n) {
  note();
  return __libc_memalign(align, n);
}
int posix_memalign(void** out, std::size_t align, std::size_t n) {
  note();
  void* p = __libc_memalign(align, n);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
}

namespace {

constexpr std::size_t small_bytes = 64;
constexpr std::uint32_t run_words = 1024;

// What the handler submits, one kind per alarm in turn: an empty submission to the remote host, a
// copy from this process's memory to a remote device, a program run there, and a copy back.
struct HandlerWork {
  rig::Device host;  // CPU@NAME
  rig::Device sim;   // SIM:0@NAME
  rig::Buffer here_src, here_back, there, there_run;
  rig::Part to_there, run, back;  // built before the alarms: a Run's entry name is a std::string
};
HandlerWork* work = nullptr;

std::atomic<long> alarms{0}, submitted{0}, refused{0}, other{0}, allocating{0}, worst{0};

void on_alarm(int) {
  const long n = alarms.fetch_add(1);
  watching = true;
  allocator_calls = 0;
  bool ok = false;
  try {
    switch (n % 4) {
      case 0:
        rig::submit(work->host, std::span<const rig::Part>{});
        break;
      case 1:
        rig::submit(work->sim, work->to_there);
        break;
      case 2:
        rig::submit(work->sim, work->run);
        break;
      default:
        rig::submit(work->sim, work->back);
        break;
    }
    ok = true;
  } catch (const std::invalid_argument&) {
    ++refused;  // the interrupted submit holds the submission lock in one of its waits
  } catch (...) {
    ++other;
  }
  watching = false;
  if (!ok) return;  // a refusal allocates its exception; only accepted submissions count
  ++submitted;
  if (allocator_calls > 0) {
    ++allocating;
    long w = worst.load();
    while (allocator_calls > w && !worst.compare_exchange_weak(w, allocator_calls)) {
    }
  }
}

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(seed + i * 7);
  return v;
}

}  // namespace

TEST_CASE("a submit from a signal handler calls neither malloc nor free, whatever it interrupts") {
  // The counter itself works: it sees the allocation of a vector.
  watching = true;
  allocator_calls = 0;
  {
    const std::vector<int> probe(1000, 1);
    CHECK(probe.size() == 1000);
  }
  watching = false;
  REQUIRE(allocator_calls == 2);
  const auto key = rig::test::make_key_file("signal-alloc");
  rig::test::Rigd agent(key);
  auto job = rig::remote::connect(rig::test::load_key(key), {agent.address()});
  REQUIRE_MESSAGE(job.ok(), (job.ok() ? "" : job.error()));
  auto sims = rig::remote::devices(job->hosts()[0], "SIM");
  REQUIRE(sims.ok());
  auto image = rig::load((*sims)[0], rig::test::test_kernels());
  REQUIRE_MESSAGE(image.ok(), (image.ok() ? "" : image.error()));

  std::vector<std::uint8_t> src = pattern(small_bytes, 3), back(small_bytes);
  HandlerWork w;
  w.host = job->hosts()[0];
  w.sim = (*sims)[0];
  w.here_src = rig::Buffer::borrow(src.data(), src.size());
  w.here_back = rig::Buffer::borrow(back.data(), back.size());
  w.there = rig::Buffer::make(w.sim, small_bytes);
  w.there_run = rig::Buffer::make(w.sim, run_words * 4);
  w.to_there = rig::Copy{w.there, 0, w.here_src, 0, small_bytes};
  w.run = rig::Run{*image,
                   "fill_u32",
                   rig::Shape::linear(1),
                   {rig::Arg::out(w.there_run), rig::Arg::word(run_words), rig::Arg::word(0xA11C)}};
  w.back = rig::Copy{w.here_back, 0, w.there, 0, small_bytes};
  // Each kind once outside a handler: first uses may set up lasting state (the entry's name).
  for (const rig::Part* p : {&w.to_there, &w.run, &w.back}) w.sim.wait(rig::submit(w.sim, *p));
  work = &w;

  // The main thread's own work, which the alarms interrupt: rig submits that wait (under the
  // submission lock, for the copy back) and plain malloc and free.
  constexpr std::size_t n = 16 * 1024;
  const std::vector<std::uint8_t> in = pattern(n, 9);
  std::vector<std::uint8_t> mid(n);
  const auto main_src = rig::Buffer::borrow(const_cast<std::uint8_t*>(in.data()), n);
  const auto main_mid = rig::Buffer::borrow(mid.data(), n);
  const auto r1 = rig::Buffer::make(w.sim, n), r2 = rig::Buffer::make(w.sim, n);

  std::size_t churned = 0;
  {
    const rig::test::ThreadAlarm alarm(on_alarm, 50'000);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (std::chrono::steady_clock::now() < until || alarms.load() < 2000) {
      rig::copy(r1, main_src);
      rig::copy(main_mid, r1);
      rig::copy(r2, main_mid);
      for (int i = 0; i < 64; ++i) {
        auto* p = static_cast<volatile std::uint8_t*>(std::malloc(16 + (i * 37) % 4000));
        p[0] = static_cast<std::uint8_t>(i);
        churned += p[0];
        std::free(const_cast<std::uint8_t*>(p));
      }
    }
  }
  work = nullptr;

  MESSAGE(alarms.load() << " alarms: " << submitted.load() << " submitted, " << refused.load()
                        << " refused; " << churned << " bytes churned");
  CHECK(submitted.load() >= 1000);
  CHECK(other.load() == 0);
  CHECK(allocating.load() == 0);
  CHECK(worst.load() == 0);

  // The stream is whole: every kind of work the handler sent did what it says.
  std::vector<std::uint8_t> out(n), there(small_bytes);
  std::vector<std::uint32_t> ran(run_words);
  rig::copy(rig::Buffer::borrow(out.data(), n), r2).wait();
  rig::copy(rig::Buffer::borrow(there.data(), small_bytes), w.there).wait();
  rig::copy(rig::Buffer::borrow(ran.data(), run_words * 4), w.there_run).wait();
  w.here_back.access();
  CHECK(out == in);
  CHECK(there == src);
  CHECK(back == src);
  for (std::uint32_t v : ran) REQUIRE(v == 0xA11Cu);
  CHECK_FALSE(job->failed());
  job->close();
}
