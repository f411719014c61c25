#include "rigd/metrics.hpp"

#include <time.h>

#include <chrono>
#include <nlohmann/json.hpp>

namespace rig::rigd {

namespace {

constexpr std::array<std::string_view, cause_kind_count> cause_labels = {
    "connection_closed", "silence",   "send_stalled", "malformed", "device_lost",
    "aborted",           "exception", "interrupted",  "other",
};

// A label value as the text format wants it: backslash, double quote and newline escaped.
std::string label_value(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// One metric family: its HELP and TYPE lines, then its samples, appended by the caller.
void family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void sample(std::string& out, std::string_view name, std::string_view labels, double value) {
  out += name;
  if (!labels.empty()) {
    out += '{';
    out += labels;
    out += '}';
  }
  out += ' ';
  // Whole numbers as integers (every counter here is one), the rest with millisecond precision.
  char buf[64];
  if (value == static_cast<double>(static_cast<std::int64_t>(value))) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(value));
  } else {
    std::snprintf(buf, sizeof buf, "%.3f", value);
  }
  out += buf;
  out += '\n';
}

constexpr std::array<std::string_view, 2> role_labels = {"controller", "agent"};

// The page's counts of each role, in role_labels' order.
std::array<const rig::remote::ConnectionCounters::Role*, 2> roles_of(const JobPage& page) {
  return {&page.connections.controller, &page.connections.agent};
}

// The page's work counts (and its listener's refusals), and `into` with them added.
void add_work(const JobPage& page, auto& into) {
  const rig::remote::WorkCounters& w = page.work;
  const rig::remote::ConnectionCounters& c = page.connections;
  into.handshakes_wrong_key += c.handshakes_wrong_key.load(std::memory_order_relaxed);
  into.handshakes_malformed += c.handshakes_malformed.load(std::memory_order_relaxed);
  into.handshakes_timed_out += c.handshakes_timed_out.load(std::memory_order_relaxed);
  into.connections_refused += c.connections_refused.load(std::memory_order_relaxed);
  into.submissions += w.submissions.load(std::memory_order_relaxed);
  into.copies += w.copies.load(std::memory_order_relaxed);
  into.copy_bytes += w.copy_bytes.load(std::memory_order_relaxed);
  into.rail_rounds_sent += w.rail_rounds_sent.load(std::memory_order_relaxed);
  into.rail_bytes_sent += w.rail_bytes_sent.load(std::memory_order_relaxed);
  into.rail_rounds_arrived += w.rail_rounds_arrived.load(std::memory_order_relaxed);
  into.rail_bytes_arrived += w.rail_bytes_arrived.load(std::memory_order_relaxed);
  into.rail_rounds_host_read += w.rail_rounds_host_read.load(std::memory_order_relaxed);
}

std::int64_t steady_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string_view cause_label(CauseKind kind) {
  return cause_labels[static_cast<std::size_t>(kind)];
}

CauseKind classify_cause(std::string_view cause) {
  if (cause == "interrupted") return CauseKind::interrupted;
  if (cause == "unknown exception") return CauseKind::exception;
  // Every other cause the remote layer makes is "WHO: WHAT" (or "WHO aborted: REASON"), WHO a
  // name of ours without ": ". Only WHAT's start is ours; the rest may be a peer's text.
  const std::size_t colon = cause.find(": ");
  if (colon == std::string_view::npos) {
    return cause.starts_with("malformed ") ? CauseKind::malformed : CauseKind::other;
  }
  const std::string_view who = cause.substr(0, colon);
  const std::string_view what = cause.substr(colon + 2);
  if (who.ends_with(" aborted")) return CauseKind::aborted;
  if (what == "closed its connection" || what.starts_with("connection failed: ")) {
    return CauseKind::connection_closed;
  }
  if (what.starts_with("sent nothing for ")) return CauseKind::silence;
  if (what.starts_with("a send made no progress for ")) return CauseKind::send_stalled;
  if (what.starts_with("malformed message: ") || what.starts_with("malformed handshake: ") ||
      who == "malformed message") {
    return CauseKind::malformed;
  }
  return CauseKind::other;
}

std::int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string utc_text(std::int64_t unix_ms) {
  const time_t s = static_cast<time_t>(unix_ms / 1000);
  tm t{};
  gmtime_r(&s, &t);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &t);
  return buf;
}

Metrics::Metrics(AgentFacts facts, JobPage* page) : facts_(std::move(facts)), page_(page) {}

void Metrics::job_process_started(std::uint64_t job) {
  std::lock_guard lock(mu_);
  page_->clear();
  job_ = job;
  process_running_ = true;
  ++processes_started_;
}

void Metrics::job_process_ended(std::uint64_t job, std::string_view report,
                                std::string_view death) {
  std::lock_guard lock(mu_);
  const bool started = page_->started.load(std::memory_order_acquire) != 0;
  process_running_ = false;
  // The job process is gone: what its page counted joins the totals before the page is cleared.
  const auto roles = roles_of(*page_);
  for (std::size_t r = 0; r < roles.size(); ++r) {
    ended_traffic_[r].sent_bytes += roles[r]->sent_bytes.load();
    ended_traffic_[r].received_bytes += roles[r]->received_bytes.load();
    ended_traffic_[r].sent_messages += roles[r]->sent_messages.load();
    ended_traffic_[r].received_messages += roles[r]->received_messages.load();
  }
  add_work(*page_, ended_work_);
  const bool device_lost = page_->work.device_lost.load() != 0;
  page_->clear();
  if (!started && report.empty()) return;  // no controller came: no job
  Last last;
  last.job = job;
  last.ended_unix_ms = unix_ms_now();
  if (report == "closed") {
    last.closed = true;
    ++closed_;
  } else {
    last.cause = report.starts_with("failed ") ? report.substr(7) : report.empty() ? death : report;
    last.kind = classify_cause(last.cause);
    // A device's loss is worded by the device (its driver's text): the job process says so.
    if (last.kind == CauseKind::other && device_lost) last.kind = CauseKind::device_lost;
    ++failed_;
    ++failures_[static_cast<std::size_t>(last.kind)];
  }
  ++jobs_ended_;
  last_ = std::move(last);
}

void Metrics::devices_probed(ProbedDevices probed) {
  std::lock_guard lock(mu_);
  probed_ = std::move(probed);
}

Metrics::Snapshot Metrics::snapshot() const {
  std::lock_guard lock(mu_);
  Snapshot s;
  s.job = job_;
  s.process_running = process_running_;
  s.serving = process_running_ && page_->started.load(std::memory_order_acquire) != 0;
  if (s.serving) {
    s.serving_since_unix_ms = page_->started_unix_ms.load();
    s.controller = page_->controller.load();
    s.agents = page_->agent_names();
  }
  s.probed = probed_;
  s.processes_started = processes_started_;
  s.jobs_started = jobs_ended_ + (s.serving ? 1 : 0);
  s.closed = closed_;
  s.failed = failed_;
  s.failures = failures_;
  s.last = last_;
  s.traffic = ended_traffic_;
  s.work = ended_work_;
  if (process_running_) {
    add_work(*page_, s.work);
    s.devices_open = page_->work.devices_open.load(std::memory_order_relaxed);
    s.memory_bytes = page_->work.memory_bytes.load(std::memory_order_relaxed);
    for (const auto& d : page_->work.devices) {
      if (d.name.empty()) break;
      s.device_memory.emplace_back(d.name.load(), d.memory_bytes.load(std::memory_order_relaxed));
    }
    const auto roles = roles_of(*page_);
    for (std::size_t r = 0; r < roles.size(); ++r) {
      s.traffic[r].sent_bytes += roles[r]->sent_bytes.load(std::memory_order_relaxed);
      s.traffic[r].received_bytes += roles[r]->received_bytes.load(std::memory_order_relaxed);
      s.traffic[r].sent_messages += roles[r]->sent_messages.load(std::memory_order_relaxed);
      s.traffic[r].received_messages += roles[r]->received_messages.load(std::memory_order_relaxed);
      if (s.serving) s.last_received_ms[r] = roles[r]->last_received_ms.load();
    }
  }
  return s;
}

std::string Metrics::prometheus_text() const {
  const Snapshot s = snapshot();
  std::string out;
  family(out, "rig_build_info", "gauge", "The rigd build serving this agent (always 1).");
  sample(out, "rig_build_info",
         "version=\"" + label_value(facts_.version) + "\",commit=\"" + label_value(facts_.commit) +
             "\"",
         1);
  family(out, "rig_agent_start_time_seconds", "gauge", "When this rigd started, Unix time.");
  sample(out, "rig_agent_start_time_seconds", "",
         static_cast<double>(facts_.started_unix_ms) / 1000);
  family(out, "rig_job_processes_started_total", "counter",
         "Job processes started, each waiting for a controller.");
  sample(out, "rig_job_processes_started_total", "", static_cast<double>(s.processes_started));
  family(out, "rig_jobs_started_total", "counter", "Jobs a controller started on this agent.");
  sample(out, "rig_jobs_started_total", "", static_cast<double>(s.jobs_started));
  family(out, "rig_jobs_ended_total", "counter", "Jobs ended, by outcome.");
  sample(out, "rig_jobs_ended_total", "outcome=\"closed\"", static_cast<double>(s.closed));
  sample(out, "rig_jobs_ended_total", "outcome=\"failed\"", static_cast<double>(s.failed));
  family(out, "rig_job_failures_total", "counter", "Failed jobs, by the kind of their root cause.");
  for (std::size_t k = 0; k < cause_kind_count; ++k) {
    sample(out, "rig_job_failures_total", "cause=\"" + std::string(cause_labels[k]) + "\"",
           static_cast<double>(s.failures[k]));
  }
  family(out, "rig_job_serving", "gauge", "Whether a job is being served now (1) or not (0).");
  sample(out, "rig_job_serving", "", s.serving ? 1 : 0);
  family(out, "rig_job_serving_since_seconds", "gauge",
         "When the job being served started, Unix time; 0 when none is.");
  sample(out, "rig_job_serving_since_seconds", "",
         static_cast<double>(s.serving_since_unix_ms) / 1000);
  struct Counter {
    const char* name;
    const char* help;
    std::uint64_t Traffic::*field;
  };
  constexpr Counter counters[] = {
      {"rig_connection_sent_bytes_total", "Bytes sent to the job's peers, by their role.",
       &Traffic::sent_bytes},
      {"rig_connection_received_bytes_total", "Bytes received from the job's peers, by their role.",
       &Traffic::received_bytes},
      {"rig_connection_sent_messages_total",
       "Messages (other than bulk frames) sent to the job's peers, by their role.",
       &Traffic::sent_messages},
      {"rig_connection_received_messages_total",
       "Messages (other than bulk frames) received from the job's peers, by their role.",
       &Traffic::received_messages},
  };
  for (const Counter& c : counters) {
    family(out, c.name, "counter", c.help);
    for (std::size_t r = 0; r < role_labels.size(); ++r) {
      sample(out, c.name, "role=\"" + std::string(role_labels[r]) + "\"",
             static_cast<double>(s.traffic[r].*c.field));
    }
  }
  // A family of one sample, unlabelled.
  auto single = [&](const char* name, const char* type, const char* help, std::uint64_t v) {
    family(out, name, type, help);
    sample(out, name, "", static_cast<double>(v));
  };
  // A counter by `label`, one sample per value.
  auto by = [&](const char* name, const char* help, const char* label,
                std::initializer_list<std::pair<const char*, std::uint64_t>> values) {
    family(out, name, "counter", help);
    for (const auto& [value, n] : values) {
      sample(out, name, std::string(label) + "=\"" + value + "\"", static_cast<double>(n));
    }
  };
  by("rig_handshake_failures_total",
     "Connections to this agent that did not prove the key, by why.", "reason",
     {{"wrong_key", s.work.handshakes_wrong_key},
      {"malformed", s.work.handshakes_malformed},
      {"timed_out", s.work.handshakes_timed_out}});
  single("rig_connections_refused_total", "counter",
         "Connections refused though they might have proven the key: another job's, an agent's "
         "before a job, any while a job ends, and strangers dropped to make room.",
         s.work.connections_refused);
  single("rig_job_devices_open", "gauge",
         "Devices the job being served has opened on this agent (its host not counted).",
         s.devices_open);
  single("rig_job_memory_bytes", "gauge",
         "Bytes of the buffers the job being served holds on this agent's devices.",
         s.memory_bytes);
  single("rig_submissions_total", "counter", "Submissions the jobs applied on this agent.",
         s.work.submissions);
  single("rig_copies_total", "counter", "Copies among those submissions.", s.work.copies);
  single("rig_copy_bytes_total", "counter", "Bytes those copies moved.", s.work.copy_bytes);
  by("rig_rail_rounds_total", "Rail rounds whose bytes this agent sent, or that arrived here.",
     "direction", {{"sent", s.work.rail_rounds_sent}, {"arrived", s.work.rail_rounds_arrived}});
  by("rig_rail_bytes_total", "The bytes of those rail rounds.", "direction",
     {{"sent", s.work.rail_bytes_sent}, {"arrived", s.work.rail_bytes_arrived}});
  single("rig_rail_rounds_host_read_total", "counter",
         "Of the rail rounds that arrived here, those that host code waiting for them read off the "
         "connection itself, not the agent's loop.",
         s.work.rail_rounds_host_read);
  // While a job is served: how long since its peers of each role last sent anything (a heartbeat
  // comes every second; the silence rule fails the job at 10 s).
  const std::int64_t now = steady_ms_now();
  bool any = false;
  for (std::size_t r = 0; r < role_labels.size(); ++r) {
    if (s.last_received_ms[r] == 0) continue;
    if (!any) {
      family(out, "rig_heartbeat_age_seconds", "gauge",
             "Seconds since the job's peers of a role last sent anything; only while serving.");
      any = true;
    }
    sample(out, "rig_heartbeat_age_seconds", "role=\"" + std::string(role_labels[r]) + "\"",
           static_cast<double>(std::max<std::int64_t>(now - s.last_received_ms[r], 0)) / 1000);
  }
  return out;
}

std::string Metrics::status_json() const {
  const Snapshot s = snapshot();
  nlohmann::json j;
  j["address"] = facts_.address;
  j["kinds"] = facts_.kinds;
  j["arch"] = facts_.arch;
  j["pid"] = facts_.pid;
  j["version"] = facts_.version;
  j["commit"] = facts_.commit;
  j["started"] = utc_text(facts_.started_unix_ms);
  j["state"] = s.serving ? "serving" : "idle";
  if (s.serving) {
    j["job"] = {{"number", s.job},
                {"controller", s.controller},
                {"since", utc_text(s.serving_since_unix_ms)},
                {"since_unix_ms", s.serving_since_unix_ms}};
  } else {
    j["job"] = nullptr;
  }
  j["jobs"] = {{"started", s.jobs_started}, {"closed", s.closed}, {"failed", s.failed}};
  if (s.serving) {
    j["job"]["agents"] = s.agents;
    j["job"]["devices_open"] = s.devices_open;
    j["job"]["memory_bytes"] = s.memory_bytes;
  }
  // This machine's devices, as the probe at the daemon's start found them, each with what the job
  // being served holds of it; null until the probe has ended.
  if (s.probed) {
    j["devices"] = nlohmann::json::array();
    for (const DeviceFact& d : s.probed->devices) {
      std::uint64_t memory = 0;
      bool in_use = false;
      for (const auto& [name, bytes] : s.device_memory) {
        if (name == d.name) {
          in_use = true;
          memory = bytes;
          break;
        }
      }
      j["devices"].push_back({{"name", d.name},
                              {"arch", d.arch},
                              {"budget_bytes", d.budget_bytes},
                              {"in_use", in_use},
                              {"memory_bytes", memory}});
    }
    j["device_problems"] = s.probed->problems;
  } else {
    j["devices"] = nullptr;
  }
  j["work"] = {{"submissions", s.work.submissions},
               {"copies", s.work.copies},
               {"copy_bytes", s.work.copy_bytes},
               {"rail_rounds_sent", s.work.rail_rounds_sent},
               {"rail_bytes_sent", s.work.rail_bytes_sent},
               {"rail_rounds_arrived", s.work.rail_rounds_arrived},
               {"rail_bytes_arrived", s.work.rail_bytes_arrived},
               {"rail_rounds_host_read", s.work.rail_rounds_host_read}};
  for (std::size_t r = 0; r < role_labels.size(); ++r) {
    j["traffic"][std::string(role_labels[r])] = {
        {"sent_bytes", s.traffic[r].sent_bytes},
        {"received_bytes", s.traffic[r].received_bytes},
        {"sent_messages", s.traffic[r].sent_messages},
        {"received_messages", s.traffic[r].received_messages}};
  }
  if (s.last) {
    j["last"] = {{"job", s.last->job},
                 {"outcome", s.last->closed ? "closed" : "failed"},
                 {"ended", utc_text(s.last->ended_unix_ms)}};
    if (!s.last->closed) {
      j["last"]["cause"] = s.last->cause;
      j["last"]["cause_kind"] = cause_label(s.last->kind);
    }
  } else {
    j["last"] = nullptr;
  }
  // A cause or address is a peer's bytes, maybe not UTF-8: replaced, never a throw.
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace rig::rigd
