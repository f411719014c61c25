#include "scenarios.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "clock.hpp"
#include "core/arch.hpp"
#include "http_get.hpp"
#include "process.hpp"
#include "remote/limits.hpp"
#include "remote/wire/codec.hpp"
#include "rig/cuda.hpp"
#include "rig/program.hpp"
#include "scale.hpp"
#include "stats.hpp"
#include "tcp.hpp"

namespace rig::bench {

namespace {

// Transfer sizes of the throughput scenarios: 4 KiB to the plan's maximum, each 16 times the last.
constexpr std::uint64_t stream_bytes_min = 4096;
constexpr std::uint64_t stream_size_step = 16;
// Repeats at each transfer size: enough for a median even at 1 GiB, few enough for 4 KiB to end.
constexpr std::uint64_t stream_repeats_min = 3;
constexpr std::uint64_t stream_repeats_max = 20'000;
// The share of a measurement's time limit its warm-up may take (a slow placement, such as two
// spinning ends on one core, would otherwise spend minutes warming up).
constexpr double warmup_time_share = 0.1;
// The niceness of the *.contended scenarios' busy neighbours: below the benchmark's own threads,
// as a background compile would be.
constexpr int busy_neighbour_nice = 10;

void progress(const Ctx& ctx, std::string_view id, const std::string& what) {
  std::fprintf(stderr, "rig-bench: [%s] %.*s: %s\n", ctx.placement.c_str(),
               static_cast<int>(id.size()), id.data(), what.c_str());
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Latency samples of one operation, each a pair of steady_clock reads around it.
struct Taken {
  std::vector<double> us;
  std::size_t warmup = 0;
  std::string cut_short;
};

// `between` runs before each operation, outside its sample (the rail's go() scenario drains its
// rounds there).
template <typename Op, typename Between>
Taken take(const Plan& p, std::size_t samples, std::size_t warmup, Op&& op, Between&& between) {
  Taken t;
  t.us.reserve(samples);
  // The warm-up has a tenth of the measurement's time limit; the count it ran is reported.
  const std::uint64_t warm_until =
      now_ns() + static_cast<std::uint64_t>(p.measurement_s_max * 1e9 * warmup_time_share);
  while (t.warmup < warmup && (t.warmup % 64 != 0 || now_ns() < warm_until)) {
    between();
    op();
    ++t.warmup;
  }
  const std::uint64_t deadline = now_ns() + static_cast<std::uint64_t>(p.measurement_s_max * 1e9);
  for (std::size_t i = 0; i < samples; ++i) {
    between();
    const std::uint64_t a = now_ns();
    op();
    const std::uint64_t b = now_ns();
    t.us.push_back(us_between(a, b));
    if (b > deadline && i + 1 < samples) {
      t.cut_short = "stopped after " + std::to_string(i + 1) + " of " + std::to_string(samples) +
                    " samples at the time limit of " + fmt("%.0f", p.measurement_s_max) +
                    " s per measurement";
      break;
    }
  }
  return t;
}

template <typename Op>
Taken take(const Plan& p, std::size_t samples, std::size_t warmup, Op&& op) {
  return take(p, samples, warmup, std::forward<Op>(op), [] {});
}

nlohmann::json latency_json(Taken t) {
  const Summary s = summarize(std::move(t.us), t.warmup);
  nlohmann::json out = {{"unit", "us"},
                        {"message_bytes", submit_frame_bytes()},
                        {"stats", stats_json(s)},
                        {"cdf", cdf_json(s)}};
  if (!t.cut_short.empty()) out["cut_short"] = t.cut_short;
  return out;
}

void report_latency(const Ctx& ctx, std::string_view id, const nlohmann::json& r) {
  const auto& s = r["stats"];
  progress(ctx, id,
           std::to_string(s["count"].get<std::size_t>()) + " samples, p50 " +
               fmt("%.1f", s["p50"].get<double>()) + " us, p99 " +
               fmt("%.1f", s["p99"].get<double>()) + " us");
}

// Operations per second, one sample per batch of at least batch_ops, with `step` keeping `window`
// operations outstanding and returning how many completed. Whole batches covering the warm-up's
// operations run first and are left out, so that every count in the result is of batches.
template <typename Step>
nlohmann::json rate_json(const Plan& p, Step&& step) {
  const std::size_t batches = std::max<std::size_t>(1, p.samples / p.batch_ops);
  const std::size_t warmup_batches = (p.warmup + p.batch_ops - 1) / p.batch_ops;
  for (std::size_t done = 0; done < warmup_batches * p.batch_ops;) done += step();
  std::vector<double> rates;
  const std::uint64_t deadline = now_ns() + static_cast<std::uint64_t>(p.measurement_s_max * 1e9);
  std::string cut_short;
  for (std::size_t b = 0; b < batches; ++b) {
    const std::uint64_t t0 = now_ns();
    std::size_t done = 0;
    while (done < p.batch_ops) done += step();
    const std::uint64_t t1 = now_ns();
    rates.push_back(static_cast<double>(done) * 1e9 / static_cast<double>(t1 - t0));
    if (t1 > deadline && b + 1 < batches) {
      cut_short = "stopped after " + std::to_string(b + 1) + " of " + std::to_string(batches) +
                  " batches at the time limit";
      break;
    }
  }
  const Summary s = summarize(std::move(rates), warmup_batches);
  nlohmann::json out = {{"unit", "ops/s"},
                        {"window", p.window},
                        {"batch_ops", p.batch_ops},
                        {"message_bytes", submit_frame_bytes()},
                        {"stats", stats_json(s)}};
  if (!cut_short.empty()) out["cut_short"] = cut_short;
  return out;
}

// Baselines.

nlohmann::json tcp_ping_pong(Ctx& ctx, EchoMode mode, std::string_view id) {
  EchoClient c(ctx.echo_host, ctx.echo_port, mode,
               static_cast<std::uint32_t>(submit_frame_bytes()));
  auto r = latency_json(take(ctx.plan, ctx.plan.samples, ctx.plan.warmup, [&] { c.round_trip(); }));
  report_latency(ctx, id, r);
  return r;
}

nlohmann::json tcp_ping_pong_blocking(Ctx& ctx) {
  return tcp_ping_pong(ctx, EchoMode::blocking, "tcp.pingpong.blocking");
}

nlohmann::json tcp_ping_pong_spinning(Ctx& ctx) {
  return tcp_ping_pong(ctx, EchoMode::spinning, "tcp.pingpong.spinning");
}

// A busy loop at nice 10 on each of the placement's cores while it lives, as a compile or another
// job beside the controller and the agents would be: a child process each, killed at the end.
class BusyNeighbours {
 public:
  explicit BusyNeighbours(const std::vector<int>& cpus) {
    for (const int cpu : cpus) {
      const pid_t pid = fork();
      if (pid < 0) throw std::runtime_error("fork: " + std::string(std::strerror(errno)));
      if (pid == 0) {
        // Only system calls until the kill: the parent has other threads.
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        sched_setaffinity(0, sizeof one, &one);
        setpriority(PRIO_PROCESS, 0, busy_neighbour_nice);
        for (;;) {
        }
      }
      children_.push_back(pid);
    }
  }
  ~BusyNeighbours() {
    for (const pid_t pid : children_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  BusyNeighbours(const BusyNeighbours&) = delete;
  BusyNeighbours& operator=(const BusyNeighbours&) = delete;

 private:
  std::vector<pid_t> children_;
};

constexpr const char* no_placement_cores =
    "needs the cores of a local placement (not with --hosts) to put a busy neighbour on";

nlohmann::json tcp_ping_pong_contended(Ctx& ctx) {
  if (ctx.cpus.empty()) return {{"skipped", no_placement_cores}};
  const BusyNeighbours busy(ctx.cpus);
  auto r = tcp_ping_pong(ctx, EchoMode::blocking, "tcp.pingpong.blocking.contended");
  r["note"] = "a busy loop at nice " + std::to_string(busy_neighbour_nice) + " on each core";
  return r;
}

nlohmann::json tcp_pipeline(Ctx& ctx) {
  EchoClient c(ctx.echo_host, ctx.echo_port, EchoMode::blocking,
               static_cast<std::uint32_t>(submit_frame_bytes()));
  c.pipeline_fill(ctx.plan.window);
  auto r = rate_json(ctx.plan, [&] { return c.pipeline_step(); });
  r["note"] = "the client sends as many messages as echoes it took back, in one write";
  c.pipeline_drain();
  progress(ctx, "tcp.pipeline", fmt("p50 %.0f ops/s", r["stats"]["p50"].get<double>()));
  return r;
}

// One thread's counts with the part its process plays.
struct Labelled {
  std::string process;
  ThreadCounts counts;
};

std::vector<Labelled> sched_snapshot(const Ctx& ctx) {
  std::vector<Labelled> out;
  const auto add = [&](const std::string& role, pid_t pid) {
    for (ThreadCounts& t : thread_counts(pid)) out.push_back({role, std::move(t)});
  };
  add("controller", getpid());
  for (const auto& [role, pid] : ctx.peer_pids) {
    add(role, pid);
    for (pid_t job : descendants_of(pid)) add(role + " job", job);
  }
  return out;
}

// What each thread did between two snapshots, for the threads that ran; one born meanwhile counts
// from zero, one that ended meanwhile is missing.
nlohmann::json sched_json(const std::vector<Labelled>& before, const std::vector<Labelled>& after) {
  nlohmann::json threads = nlohmann::json::array();
  for (const Labelled& a : after) {
    ThreadCounts b;
    for (const Labelled& x : before) {
      if (x.counts.pid == a.counts.pid && x.counts.tid == a.counts.tid) b = x.counts;
    }
    const ThreadCounts& t = a.counts;
    if (t.slices <= b.slices) continue;
    threads.push_back({{"process", a.process},
                       {"pid", t.pid},
                       {"thread", t.name},
                       {"tid", t.tid},
                       {"run_us", static_cast<double>(t.run_ns - b.run_ns) / 1e3},
                       {"wait_us", static_cast<double>(t.wait_ns - b.wait_ns) / 1e3},
                       {"slices", t.slices - b.slices},
                       {"voluntary", t.voluntary - b.voluntary},
                       {"involuntary", t.involuntary - b.involuntary}});
  }
  return {{"note",
           "each thread that ran during the scenario, its set-up and warm-up included: time on a "
           "CPU and waiting for one, times put on one, switches away asleep (voluntary) and "
           "preempted (involuntary); from /proc/PID/task/TID"},
          {"threads", std::move(threads)}};
}

std::vector<std::uint64_t> stream_sizes(const Plan& p) {
  std::vector<std::uint64_t> sizes;
  for (std::uint64_t s = stream_bytes_min; s <= p.stream_bytes_max; s *= stream_size_step) {
    sizes.push_back(s);
  }
  if (sizes.back() != p.stream_bytes_max) sizes.push_back(p.stream_bytes_max);
  return sizes;
}

// Transfers timed at each size: the plan's bytes per size, within the repeat bounds.
std::uint64_t stream_repeats(const Plan& p, std::uint64_t size) {
  return std::clamp(p.stream_bytes_per_size / size, stream_repeats_min, stream_repeats_max);
}

// One size's point of a throughput result: the GB/s samples (after `warmup` left out) of
// `transfers` transfers of `size`; says it on stderr.
nlohmann::json throughput_point(const Ctx& ctx, std::string_view id, std::uint64_t size,
                                std::uint64_t transfers, std::vector<double> gbps,
                                std::size_t warmup) {
  const Summary s = summarize(std::move(gbps), warmup);
  progress(ctx, id,
           std::to_string(size) + " B x " + std::to_string(transfers) + ": p50 " +
               fmt("%.2f", s.p50) + " GB/s");
  return {{"bytes", size}, {"stats", stats_json(s)}};
}

// GB/s of transfers of each size, one sample per transfer, the first at each size left out.
template <typename Move>
nlohmann::json throughput_json(const Ctx& ctx, std::string_view id, Move&& move) {
  nlohmann::json points = nlohmann::json::array();
  for (std::uint64_t size : stream_sizes(ctx.plan)) {
    const std::uint64_t repeats = stream_repeats(ctx.plan, size);
    const auto before = sched_snapshot(ctx);
    move(size);  // warm-up
    std::vector<double> gbps;
    for (std::uint64_t i = 0; i < repeats; ++i) {
      const std::uint64_t t0 = now_ns();
      move(size);
      const std::uint64_t t1 = now_ns();
      gbps.push_back(static_cast<double>(size) / static_cast<double>(t1 - t0));
    }
    points.push_back(throughput_point(ctx, id, size, repeats, std::move(gbps), 1));
    points.back()["sched"] = sched_json(before, sched_snapshot(ctx));
    points.back()["sched"]["transfers"] = repeats + 1;
  }
  return {{"unit", "GB/s"}, {"points", points}};
}

// A buffer of `bytes`, every page touched so that no fault lands inside a measurement.
std::unique_ptr<std::uint8_t[]> touched(std::uint64_t bytes) {
  std::unique_ptr<std::uint8_t[]> b(new std::uint8_t[bytes]);
  std::memset(b.get(), 0xA5, bytes);
  return b;
}

nlohmann::json tcp_stream(Ctx& ctx) {
  EchoClient c(ctx.echo_host, ctx.echo_port, EchoMode::stream, 1);
  const auto src = touched(ctx.plan.stream_bytes_max);
  auto r = throughput_json(ctx, "tcp.stream", [&](std::uint64_t n) { c.transfer(src.get(), n); });
  r["write_bytes"] = stream_chunk_bytes;
  r["note"] = "each transfer: a size header, the bytes in 1 MiB writes, one byte back";
  return r;
}

nlohmann::json tcp_stream_placed(Ctx& ctx) {
  EchoClient c(ctx.echo_host, ctx.echo_port, EchoMode::stream_placed, 1);
  const auto src = touched(ctx.plan.stream_bytes_max);
  auto r =
      throughput_json(ctx, "tcp.stream.placed", [&](std::uint64_t n) { c.transfer(src.get(), n); });
  r["write_bytes"] = stream_chunk_bytes;
  r["note"] =
      "tcp.stream, the receiver reading each transfer across memory of its size (touched once "
      "before), as a copy's destination receives it, not into one 1 MiB buffer";
  return r;
}

nlohmann::json memcpy_baseline(Ctx& ctx) {
  const auto src = touched(ctx.plan.stream_bytes_max);
  const auto dst = touched(ctx.plan.stream_bytes_max);
  auto r = throughput_json(ctx, "memcpy",
                           [&](std::uint64_t n) { std::memcpy(dst.get(), src.get(), n); });
  r["note"] = "one memcpy per transfer, in the harness process, unpinned";
  return r;
}

// rig.

void submit_empty_and_wait(const rig::Device& host) {
  host.wait(rig::submit(host, std::span<const rig::Part>{}));
}

nlohmann::json rig_host_empty(Ctx& ctx) {
  const rig::Device host = ctx.host();
  auto r = latency_json(
      take(ctx.plan, ctx.plan.samples, ctx.plan.warmup, [&] { submit_empty_and_wait(host); }));
  report_latency(ctx, "rig.host.empty", r);
  return r;
}

nlohmann::json rig_host_empty_contended(Ctx& ctx) {
  if (ctx.cpus.empty()) return {{"skipped", no_placement_cores}};
  const rig::Device host = ctx.host();
  submit_empty_and_wait(host);  // the job started before the neighbours come
  const BusyNeighbours busy(ctx.cpus);
  auto r = latency_json(
      take(ctx.plan, ctx.plan.samples, ctx.plan.warmup, [&] { submit_empty_and_wait(host); }));
  r["note"] = "a busy loop at nice " + std::to_string(busy_neighbour_nice) +
              " on each core: spins and polls that yield to it would wait out its time slices";
  report_latency(ctx, "rig.host.empty.contended", r);
  return r;
}

// `threads` threads at once, each submitting and waiting in a loop; latency of every submission
// and the operations per second of all of them together.
nlohmann::json rig_host_threads(Ctx& ctx, std::size_t threads, std::string_view id) {
  const rig::Device host = ctx.host();
  std::vector<Taken> taken(threads);
  std::vector<std::uint64_t> start(threads), end(threads);
  std::atomic<std::size_t> ready{0};
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (std::size_t i = 0; i < ctx.plan.warmup / threads; ++i) submit_empty_and_wait(host);
      // Every thread starts measuring together, so the rate is that of all of them at once.
      ready.fetch_add(1);
      while (ready.load() < threads) std::this_thread::yield();
      start[t] = now_ns();
      taken[t] =
          take(ctx.plan, ctx.plan.samples / threads, 0, [&] { submit_empty_and_wait(host); });
      taken[t].warmup = ctx.plan.warmup / threads;
      end[t] = now_ns();
    });
  }
  for (auto& th : pool) th.join();
  Taken all;
  for (auto& t : taken) {
    all.us.insert(all.us.end(), t.us.begin(), t.us.end());
    all.warmup += t.warmup;
    if (!t.cut_short.empty()) all.cut_short = t.cut_short + " (in one thread)";
  }
  const std::size_t ops = all.us.size();
  const double seconds = static_cast<double>(*std::max_element(end.begin(), end.end()) -
                                             *std::min_element(start.begin(), start.end())) /
                         1e9;
  auto r = latency_json(std::move(all));
  r["threads"] = threads;
  r["ops_per_s"] = static_cast<double>(ops) / seconds;
  report_latency(ctx, id, r);
  return r;
}

nlohmann::json rig_host_threads2(Ctx& ctx) {
  return rig_host_threads(ctx, 2, "rig.host.empty.threads2");
}

nlohmann::json rig_host_threads4(Ctx& ctx) {
  return rig_host_threads(ctx, 4, "rig.host.empty.threads4");
}

// What floods an agent's metrics endpoint while a measurement runs: `clients` connections that
// each send part of a request head (or bytes that are no head) and wait, as in the metrics
// suite's hostile test; the endpoint keeps at most a few dozen and drops the oldest as new ones
// come. Then, from a thread of this process, a scrape of /metrics and of /status every
// flood_scrape_every_ms, as a too-eager scraper would. Owner: the scenario, on the worker's main
// thread; the scraper thread ends in the destructor, which closes every socket.
class MetricsFlood {
 public:
  MetricsFlood(int port, int clients) : port_(port) {
    rlimit r{};
    if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
      r.rlim_cur = r.rlim_max;
      (void)setrlimit(RLIMIT_NOFILE, &r);
    }
    for (int i = 0; i < clients; ++i) {
      const int fd = dial();
      if (fd < 0) break;
      const std::string part = i % 3 == 0   ? std::string("GET /metr")
                               : i % 3 == 1 ? std::string(4000, 'x')
                                            : std::string();
      if (!part.empty()) (void)::send(fd, part.data(), part.size(), MSG_NOSIGNAL);
      slow_.push_back(fd);
    }
    scraper_ = std::thread([this] {
      while (!stop_.load()) {
        for (const char* path : {"/metrics", "/status"}) {
          if (scrape(path)) scrapes_.fetch_add(1);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(flood_scrape_every_ms));
      }
    });
  }
  ~MetricsFlood() {
    stop_.store(true);
    scraper_.join();
    for (int fd : slow_) ::close(fd);
  }
  MetricsFlood(const MetricsFlood&) = delete;
  MetricsFlood& operator=(const MetricsFlood&) = delete;

  std::size_t clients() const { return slow_.size(); }
  std::uint64_t scrapes() const { return scrapes_.load(); }

 private:
  static constexpr int flood_scrape_every_ms = 10;
  static constexpr int flood_io_timeout_ms = 2'000;

  int dial() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }
  // One whole answer to GET `path`: whether it was a 200.
  bool scrape(const char* path) const {
    const auto r = rig::cli::http_get("127.0.0.1", port_, path, flood_io_timeout_ms);
    return r && r->status == 200;
  }

  const int port_;
  std::vector<int> slow_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> scrapes_{0};
  std::thread scraper_;
};

// rig.host.empty again, on the same agent, while its metrics endpoint is flooded: its ratio to
// rig.host.empty (same placement, same run) is what hostile clients of the endpoint cost a job.
nlohmann::json rig_host_empty_flooded(Ctx& ctx) {
  if (ctx.agent_metrics_port == 0) {
    return {{"skipped", "the first agent serves no metrics here (given hosts)"}};
  }
  constexpr int clients = 1000;
  const rig::Device host = ctx.host();
  MetricsFlood flood(ctx.agent_metrics_port, clients);
  auto r = latency_json(
      take(ctx.plan, ctx.plan.samples, ctx.plan.warmup, [&] { submit_empty_and_wait(host); }));
  r["flood"] = {{"slow_clients", flood.clients()}, {"scrapes", flood.scrapes()}};
  report_latency(ctx, "rig.host.empty.flooded", r);
  return r;
}

nlohmann::json rig_host_pipeline(Ctx& ctx) {
  const rig::Device host = ctx.host();
  std::deque<std::uint64_t> outstanding;
  auto r = rate_json(ctx.plan, [&] {
    outstanding.push_back(rig::submit(host, std::span<const rig::Part>{}));
    // A timeline only grows: once the oldest is reached, every value before it is too.
    if (outstanding.size() >= ctx.plan.window) {
      host.wait(outstanding.front());
      outstanding.pop_front();
    }
    return std::size_t{1};
  });
  if (!outstanding.empty()) host.wait(outstanding.back());
  progress(ctx, "rig.host.pipeline", fmt("p50 %.0f ops/s", r["stats"]["p50"].get<double>()));
  return r;
}

// Remote devices.

// The small copy of the submit-to-reached scenarios: a cache line's worth, the size of a flag or
// a few parameters a program reads.
constexpr std::size_t small_copy_bytes = 64;

// The bytes a copy of `bytes` from this process's memory into a remote device puts on the wire
// (its SUBMIT and the PAYLOAD frame after it) and the REACHED that comes back, from rig's codec.
nlohmann::json copy_wire_bytes(std::size_t bytes) {
  rig::remote::WirePart part;
  part.kind = rig::remote::WirePart::copy;
  part.dst = 1;
  part.bytes = bytes;
  std::vector<std::uint8_t> submit, reached;
  rig::remote::encode(rig::remote::Submit{1, 1, {part}}, submit);
  rig::remote::encode(rig::remote::Reached{1, 1}, reached);
  return {{"out", submit.size() + rig::remote::frame_header_bytes + bytes},
          {"back", reached.size()}};
}

// Where the harness's kernels are: beside the running rig-bench (where the build puts them, and
// where they go when the two are carried to another machine), else where this build made them.
std::string bench_kernels_path() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto beside = exe.parent_path() / "rig_bench_kernels.so";
    if (std::filesystem::exists(beside, ec)) return beside.string();
  }
  return RIG_BENCH_KERNELS;
}

// The harness's kernels (kernels.c) as a rig.program for this machine.
rig::Program bench_program() {
  const std::string path = bench_kernels_path();
  std::ifstream in(path, std::ios::binary);
  std::vector<char> so((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (so.empty()) {
    throw std::runtime_error("cannot read " + path +
                             " (ninja -C build bench/rig_bench_kernels.so makes it; carried "
                             "elsewhere, it goes beside rig-bench)");
  }
  rig::TargetSpec t{rig::TargetFormat::host_elf, rig::detail::host_isa_level(), {}};
  t.payload.resize(so.size());
  std::memcpy(t.payload.data(), so.data(), so.size());
  auto program = rig::Program::parse(rig::write_program(std::span<const rig::TargetSpec>(&t, 1)));
  if (!program) throw std::runtime_error(program.error());
  return *program;
}

// The harness's kernels loaded on `device`.
rig::Image load_bench_program(const rig::Device& device) {
  auto image = rig::load(device, bench_program());
  if (!image) throw std::runtime_error(image.error());
  return *image;
}

// Submit-to-reached of a 64 B copy from this process's memory into a buffer on `device`: `t0`;
// rig::copy(...).wait(); `t1`.
nlohmann::json small_copy_latency(Ctx& ctx, const rig::Device& device, std::string_view id) {
  std::array<std::uint8_t, small_copy_bytes> here{};
  const rig::Buffer src = rig::Buffer::borrow(here.data(), here.size());
  const rig::Buffer dst = rig::Buffer::make(device, small_copy_bytes);
  auto r = latency_json(
      take(ctx.plan, ctx.plan.samples, ctx.plan.warmup, [&] { rig::copy(dst, src).wait(); }));
  r["device"] = device.name();
  r["wire_bytes"] = copy_wire_bytes(small_copy_bytes);
  r["note"] = "the baselines carry " + std::to_string(submit_frame_bytes()) +
              " bytes each way; rig's copy carries wire_bytes";
  report_latency(ctx, id, r);
  return r;
}

nlohmann::json rig_sim_copy64(Ctx& ctx) {
  return small_copy_latency(ctx, ctx.proxy(ctx.agents.front(), "SIM"), "rig.sim.copy64");
}

nlohmann::json rig_sim_run(Ctx& ctx) {
  const rig::Device sim = ctx.proxy(ctx.agents.front(), "SIM");
  // One block of one thread, no arguments, an empty body (kernels.c, nop).
  const rig::Part run = rig::Run{load_bench_program(sim), "nop", rig::Shape::linear(1), {}};
  auto r = latency_json(
      take(ctx.plan, ctx.plan.samples, ctx.plan.warmup, [&] { sim.wait(rig::submit(sim, run)); }));
  r["device"] = sim.name();
  report_latency(ctx, "rig.sim.run", r);
  return r;
}

// GB/s of copies of each size between this process's memory (plain, unpinned) and a buffer on
// `device`, a device of the agent's machine, `to_remote` or back; each transfer is one rig::copy
// and its wait.
nlohmann::json bulk_copies(Ctx& ctx, std::string_view id, bool to_remote,
                           const rig::Device& device) {
  const std::uint64_t max = ctx.plan.stream_bytes_max;
  const auto here_bytes = touched(max);
  const rig::Buffer here = rig::Buffer::borrow(here_bytes.get(), max);
  const rig::Buffer there = rig::Buffer::make(device, max);
  auto r = throughput_json(ctx, id, [&](std::uint64_t n) {
    (to_remote ? rig::copy(there, 0, here, 0, n) : rig::copy(here, 0, there, 0, n)).wait();
  });
  r["device"] = device.name();
  r["frame_payload_bytes"] = rig::remote::chunk_bytes;
  r["note"] = std::string("each transfer: one rig::copy ") +
              (to_remote ? "from this process's memory to " : "to this process's memory from ") +
              device.name() + " and the wait for its fence";
  return r;
}

nlohmann::json rig_copy_to_sim(Ctx& ctx) {
  return bulk_copies(ctx, "rig.copy.to_remote.sim", true, ctx.proxy(ctx.agents.front(), "SIM"));
}
nlohmann::json rig_copy_to_host(Ctx& ctx) {
  return bulk_copies(ctx, "rig.copy.to_remote.host", true, ctx.host());
}
nlohmann::json rig_copy_from_sim(Ctx& ctx) {
  return bulk_copies(ctx, "rig.copy.from_remote.sim", false, ctx.proxy(ctx.agents.front(), "SIM"));
}
nlohmann::json rig_copy_from_host(Ctx& ctx) {
  return bulk_copies(ctx, "rig.copy.from_remote.host", false, ctx.host());
}

// The agent's first CUDA device, or why there is none.
rig::Result<rig::Device> remote_gpu(Ctx& ctx) {
  auto gpus = rig::remote::devices(ctx.host(), "CUDA");
  if (!gpus) return rig::Error("the agent has no CUDA devices: " + gpus.error());
  return gpus->front();
}

// Into GPU memory from plain memory, and back: the bytes cross the connection, then the agent's
// staging (pinned) to the device. Beside tcp.stream and cuda.htod, the lower of which bounds it.
nlohmann::json rig_copy_to_cuda(Ctx& ctx) {
  auto gpu = remote_gpu(ctx);
  if (!gpu) return {{"skipped", gpu.error()}};
  return bulk_copies(ctx, "rig.copy.to_remote.cuda", true, *gpu);
}
nlohmann::json rig_copy_from_cuda(Ctx& ctx) {
  auto gpu = remote_gpu(ctx);
  if (!gpu) return {{"skipped", gpu.error()}};
  return bulk_copies(ctx, "rig.copy.from_remote.cuda", false, *gpu);
}

// The GPU's own limit for the copies above: in this process, pinned host memory (a buffer of
// rig::host() once a GPU is open) to the first GPU, one rig::copy and its wait per transfer.
nlohmann::json cuda_htod_baseline(Ctx& ctx) {
  auto gpus = rig::cuda::open();
  if (!gpus) return {{"skipped", "no CUDA devices here: " + gpus.error()}};
  const rig::Device gpu = gpus->front();
  const std::uint64_t max = ctx.plan.stream_bytes_max;
  nlohmann::json r;
  {
    const rig::Buffer pinned = rig::Buffer::make(rig::host(), max);
    std::memset(pinned.access().data(), 0xA5, max);
    const rig::Buffer there = rig::Buffer::make(gpu, max);
    r = throughput_json(ctx, "cuda.htod",
                        [&](std::uint64_t n) { rig::copy(there, 0, pinned, 0, n).wait(); });
  }
  for (const rig::Device& d : *gpus) rig::close(d);
  r["device"] = gpu.name();
  r["note"] = "in the harness process: pinned host memory to its first GPU, one rig::copy each";
  return r;
}

// The agent's completion path: the 64 B copy into SIM with an agent that polls the device's
// timeline for RIG_AGENT_POLL_US = 200 us, and with one that never polls (0: a helper thread
// sleeps on the timeline and wakes the loop).
nlohmann::json rig_agent_completion_poll(Ctx& ctx) {
  auto r =
      small_copy_latency(ctx, ctx.proxy(ctx.agents.front(), "SIM"), "rig.agent.completion.poll");
  r["agent_poll_us"] = 200;
  return r;
}

nlohmann::json rig_agent_completion_wakeup(Ctx& ctx) {
  if (!ctx.wakeup_agent) {
    return {{"skipped",
             "needs an agent started with RIG_AGENT_POLL_US=0 (the harness starts one on "
             "loopback; with --hosts it has none)"}};
  }
  auto r =
      small_copy_latency(ctx, ctx.proxy(*ctx.wakeup_agent, "SIM"), "rig.agent.completion.wakeup");
  r["agent_poll_us"] = 0;
  return r;
}

nlohmann::json rig_cuda(Ctx& ctx) {
  auto gpu = remote_gpu(ctx);
  if (!gpu) return {{"skipped", gpu.error()}};
  auto r = small_copy_latency(ctx, *gpu, "rig.cuda");
  r["what"] = "the 64 B copy into the agent's first CUDA device (polling agent)";
  return r;
}

// Rails (issue 14): between two agents (the rail agent, on the controller's core, is the source;
// the first agent the destination), and from this process to the first agent.

// The rails' part of a full run stays near a minute on a 2-vCPU VM: their latency and rate
// measurements keep at most this many samples (and a tenth as many warm-up rounds), whatever
// --samples asks, and their throughput moves this share of tcp.stream's bytes at each size, in
// at most rail_rounds_max rounds (and at least stream_repeats_min).
constexpr std::size_t rail_samples_max = 10'000;
constexpr std::uint64_t rail_bytes_share = 8;
constexpr std::uint64_t rail_rounds_max = 2'000;
// Rounds the controller keeps in flight in the throughput scenarios, at most. Their sources are
// never written again, so no round waits for the one before it to be sent; fewer where that many
// would pass the bytes in flight that go() allows (rail_window_at).
constexpr std::uint64_t rail_window = 4;
// The untimed exchange before the host-code ping-pong's: past the longest a job's processes keep
// their spins off after a verdict of contention at their start (core/limits.hpp, spins_off_ns_max,
// 1 s). On a lent H100 the ping-pong started with its job took 7.6-10.0 us at p50 from run to run
// on one core, its host code sleeping in three hops of four in the slow runs (bench/README.md,
// "Session 29").
constexpr double rail_pingpong_settle_s = 1.2;
// A throughput sample covers at least this many bytes: smaller rounds are timed in batches.
constexpr std::uint64_t rail_batch_bytes_min = 256 << 10;
// And at least this many windows of rounds: arrivals are seen in bursts (a destination that read
// several rounds at once reports them in one write), so a sample of one round out of a window of
// four timed the gap inside a burst, and 1 MiB rounds read up to 967 GB/s on the H200.
constexpr std::uint64_t rail_batch_windows_min = 4;
// The fill of a rail's sources, any value but zero (kernels.c, fill_bytes).
constexpr std::uint64_t rail_fill_byte = 0xA5;

constexpr const char* no_rail_agent =
    "needs two agents: the harness starts a second one on loopback; with --hosts, give two";

Plan rail_plan(const Plan& p) {
  Plan r = p;
  r.samples = std::min(p.samples, rail_samples_max);
  r.warmup = std::min(p.warmup, rail_samples_max / 10);
  return r;
}

// The rails' two agents, through a job with both: {the source's host, the destination's}.
std::optional<std::pair<rig::Device, rig::Device>> rail_hosts(Ctx& ctx) {
  if (!ctx.rail_agent) return std::nullopt;
  const auto hosts = ctx.hosts_of({*ctx.rail_agent, ctx.agents.front()});
  return std::pair{hosts[0], hosts[1]};
}

// A rail of one transfer: the first `bytes` of `from` into `to`.
rig::remote::Rail one_transfer_rail(const rig::Buffer& from, const rig::Buffer& to,
                                    std::size_t bytes) {
  const rig::remote::Transfer t{from, 0, to, 0, bytes};
  auto r = rig::remote::rail(std::span(&t, 1));
  if (!r) throw std::runtime_error(r.error());
  return *r;
}

// Writes every byte of `b`, a buffer on the host `host`, with host code there.
void fill_remote(const rig::Device& host, const rig::Buffer& b) {
  const rig::Image image = load_bench_program(host);
  host.wait(rig::submit(host, rig::Run{image,
                                       "fill_bytes",
                                       rig::Shape{},
                                       {rig::Arg::out(b), rig::Arg::word(b.size()),
                                        rig::Arg::word(rail_fill_byte)}}));
}

// The words of `b` (a buffer of a job's host), copied into this process.
std::vector<std::uint64_t> words_of(const rig::Buffer& b) {
  const rig::Buffer local = rig::Buffer::make(rig::host(), b.size());
  rig::copy(local, b).wait();
  std::vector<std::uint64_t> out(b.size() / sizeof(std::uint64_t));
  std::memcpy(out.data(), local.access().data(), out.size() * sizeof(std::uint64_t));
  return out;
}

// What one round of a `bytes` rail puts on the link (its RAIL_CHUNK and the RAIL_DATA frame after
// it) and each RAIL_COUNT of it (the destination's arrived to the source and to the controller,
// the source's sent to the controller), from rig's codec.
nlohmann::json rail_wire_bytes(std::size_t bytes) {
  std::vector<std::uint8_t> chunk, count;
  rig::remote::encode(rig::remote::RailChunk{1, 1, 0, 0}, chunk);
  rig::remote::encode(rig::remote::RailCount{1, rig::remote::RailCount::arrived, 1}, count);
  return {{"round", chunk.size() + rig::remote::frame_header_bytes + bytes},
          {"count", count.size()}};
}

// Rounds of `size` in flight: rail_window, or as many as go() lets through without waiting for
// flow control (it waits while more than inflight_bytes_max are in flight), and at least one. A
// go() that waited would move the time of the rounds before it into the sample after them.
std::uint64_t rail_window_at(std::uint64_t size, std::uint64_t window_max) {
  return std::clamp<std::uint64_t>(rig::remote::inflight_bytes_max / size, 1, window_max);
}

// GB/s of rounds of each size of one transfer from `from` into `to` (host buffers of the largest
// size), driven by go() with rail_window_at(size, window_max) rounds in flight: each step starts
// rounds until the window is full, then waits for the oldest one's arrival. One sample per batch
// of rounds (at least rail_batch_bytes_min, and rail_batch_windows_min windows), from the arrival
// of the round before it to that of its last; at each size the first batch, from an empty pipe,
// is left out.
nlohmann::json rail_throughput(Ctx& ctx, std::string_view id, const rig::Buffer& from,
                               const rig::Buffer& to, std::uint64_t window_max) {
  nlohmann::json points = nlohmann::json::array();
  for (std::uint64_t size : stream_sizes(ctx.plan)) {
    rig::remote::Rail rail = one_transfer_rail(from, to, size);
    const std::uint64_t rounds =
        std::clamp(ctx.plan.stream_bytes_per_size / rail_bytes_share / size, stream_repeats_min,
                   rail_rounds_max);
    const std::uint64_t window = rail_window_at(size, window_max);
    const std::uint64_t batch = std::max<std::uint64_t>(
        1, std::min(std::max(rail_batch_bytes_min / size, rail_batch_windows_min * window),
                    rounds / stream_repeats_min));
    const std::uint64_t batches = rounds / batch;
    const std::uint64_t last = (batches + 1) * batch;
    std::uint64_t started = 0, arrived = 0;
    std::vector<double> gbps;
    const auto before = sched_snapshot(ctx);
    std::uint64_t t_prev = now_ns();
    for (std::uint64_t b = 0; b <= batches; ++b) {
      for (std::uint64_t i = 0; i < batch; ++i) {
        while (started < std::min(arrived + window, last)) started = rail.go();
        rail.wait_arrived(++arrived);
      }
      const std::uint64_t t = now_ns();
      if (b > 0) {
        gbps.push_back(static_cast<double>(batch * size) / static_cast<double>(t - t_prev));
      }
      t_prev = t;
    }
    auto point = throughput_point(ctx, id, size, batches * batch, std::move(gbps), 1);
    point["window"] = window;
    point["batch_rounds"] = batch;
    point["sched"] = sched_json(before, sched_snapshot(ctx));
    point["sched"]["transfers"] = last;
    points.push_back(std::move(point));
  }
  return {{"unit", "GB/s"},
          {"points", points},
          {"window_max", window_max},
          {"batch_bytes_min", rail_batch_bytes_min},
          {"frame_payload_bytes", rig::remote::chunk_bytes}};
}

nlohmann::json rig_rail_agents(Ctx& ctx) {
  const auto hosts = rail_hosts(ctx);
  if (!hosts) return {{"skipped", no_rail_agent}};
  const auto& [a, b] = *hosts;
  const std::uint64_t max = ctx.plan.stream_bytes_max;
  const rig::Buffer src = rig::Buffer::make(a, max);
  const rig::Buffer dst = rig::Buffer::make(b, max);
  fill_remote(a, src);
  auto r = rail_throughput(ctx, "rig.rail.agents", src, dst, rail_window);
  r["from"] = a.name();
  r["to"] = b.name();
  r["note"] =
      "rounds of one transfer between the two agents' host memory, started by go() on "
      "this process, " +
      std::to_string(rail_window) + " in flight, each waited for with wait_arrived";
  return r;
}

nlohmann::json rig_rail_to_agent(Ctx& ctx) {
  const rig::Device there = ctx.host();
  const std::uint64_t max = ctx.plan.stream_bytes_max;
  const rig::Buffer src = rig::Buffer::make(rig::host(), max);
  std::memset(src.access().data(), static_cast<int>(rail_fill_byte), max);
  const rig::Buffer dst = rig::Buffer::make(there, max);
  auto r = rail_throughput(ctx, "rig.rail.to_agent", src, dst, rail_window);
  r["from"] = rig::host().name();
  r["to"] = there.name();
  r["note"] = "rounds of one transfer from this process's memory into the agent's, " +
              std::to_string(rail_window) + " in flight, each waited for with wait_arrived";
  return r;
}

// A 64 B rail between the two agents whose source is never written again, for the go() figures.
struct SmallRail {
  rig::Buffer src, dst;
  rig::remote::Rail rail;
};

SmallRail small_rail(const rig::Device& from, const rig::Device& to) {
  SmallRail s{
      rig::Buffer::make(from, small_copy_bytes), rig::Buffer::make(to, small_copy_bytes), {}};
  s.rail = one_transfer_rail(s.src, s.dst, small_copy_bytes);
  return s;
}

nlohmann::json rig_rail_go_wait(Ctx& ctx) {
  const auto hosts = rail_hosts(ctx);
  if (!hosts) return {{"skipped", no_rail_agent}};
  SmallRail s = small_rail(hosts->first, hosts->second);
  const Plan p = rail_plan(ctx.plan);
  auto r = latency_json(take(p, p.samples, p.warmup, [&] { s.rail.wait_arrived(s.rail.go()); }));
  r["rail_bytes"] = small_copy_bytes;
  r["wire_bytes"] = rail_wire_bytes(small_copy_bytes);
  r["note"] =
      "go() sends RAIL_EXPECT to the destination and RAIL_GO to the source; the "
      "destination's RAIL_READY, the round, and its arrived count come back";
  report_latency(ctx, "rig.rail.go_wait", r);
  return r;
}

nlohmann::json rig_rail_go(Ctx& ctx) {
  const auto hosts = rail_hosts(ctx);
  if (!hosts) return {{"skipped", no_rail_agent}};
  SmallRail s = small_rail(hosts->first, hosts->second);
  const Plan p = rail_plan(ctx.plan);
  // Bursts of `window` calls; between bursts, outside the samples, the rounds are waited for, so
  // that no call waits for flow control.
  std::uint64_t started = 0;
  auto r = latency_json(take(
      p, p.samples, p.warmup, [&] { started = s.rail.go(); },
      [&] {
        if (started % p.window == 0) s.rail.wait_arrived(started);
      }));
  s.rail.wait_arrived(started);
  r["rail_bytes"] = small_copy_bytes;
  r["burst"] = p.window;
  r["note"] = "one go() call, its round not waited for; every " + std::to_string(p.window) +
              " calls the rounds are waited for outside the samples";
  report_latency(ctx, "rig.rail.go", r);
  return r;
}

nlohmann::json rig_rail_go_pipeline(Ctx& ctx) {
  const auto hosts = rail_hosts(ctx);
  if (!hosts) return {{"skipped", no_rail_agent}};
  SmallRail s = small_rail(hosts->first, hosts->second);
  const Plan p = rail_plan(ctx.plan);
  std::uint64_t started = 0;
  auto r = rate_json(p, [&] {
    started = s.rail.go();
    if (started > p.window) s.rail.wait_arrived(started - p.window);
    return std::size_t{1};
  });
  s.rail.wait_arrived(started);
  r["rail_bytes"] = small_copy_bytes;
  r["note"] = "go() with " + std::to_string(p.window) +
              " rounds in flight: each call waits for the arrival of the round that many before";
  progress(ctx, "rig.rail.go.pipeline", fmt("p50 %.0f rounds/s", r["stats"]["p50"].get<double>()));
  return r;
}

nlohmann::json rig_rail_pingpong(Ctx& ctx) {
  const auto hosts = rail_hosts(ctx);
  if (!hosts) return {{"skipped", no_rail_agent}};
  const auto& [a, b] = *hosts;
  const Plan p = rail_plan(ctx.plan);
  const std::uint64_t rounds = p.warmup + p.samples;
  const rig::Buffer send_a = rig::Buffer::make(a, small_copy_bytes);
  const rig::Buffer recv_a = rig::Buffer::make(a, small_copy_bytes);
  const rig::Buffer send_b = rig::Buffer::make(b, small_copy_bytes);
  const rig::Buffer recv_b = rig::Buffer::make(b, small_copy_bytes);
  const rig::Buffer samples = rig::Buffer::make(a, rounds * sizeof(std::uint64_t));
  constexpr std::size_t result_words = 3;
  const rig::Buffer result_a = rig::Buffer::make(a, result_words * sizeof(std::uint64_t));
  const rig::Buffer result_b = rig::Buffer::make(b, result_words * sizeof(std::uint64_t));
  const rig::Image image_a = load_bench_program(a);
  const rig::Image image_b = load_bench_program(b);
  // One exchange of up to `n` rounds over a fresh pair of rails (the program numbers rounds from
  // 1), for at most `limit_ns`; role 0 times each round into `times` (0: not timed).
  const auto exchange = [&](std::uint64_t n, std::uint64_t limit_ns, rig::Arg times) {
    const rig::remote::Rail there = one_transfer_rail(send_a, recv_b, small_copy_bytes);
    const rig::remote::Rail back = one_transfer_rail(send_b, recv_a, small_copy_bytes);
    const auto run = [&](const rig::Image& image, const rig::remote::Rail& out,
                         const rig::remote::Rail& in, const rig::Buffer& send,
                         const rig::Buffer& recv, std::uint64_t role, rig::Arg t,
                         const rig::Buffer& result) {
      return rig::Run{image,
                      "rail_pingpong_timed",
                      rig::Shape{},
                      {rig::Arg::rail(out), rig::Arg::rail(in), rig::Arg::inout(send),
                       rig::Arg::in(recv), rig::Arg::word(n), rig::Arg::word(role), t,
                       rig::Arg::word(limit_ns), rig::Arg::out(result)}};
    };
    const std::uint64_t vb =
        rig::submit(b, run(image_b, back, there, send_b, recv_b, 1, rig::Arg::word(0), result_b));
    const std::uint64_t va =
        rig::submit(a, run(image_a, there, back, send_a, recv_a, 0, times, result_a));
    a.wait(va);
    b.wait(vb);
    const auto ra = words_of(result_a), rb = words_of(result_b);
    if (ra[2] != 0 || rb[2] != 0)
      throw std::runtime_error("a rail's count was raised: the job failed");
    if (ra[1] != 0 || rb[1] != 0) {
      throw std::runtime_error(std::to_string(ra[1] + rb[1]) + " rounds carried the wrong number");
    }
    return ra[0];  // rounds done
  };
  // The job's processes have just started (the scenario before used another job), and what they
  // did at start on this core may have turned their spins off, for up to a second
  // (rig::detail::yield_for_spin): an untimed exchange first lets that pass, so that the figure is
  // the steady state of a pipeline that runs on.
  const auto settle_ns = static_cast<std::uint64_t>(rail_pingpong_settle_s * 1e9);
  const std::uint64_t settled = exchange(UINT64_MAX, settle_ns, rig::Arg::word(0));
  // The whole exchange, warm-up included, gets the time a measurement and its warm-up may take.
  const std::uint64_t done = exchange(
      rounds, static_cast<std::uint64_t>(p.measurement_s_max * (1 + warmup_time_share) * 1e9),
      rig::Arg::out(samples));
  const auto ns = words_of(samples);
  Taken t;
  t.warmup = static_cast<std::size_t>(std::min<std::uint64_t>(p.warmup, done));
  for (std::uint64_t i = t.warmup; i < done; ++i) t.us.push_back(static_cast<double>(ns[i]) / 1e3);
  if (done < rounds) {
    t.cut_short = "stopped after " + std::to_string(done) + " of " + std::to_string(rounds) +
                  " rounds (warm-up included) at the time limit of " +
                  fmt("%.0f", p.measurement_s_max * (1 + warmup_time_share)) + " s";
  }
  auto r = latency_json(std::move(t));
  r["rail_bytes"] = small_copy_bytes;
  r["wire_bytes"] = rail_wire_bytes(small_copy_bytes);
  r["from"] = a.name();
  r["to"] = b.name();
  r["settle_s"] = rail_pingpong_settle_s;
  r["settle_rounds"] = settled;
  r["note"] =
      "timed by host code on the source agent (CLOCK_MONOTONIC): rig_rail_go of the 64 B "
      "there to the arrival of the answer on the rail back, after an untimed exchange of "
      "settle_s on other rails of the same job";
  report_latency(ctx, "rig.rail.pingpong", r);
  return r;
}

constexpr Scenario table[] = {
    {"tcp.pingpong.blocking", "raw TCP ping-pong, blocking sockets", "baseline", "latency", "",
     Where::placement, tcp_ping_pong_blocking, ""},
    {"tcp.pingpong.spinning", "raw TCP ping-pong, both ends spinning", "baseline", "latency", "",
     Where::placement, tcp_ping_pong_spinning, ""},
    {"tcp.pipeline", "raw TCP, pipelined messages", "baseline", "ops", "", Where::placement,
     tcp_pipeline, ""},
    {"tcp.stream", "raw TCP stream, 1 MiB writes", "baseline", "throughput", "", Where::placement,
     tcp_stream, ""},
    {"tcp.stream.placed", "raw TCP stream, received across memory of the transfer's size",
     "baseline", "throughput", "", Where::placement, tcp_stream_placed, ""},
    {"memcpy", "memcpy in one process", "baseline", "throughput", "", Where::whole_run,
     memcpy_baseline, ""},
    {"cuda.htod", "pinned host memory to a GPU in one process", "baseline", "throughput", "",
     Where::whole_run, cuda_htod_baseline, ""},
    {"rig.host.empty", "submit-to-reached, empty submission to CPU@NAME", "rig", "latency",
     "tcp.pingpong.blocking", Where::placement, rig_host_empty, ""},
    {"rig.host.empty.threads2", "submit-to-reached from 2 threads", "rig", "latency",
     "tcp.pingpong.blocking", Where::placement, rig_host_threads2, ""},
    {"rig.host.empty.threads4", "submit-to-reached from 4 threads", "rig", "latency",
     "tcp.pingpong.blocking", Where::placement, rig_host_threads4, ""},
    {"rig.host.empty.flooded",
     "submit-to-reached while 1000 slow clients and a 10 ms scraper hit the agent's --metrics",
     "rig", "latency", "rig.host.empty", Where::placement, rig_host_empty_flooded, ""},
    {"rig.host.pipeline", "empty submissions, pipelined", "rig", "ops", "tcp.pipeline",
     Where::placement, rig_host_pipeline, ""},
    {"rig.scale", "job start, idle CPU and controller memory against agents", "rig", "scale", "",
     Where::whole_run, run_scale, ""},
    {"rig.sim.copy64", "submit-to-reached, 64 B copy into a remote SIM device", "rig", "latency",
     "tcp.pingpong.blocking", Where::placement, rig_sim_copy64, ""},
    {"rig.sim.run", "submit-to-reached, smallest program run on a remote SIM device", "rig",
     "latency", "tcp.pingpong.blocking", Where::placement, rig_sim_run, ""},
    {"rig.agent.completion.poll", "64 B copy into SIM, agent polling 200 us for completion", "rig",
     "latency", "tcp.pingpong.blocking", Where::placement, rig_agent_completion_poll, ""},
    {"rig.agent.completion.wakeup", "64 B copy into SIM, agent waking on completion (no polling)",
     "rig", "latency", "tcp.pingpong.blocking", Where::placement, rig_agent_completion_wakeup, ""},
    {"rig.copy.to_remote.sim", "bulk copies controller to remote SIM memory, 4 KiB..1 GiB", "rig",
     "throughput", "tcp.stream", Where::placement, rig_copy_to_sim, ""},
    {"rig.copy.to_remote.host", "bulk copies controller to remote host memory, 4 KiB..1 GiB", "rig",
     "throughput", "tcp.stream", Where::placement, rig_copy_to_host, ""},
    {"rig.copy.from_remote.sim", "bulk copies remote SIM memory to controller, 4 KiB..1 GiB", "rig",
     "throughput", "tcp.stream", Where::placement, rig_copy_from_sim, ""},
    {"rig.copy.from_remote.host", "bulk copies remote host memory to controller, 4 KiB..1 GiB",
     "rig", "throughput", "tcp.stream", Where::placement, rig_copy_from_host, ""},
    {"rig.cuda", "submit-to-reached, 64 B copy into a remote CUDA device", "rig", "latency",
     "tcp.pingpong.blocking", Where::placement, rig_cuda, ""},
    {"rig.copy.to_remote.cuda", "bulk copies controller to remote CUDA memory, 4 KiB..1 GiB", "rig",
     "throughput", "tcp.stream", Where::placement, rig_copy_to_cuda, ""},
    {"rig.copy.from_remote.cuda", "bulk copies remote CUDA memory to controller, 4 KiB..1 GiB",
     "rig", "throughput", "tcp.stream", Where::placement, rig_copy_from_cuda, ""},
    {"rig.rail.agents", "rail rounds between two agents, go() from here, 4 KiB..1 GiB", "rig",
     "throughput", "tcp.stream", Where::placement, rig_rail_agents, ""},
    {"rig.rail.pingpong", "64 B rail ping-pong, host code on both agents", "rig", "latency",
     "tcp.pingpong.blocking", Where::placement, rig_rail_pingpong, ""},
    {"rig.rail.go_wait", "go() and wait_arrived of a 64 B rail between two agents", "rig",
     "latency", "tcp.pingpong.blocking", Where::placement, rig_rail_go_wait, ""},
    {"rig.rail.go", "one go() call of a 64 B rail, its round not waited for", "rig", "latency", "",
     Where::placement, rig_rail_go, ""},
    {"rig.rail.go.pipeline", "go() of a 64 B rail, rounds pipelined", "rig", "ops", "tcp.pipeline",
     Where::placement, rig_rail_go_pipeline, ""},
    {"rig.rail.to_agent", "rail rounds from this process to an agent, 4 KiB..1 GiB", "rig",
     "throughput", "tcp.stream", Where::placement, rig_rail_to_agent, ""},
    // Last: what the neighbours leave behind (spins off for a second) touches no other scenario.
    {"tcp.pingpong.blocking.contended", "raw TCP ping-pong, blocking, a busy neighbour per core",
     "baseline", "latency", "", Where::placement, tcp_ping_pong_contended, ""},
    {"rig.host.empty.contended", "empty submission to CPU@NAME, a busy neighbour per core", "rig",
     "latency", "tcp.pingpong.blocking.contended", Where::placement, rig_host_empty_contended, ""},
};

}  // namespace

std::span<const Scenario> scenarios() {
  return table;
}

std::size_t submit_frame_bytes() {
  static const std::size_t bytes = [] {
    // An empty SUBMIT to a host; its REACHED answer is 4 bytes shorter, so the baseline's echo of
    // the request's size each way is, if anything, the heavier of the two.
    std::vector<std::uint8_t> submit;
    rig::remote::encode(rig::remote::Submit{0, 1, {}}, submit);
    return submit.size();
  }();
  return bytes;
}

rig::Device Ctx::host() {
  return host_of(agents.front());
}

rig::Device Ctx::host_of(const rig::remote::Address& agent) {
  return hosts_of({agent}).front();
}

std::vector<rig::Device> Ctx::hosts_of(const std::vector<rig::remote::Address>& agents) {
  if (job_ && job_agents_ != agents) close_job();
  if (!job_) {
    auto key = rig::remote::read_key(key_file);
    if (!key) throw std::runtime_error(key.error());
    auto job = rig::remote::connect(*key, agents);
    if (!job) throw std::runtime_error("the job did not start: " + job.error());
    job_ = *job;
    job_agents_ = agents;
  }
  return job_->hosts();
}

rig::Device Ctx::proxy(const rig::remote::Address& agent, const std::string& kind) {
  auto devices = rig::remote::devices(host_of(agent), kind);
  if (!devices) throw std::runtime_error(devices.error());
  return devices->front();
}

void Ctx::close_job() {
  if (job_) job_->close();
  job_.reset();
}

nlohmann::json run_placement(Ctx& ctx) {
  nlohmann::json out = nlohmann::json::object();
  for (const Scenario& s : scenarios()) {
    if (s.where != Where::placement || s.run == nullptr) continue;
    if (!ctx.only.empty() && std::find(ctx.only.begin(), ctx.only.end(), s.id) == ctx.only.end()) {
      out[std::string(s.id)] = {{"skipped", "left out by --only"}};
      continue;
    }
    try {
      const auto before = sched_snapshot(ctx);
      nlohmann::json r = s.run(ctx);
      if (r.is_object() && !r.contains("skipped"))
        r["sched"] = sched_json(before, sched_snapshot(ctx));
      out[std::string(s.id)] = std::move(r);
    } catch (const std::exception& e) {
      progress(ctx, s.id, std::string("failed: ") + e.what());
      out[std::string(s.id)] = {{"error", e.what()}};
    }
    if (s.kind == "rig" && s.metric == "throughput" &&
        !out[std::string(s.id)].contains("skipped")) {
      std::this_thread::sleep_for(std::chrono::duration<double>(ctx.plan.settle_s));
    }
  }
  ctx.close_job();
  return out;
}

nlohmann::json plan_json(const Plan& p) {
  return {{"samples", p.samples},
          {"warmup", p.warmup},
          {"window", p.window},
          {"batch_ops", p.batch_ops},
          {"stream_bytes_max", p.stream_bytes_max},
          {"stream_bytes_per_size", p.stream_bytes_per_size},
          {"measurement_s_max", p.measurement_s_max},
          {"idle_s", p.idle_s},
          {"settle_s", p.settle_s},
          {"scale_repeats", p.scale_repeats},
          {"scale_agents", p.scale_agents}};
}

Plan plan_from_json(const nlohmann::json& j) {
  Plan p;
  p.samples = j.at("samples");
  p.warmup = j.at("warmup");
  p.window = j.at("window");
  p.batch_ops = j.at("batch_ops");
  p.stream_bytes_max = j.at("stream_bytes_max");
  p.stream_bytes_per_size = j.at("stream_bytes_per_size");
  p.measurement_s_max = j.at("measurement_s_max");
  p.idle_s = j.at("idle_s");
  p.settle_s = j.at("settle_s");
  p.scale_repeats = j.at("scale_repeats");
  p.scale_agents = j.at("scale_agents").get<std::vector<int>>();
  return p;
}

}  // namespace rig::bench
