#include "scenarios.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "clock.hpp"
#include "process.hpp"
#include "remote/codec.hpp"
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

template <typename Op>
Taken take(const Plan& p, std::size_t samples, std::size_t warmup, Op&& op) {
  Taken t;
  t.us.reserve(samples);
  // The warm-up has a tenth of the measurement's time limit; the count it ran is reported.
  const std::uint64_t warm_until =
      now_ns() + static_cast<std::uint64_t>(p.measurement_s_max * 1e9 * warmup_time_share);
  while (t.warmup < warmup && (t.warmup % 64 != 0 || now_ns() < warm_until)) {
    op();
    ++t.warmup;
  }
  const std::uint64_t deadline = now_ns() + static_cast<std::uint64_t>(p.measurement_s_max * 1e9);
  for (std::size_t i = 0; i < samples; ++i) {
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

std::vector<std::uint64_t> stream_sizes(const Plan& p) {
  std::vector<std::uint64_t> sizes;
  for (std::uint64_t s = stream_bytes_min; s <= p.stream_bytes_max; s *= stream_size_step) {
    sizes.push_back(s);
  }
  if (sizes.back() != p.stream_bytes_max) sizes.push_back(p.stream_bytes_max);
  return sizes;
}

// GB/s of transfers of each size, one sample per transfer, the first at each size left out.
template <typename Move>
nlohmann::json throughput_json(const Ctx& ctx, std::string_view id, Move&& move) {
  nlohmann::json points = nlohmann::json::array();
  for (std::uint64_t size : stream_sizes(ctx.plan)) {
    const std::uint64_t repeats =
        std::clamp(ctx.plan.stream_bytes_per_size / size, stream_repeats_min, stream_repeats_max);
    move(size);  // warm-up
    std::vector<double> gbps;
    for (std::uint64_t i = 0; i < repeats; ++i) {
      const std::uint64_t t0 = now_ns();
      move(size);
      const std::uint64_t t1 = now_ns();
      gbps.push_back(static_cast<double>(size) / static_cast<double>(t1 - t0));
    }
    const Summary s = summarize(std::move(gbps), 1);
    points.push_back({{"bytes", size}, {"stats", stats_json(s)}});
    progress(ctx, id,
             std::to_string(size) + " B x " + std::to_string(repeats) + ": p50 " +
                 fmt("%.2f", s.p50) + " GB/s");
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

constexpr std::string_view needs_proxies =
    "needs proxies of remote devices (devices(host, \"SIM\"), buffers and runs on them), which "
    "are not in the API yet";

constexpr Scenario table[] = {
    {"tcp.pingpong.blocking", "raw TCP ping-pong, blocking sockets", "baseline", "latency", "",
     Where::placement, tcp_ping_pong_blocking, ""},
    {"tcp.pingpong.spinning", "raw TCP ping-pong, both ends spinning", "baseline", "latency", "",
     Where::placement, tcp_ping_pong_spinning, ""},
    {"tcp.pipeline", "raw TCP, pipelined messages", "baseline", "ops", "", Where::placement,
     tcp_pipeline, ""},
    {"tcp.stream", "raw TCP stream, 1 MiB writes", "baseline", "throughput", "", Where::placement,
     tcp_stream, ""},
    {"memcpy", "memcpy in one process", "baseline", "throughput", "", Where::whole_run,
     memcpy_baseline, ""},
    {"rig.host.empty", "submit-to-reached, empty submission to CPU@NAME", "rig", "latency",
     "tcp.pingpong.blocking", Where::placement, rig_host_empty, ""},
    {"rig.host.empty.threads2", "submit-to-reached from 2 threads", "rig", "latency",
     "tcp.pingpong.blocking", Where::placement, rig_host_threads2, ""},
    {"rig.host.empty.threads4", "submit-to-reached from 4 threads", "rig", "latency",
     "tcp.pingpong.blocking", Where::placement, rig_host_threads4, ""},
    {"rig.host.pipeline", "empty submissions, pipelined", "rig", "ops", "tcp.pipeline",
     Where::placement, rig_host_pipeline, ""},
    {"rig.scale", "job start, idle CPU and controller memory against agents", "rig", "scale", "",
     Where::whole_run, run_scale, ""},
    // Placeholders: each gets its run function once the API it needs lands.
    {"rig.sim.copy64", "submit-to-reached, 64 B copy into a remote SIM device", "rig", "latency",
     "tcp.pingpong.blocking", Where::placement, nullptr, needs_proxies},
    {"rig.sim.run", "submit-to-reached, smallest program run on a remote SIM device", "rig",
     "latency", "tcp.pingpong.blocking", Where::placement, nullptr, needs_proxies},
    {"rig.copy.to_remote", "bulk copies controller to remote host and SIM memory, 4 KiB..1 GiB",
     "rig", "throughput", "tcp.stream", Where::placement, nullptr, needs_proxies},
    {"rig.copy.from_remote", "bulk copies remote host and SIM memory to controller, 4 KiB..1 GiB",
     "rig", "throughput", "tcp.stream", Where::placement, nullptr, needs_proxies},
    {"rig.agent.completion", "agent completion path: polling against wake-up, SIM", "rig",
     "latency", "tcp.pingpong.blocking", Where::placement, nullptr, needs_proxies},
    {"rig.cuda", "64 B copy, smallest run and completion path on CUDA", "rig", "latency",
     "tcp.pingpong.blocking", Where::placement, nullptr,
     "needs the CUDA backend and proxies of remote devices (devices(host, \"CUDA\")); neither "
     "is in rig yet"},
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
  if (!job_) {
    auto key = rig::remote::read_key(key_file);
    if (!key) throw std::runtime_error(key.error());
    auto job = rig::remote::connect(*key, {agents.front()});
    if (!job) throw std::runtime_error("the job did not start: " + job.error());
    job_ = *job;
  }
  return job_->hosts().front();
}

void Ctx::close_job() {
  if (job_) job_->close();
  job_.reset();
}

nlohmann::json run_placement(Ctx& ctx) {
  nlohmann::json out = nlohmann::json::object();
  for (const Scenario& s : scenarios()) {
    if (s.where != Where::placement || s.run == nullptr) continue;
    try {
      out[std::string(s.id)] = s.run(ctx);
    } catch (const std::exception& e) {
      progress(ctx, s.id, std::string("failed: ") + e.what());
      out[std::string(s.id)] = {{"error", e.what()}};
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
  p.scale_repeats = j.at("scale_repeats");
  p.scale_agents = j.at("scale_agents").get<std::vector<int>>();
  return p;
}

}  // namespace rig::bench
