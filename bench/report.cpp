#include "report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <vector>

#include "png.hpp"

namespace rig::bench {

namespace {

using nlohmann::json;

// Layout in pixels: two columns of three panels under a heading, and the run's facts below them
// across the whole width.
constexpr int panel_w = 800;
constexpr int panel_h = 480;
constexpr int heading_h = 50;
constexpr int facts_h = 330;
constexpr int image_w = 2 * panel_w;
constexpr int image_h = heading_h + 3 * panel_h + facts_h;
// Inside a panel: room for the title and subtitle above, tick labels and axis label below and
// left.
constexpr int margin_left = 100;
constexpr int margin_right = 50;
constexpr int margin_top = 66;
constexpr int margin_bottom = 70;
constexpr int font_scale = 2;  // 10x14-pixel glyphs (18 with descenders), 12 pixels apart
constexpr int line_h = 22;     // one line of text at font_scale
constexpr int dash_px = 8;

struct Style {
  Colour colour;
  int dash;  // 0: solid
  std::string label;
};

struct Axes {
  int left, top, right, bottom;  // plot area
  double xmin, xmax, ymin, ymax;
  bool logx, logy;

  double px(double x) const {
    const double f =
        logx ? (std::log10(x) - std::log10(xmin)) / (std::log10(xmax) - std::log10(xmin))
             : (x - xmin) / (xmax - xmin);
    return left + f * (right - left);
  }
  double py(double y) const {
    const double f =
        logy ? (std::log10(y) - std::log10(ymin)) / (std::log10(ymax) - std::log10(ymin))
             : (y - ymin) / (ymax - ymin);
    return bottom - f * (bottom - top);
  }
};

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// 1 us .. 100 ms, as a latency axis label.
std::string time_label(double us) {
  if (us >= 1000) return fmt("%g ms", us / 1000);
  return fmt("%g us", us);
}

std::string bytes_label(double b) {
  if (b >= (1ull << 30)) return fmt("%g GiB", b / (1ull << 30));
  if (b >= (1 << 20)) return fmt("%g MiB", b / (1 << 20));
  if (b >= 1024) return fmt("%g KiB", b / 1024);
  return fmt("%g B", b);
}

std::string rate_label(double r) {
  if (r >= 1e6) return fmt("%.3gM", r / 1e6);
  if (r >= 1e3) return fmt("%.3gk", r / 1e3);
  return fmt("%.3g", r);
}

// A panel's frame: title, optional subtitle, grid, ticks, axis labels.
void draw_frame(Canvas& c, const Axes& a, int panel_x, int panel_y, const std::string& title,
                const std::string& subtitle, const std::vector<std::pair<double, std::string>>& xt,
                const std::vector<std::pair<double, std::string>>& yt, const std::string& xlabel,
                const std::string& ylabel) {
  c.text(panel_x + 20, panel_y + 12, title, font_scale, black);
  if (!subtitle.empty())
    c.text(panel_x + 20, panel_y + 12 + line_h + 4, subtitle, font_scale, grey);
  for (const auto& [v, label] : xt) {
    const int x = static_cast<int>(std::lround(a.px(v)));
    c.line(x, a.top, x, a.bottom, light_grey);
    c.line(x, a.bottom, x, a.bottom + 6, black);
    c.text(x - Canvas::text_width(label, font_scale) / 2, a.bottom + 12, label, font_scale, black);
  }
  for (const auto& [v, label] : yt) {
    const int y = static_cast<int>(std::lround(a.py(v)));
    c.line(a.left, y, a.right, y, light_grey);
    c.line(a.left - 6, y, a.left, y, black);
    c.text(a.left - 10 - Canvas::text_width(label, font_scale), y - 7, label, font_scale, black);
  }
  c.line(a.left, a.top, a.right, a.top, black);
  c.line(a.left, a.bottom, a.right, a.bottom, black);
  c.line(a.left, a.top, a.left, a.bottom, black);
  c.line(a.right, a.top, a.right, a.bottom, black);
  c.text((a.left + a.right - Canvas::text_width(xlabel, font_scale)) / 2, a.bottom + 40, xlabel,
         font_scale, black);
  c.text_up(panel_x + 14, (a.top + a.bottom + Canvas::text_width(ylabel, font_scale)) / 2, ylabel,
            font_scale, black);
}

// The legend in a corner of the plot area: bottom right, or top left.
void draw_legend(Canvas& c, const Axes& a, const std::vector<Style>& entries, bool bottom_right) {
  int widest = 0;
  for (const auto& e : entries) widest = std::max(widest, Canvas::text_width(e.label, font_scale));
  const int w = 50 + widest + 16;
  const int h = static_cast<int>(entries.size()) * (line_h + 4) + 12;
  const int x = bottom_right ? a.right - w - 8 : a.left + 8;
  const int y = bottom_right ? a.bottom - h - 8 : a.top + 8;
  c.fill(x, y, x + w, y + h, white);
  c.line(x, y, x + w, y, grey);
  c.line(x, y + h, x + w, y + h, grey);
  c.line(x, y, x, y + h, grey);
  c.line(x + w, y, x + w, y + h, grey);
  int ly = y + 8;
  for (const auto& e : entries) {
    c.line(x + 8, ly + 7, x + 42, ly + 7, e.colour, 3, e.dash);
    c.text(x + 50, ly, e.label, font_scale, black);
    ly += line_h + 4;
  }
}

void polyline(Canvas& c, const Axes& a, const std::vector<std::pair<double, double>>& pts,
              const Style& s, bool markers) {
  for (std::size_t i = 1; i < pts.size(); ++i) {
    c.line(a.px(pts[i - 1].first), a.py(pts[i - 1].second), a.px(pts[i].first), a.py(pts[i].second),
           s.colour, 3, s.dash);
  }
  if (markers) {
    for (const auto& [x, y] : pts) {
      const int px = static_cast<int>(std::lround(a.px(x)));
      const int py = static_cast<int>(std::lround(a.py(y)));
      c.fill(px - 4, py - 4, px + 4, py + 4, s.colour);
    }
  }
}

Axes plot_area(int panel_x, int panel_y) {
  return {panel_x + margin_left,
          panel_y + margin_top,
          panel_x + panel_w - margin_right,
          panel_y + panel_h - margin_bottom,
          0,
          1,
          0,
          1,
          false,
          false};
}

const json* find_scenario(const json& results, const std::string& id) {
  for (const auto& s : results["scenarios"]) {
    if (s["id"] == id) return &s;
  }
  return nullptr;
}

// A scenario's result in one placement, if it ran there and has statistics.
const json* result_of(const json& results, const std::string& id, const std::string& placement) {
  const json* s = find_scenario(results, id);
  if (s == nullptr || !s->contains("results") || !(*s)["results"].contains(placement)) {
    return nullptr;
  }
  const json& r = (*s)["results"][placement];
  if (r.contains("error")) return nullptr;
  return &r;
}

void no_data(Canvas& c, const Axes& a, const std::string& why) {
  c.text(a.left + 20, (a.top + a.bottom) / 2, why, font_scale, red);
}

void latency_panel(Canvas& c, const json& results, const std::string& placement, int px, int py,
                   const std::string& title) {
  const std::vector<std::pair<std::string, Style>> series = {
      {"rig.host.empty", {blue, 0, "rig, 1 thread"}},
      {"rig.host.empty.threads2", {green, 0, "rig, 2 threads"}},
      {"rig.host.empty.threads4", {purple, 0, "rig, 4 threads"}},
      {"rig.sim.copy64", {teal, 0, "rig, 64 B copy to SIM"}},
      {"rig.sim.run", {brown, 0, "rig, empty run on SIM"}},
      {"rig.agent.completion.wakeup", {red, 0, "rig, 64 B copy, agent wakes"}},
      {"tcp.pingpong.blocking", {black, dash_px, "TCP blocking"}},
      {"tcp.pingpong.spinning", {orange, dash_px, "TCP spinning"}},
  };
  Axes a = plot_area(px, py);
  double lo = 1e300, hi = 0;
  std::vector<std::pair<const json*, Style>> have;
  for (const auto& [id, style] : series) {
    const json* r = result_of(results, id, placement);
    if (r == nullptr || !r->contains("cdf") || (*r)["cdf"].empty()) continue;
    lo = std::min(lo, (*r)["cdf"].front()[0].get<double>());
    hi = std::max(hi, (*r)["cdf"].back()[0].get<double>());
    have.emplace_back(r, style);
  }
  std::string subtitle;
  const json* rig = result_of(results, "rig.host.empty", placement);
  const json* tcp = result_of(results, "tcp.pingpong.blocking", placement);
  if (rig != nullptr && tcp != nullptr && rig->contains("stats") && tcp->contains("stats")) {
    const double r50 = (*rig)["stats"]["p50"], t50 = (*tcp)["stats"]["p50"];
    subtitle = "p50: rig " + time_label(std::round(r50 * 10) / 10) + ", TCP blocking " +
               time_label(std::round(t50 * 10) / 10) + ": " + fmt("%.2fx", r50 / t50);
  }
  if (have.empty()) {
    draw_frame(c, a, px, py, title, subtitle, {}, {}, "latency", "fraction");
    no_data(c, a, "no latency data for " + placement);
    return;
  }
  a.logx = true;
  a.xmin = std::pow(10.0, std::floor(std::log10(std::max(lo, 0.1))));
  a.xmax = std::pow(10.0, std::ceil(std::log10(hi)));
  if (a.xmax <= a.xmin) a.xmax = a.xmin * 10;
  std::vector<std::pair<double, std::string>> xt, yt;
  for (double v = a.xmin; v <= a.xmax * 1.0001; v *= 10) xt.emplace_back(v, time_label(v));
  for (int i = 0; i <= 4; ++i) yt.emplace_back(i * 0.25, fmt("%.2f", i * 0.25));
  draw_frame(c, a, px, py, title, subtitle, xt, yt,
             "submit-to-reached / round-trip time (log scale)", "fraction of samples");
  std::vector<Style> legend;
  for (const auto& [r, style] : have) {
    std::vector<std::pair<double, double>> pts;
    for (const auto& p : (*r)["cdf"]) pts.emplace_back(p[0].get<double>(), p[1].get<double>());
    polyline(c, a, pts, style, false);
    legend.push_back(style);
  }
  draw_legend(c, a, legend, true);
}

void throughput_panel(Canvas& c, const json& results, int px, int py) {
  Axes a = plot_area(px, py);
  std::vector<std::pair<std::vector<std::pair<double, double>>, Style>> series;
  auto add = [&](const std::string& id, const std::string& placement, Style s) {
    const json* r = result_of(results, id, placement);
    if (r == nullptr || !r->contains("points")) return;
    std::vector<std::pair<double, double>> pts;
    for (const auto& p : (*r)["points"]) {
      pts.emplace_back(p["bytes"].get<double>(), p["stats"]["p50"].get<double>());
    }
    series.emplace_back(pts, s);
  };
  add("tcp.stream", "same-core", {black, dash_px, "TCP stream, same core"});
  add("tcp.stream", "cross-core", {orange, dash_px, "TCP stream, cross core"});
  add("tcp.stream", "given", {black, dash_px, "TCP stream"});
  add("memcpy", "unpinned", {brown, 3, "memcpy"});
  add("rig.copy.to_remote.sim", "same-core", {blue, 0, "rig to SIM, same core"});
  add("rig.copy.from_remote.sim", "same-core", {green, 0, "rig from SIM, same core"});
  add("rig.copy.to_remote.sim", "cross-core", {teal, 0, "rig to SIM, cross core"});
  add("rig.copy.from_remote.sim", "cross-core", {purple, 0, "rig from SIM, cross core"});
  add("rig.copy.to_remote.sim", "given", {blue, 0, "rig to SIM"});
  add("rig.copy.from_remote.sim", "given", {green, 0, "rig from SIM"});
  const std::string subtitle = "rig: a copy to or from remote SIM, and its wait (to host: JSON)";
  if (series.empty()) {
    draw_frame(c, a, px, py, "Throughput against transfer size (p50)", subtitle, {}, {}, "bytes",
               "GB/s");
    no_data(c, a, "no throughput data");
    return;
  }
  double xlo = 1e300, xhi = 0, yhi = 0;
  for (const auto& [pts, s] : series) {
    for (const auto& [x, y] : pts) {
      xlo = std::min(xlo, x);
      xhi = std::max(xhi, x);
      yhi = std::max(yhi, y);
    }
  }
  double ylo = 1e300;
  for (const auto& [pts, s] : series) {
    for (const auto& [x, y] : pts) ylo = std::min(ylo, y);
  }
  a.logx = true;
  a.xmin = xlo / 2;
  a.xmax = xhi * 2;
  // memcpy runs an order of magnitude above TCP: a log axis keeps both readable.
  a.logy = true;
  a.ymin = std::pow(10.0, std::floor(std::log10(std::max(ylo, 1e-3))));
  a.ymax = std::pow(10.0, std::ceil(std::log10(yhi)));
  if (a.ymax <= a.ymin) a.ymax = a.ymin * 10;
  std::vector<std::pair<double, std::string>> xt, yt;
  for (double x = xlo; x <= xhi * 1.0001; x *= 16) xt.emplace_back(x, bytes_label(x));
  for (double y = a.ymin; y <= a.ymax * 1.0001; y *= 10) yt.emplace_back(y, fmt("%g", y));
  draw_frame(c, a, px, py, "Throughput against transfer size (p50)", subtitle, xt, yt,
             "bytes per transfer (log scale)", "GB/s (log scale)");
  std::vector<Style> legend;
  for (const auto& [pts, s] : series) {
    polyline(c, a, pts, s, true);
    legend.push_back(s);
  }
  draw_legend(c, a, legend, true);
}

void rates_panel(Canvas& c, const json& results, int px, int py) {
  // Horizontal bars: one row per measure, one bar per placement.
  const std::vector<std::pair<std::string, std::string>> measures = {
      {"rig.host.empty", "rig, 1 thread"},           {"rig.host.empty.threads2", "rig, 2 threads"},
      {"rig.host.empty.threads4", "rig, 4 threads"}, {"rig.host.pipeline", "rig, pipelined"},
      {"tcp.pingpong.blocking", "TCP ping-pong"},    {"tcp.pipeline", "TCP, pipelined"},
  };
  const std::vector<Colour> placement_colours = {blue, orange, green};
  auto rate = [&](const std::string& id, const std::string& placement) -> double {
    const json* r = result_of(results, id, placement);
    if (r == nullptr || !r->contains("stats")) return 0;
    if ((*r)["unit"] == "ops/s") return (*r)["stats"]["p50"];
    if (r->contains("ops_per_s")) return (*r)["ops_per_s"];
    return 1e6 / (*r)["stats"]["mean"].get<double>();  // one loop: 1 / mean latency
  };
  std::vector<std::string> placements;
  for (const auto& p : results["placements"]) placements.push_back(p["name"]);
  double hi = 0;
  for (const auto& [id, label] : measures) {
    for (const auto& p : placements) hi = std::max(hi, rate(id, p));
  }
  Axes a = plot_area(px, py);
  a.left = px + 190;
  const std::string title = "Small operations per second";
  const std::string subtitle =
      "pipelined: " + std::to_string(results["run"]["plan"]["window"].get<int>()) +
      " in flight; loops: 1/mean latency";
  if (hi <= 0) {
    draw_frame(c, a, px, py, title, subtitle, {}, {}, "operations per second", "");
    no_data(c, a, "no rate data");
    return;
  }
  double lo = hi;
  for (const auto& [id, label] : measures) {
    for (const auto& p : placements) {
      if (const double v = rate(id, p); v > 0) lo = std::min(lo, v);
    }
  }
  // Rates span three orders of magnitude between placements: a log axis, bars from its left end.
  a.logx = true;
  a.xmin = std::pow(10.0, std::floor(std::log10(lo)));
  a.xmax = std::pow(10.0, std::ceil(std::log10(hi * 3)));
  std::vector<std::pair<double, std::string>> xt;
  for (double x = a.xmin; x <= a.xmax * 1.0001; x *= 10) xt.emplace_back(x, rate_label(x));
  draw_frame(c, a, px, py, title, subtitle, xt, {}, "operations per second (log scale)", "");
  const double row_h = static_cast<double>(a.bottom - a.top) / static_cast<double>(measures.size());
  const int bar_h = std::max(4, static_cast<int>(row_h - 12) / static_cast<int>(placements.size()));
  for (std::size_t m = 0; m < measures.size(); ++m) {
    const int row_top = a.top + static_cast<int>(m * row_h) + 6;
    c.text(px + 20, row_top + static_cast<int>(row_h) / 2 - 12, measures[m].second, font_scale,
           black);
    for (std::size_t p = 0; p < placements.size(); ++p) {
      const double v = rate(measures[m].first, placements[p]);
      if (v <= 0) continue;
      const int y0 = row_top + static_cast<int>(p) * bar_h;
      const int x1 = static_cast<int>(std::lround(a.px(v)));
      const Colour col = placement_colours[p % placement_colours.size()];
      c.fill(a.left + 1, y0, x1, y0 + bar_h - 3, col);
      c.text(x1 + 6, y0 + (bar_h - 3) / 2 - 7, rate_label(v), font_scale, black);
    }
  }
  // The legend goes in the title row: any corner of the plot may hold a long bar.
  int lx = px + panel_w - margin_right;
  for (std::size_t p = placements.size(); p-- > 0;) {
    lx -= Canvas::text_width(placements[p], font_scale) + 40;
    c.fill(lx, py + 14, lx + 24, py + 26, placement_colours[p % placement_colours.size()]);
    c.text(lx + 30, py + 12, placements[p], font_scale, black);
  }
}

void scale_panel(Canvas& c, const json& results, int px, int py) {
  Axes a = plot_area(px, py);
  const json* r = result_of(results, "rig.scale", "unpinned");
  const std::string title = "Scale: job start time against agents";
  if (r == nullptr || !r->contains("points") || (*r)["points"].empty()) {
    draw_frame(c, a, px, py, title, "", {}, {}, "agents", "ms");
    no_data(c, a, "no scale data");
    return;
  }
  std::vector<std::pair<double, double>> p50, mx, mn;
  double hi = 0;
  for (const auto& p : (*r)["points"]) {
    const double n = p["agents"];
    p50.emplace_back(n, p["job_start_ms"]["p50"].get<double>());
    mn.emplace_back(n, p["job_start_ms"]["min"].get<double>());
    mx.emplace_back(n, p["job_start_ms"]["max"].get<double>());
    hi = std::max(hi, p["job_start_ms"]["max"].get<double>());
  }
  a.logx = true;
  a.xmin = 0.7;
  a.xmax = p50.back().first * 1.5;
  const double mag = std::pow(10.0, std::floor(std::log10(std::max(hi, 1e-3))));
  const double step = hi / mag > 5 ? 2 * mag : (hi / mag > 2 ? mag : mag / 2);
  a.ymax = std::ceil(hi * 1.15 / step) * step;
  std::vector<std::pair<double, std::string>> xt, yt;
  for (const auto& [n, v] : p50) xt.emplace_back(n, fmt("%g", n));
  for (double y = 0; y <= a.ymax + 1e-9; y += step) yt.emplace_back(y, fmt("%g", y));
  draw_frame(c, a, px, py, title, "per-agent idle CPU and controller memory: table at right", xt,
             yt, "agents on loopback (log scale)", "job start, ms");
  for (std::size_t i = 0; i < p50.size(); ++i) {
    const double x = a.px(p50[i].first);
    c.line(x, a.py(mn[i].second), x, a.py(mx[i].second), grey, 2);
  }
  const Style s{blue, 0, "p50 (bars: min to max)"};
  polyline(c, a, p50, s, true);
  draw_legend(c, a, {s}, false);
}

std::vector<std::string> wrap(const std::string& text, std::size_t width) {
  std::vector<std::string> lines;
  std::string line;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      lines.push_back(line);
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    start = end + 1;
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

// Lines of text from (x, y) down, wrapped to `width` pixels; returns the y below them.
int paragraph(Canvas& c, int x, int y, int width, const std::string& text, Colour col) {
  const auto chars = static_cast<std::size_t>(width / (6 * font_scale));
  for (const auto& l : wrap(text, chars)) {
    c.text(x, y, l, font_scale, col);
    y += line_h;
  }
  return y;
}

void scale_table_panel(Canvas& c, const json& results, int px, int py) {
  int y = py + 12;
  c.text(px + 20, y, "Scale: what each agent costs", font_scale, black);
  y += line_h + 4;
  const json* r = result_of(results, "rig.scale", "unpinned");
  if (r == nullptr || !r->contains("points")) {
    c.text(px + 20, y + 40, "no scale data", font_scale, red);
    return;
  }
  y = paragraph(c, px + 20, y, panel_w - 40,
                "idle CPU: one agent's job process, % of a core, over " +
                    fmt("%.1f", results["run"]["plan"]["idle_s"].get<double>()) +
                    " s with the job open and idle; memory: the controller's resident growth from "
                    "no job to an open one, per agent",
                grey);
  y += 10;
  c.text(px + 20, y, "agents  start p50  idle CPU  memory/agent  ctl CPU", font_scale, black);
  y += line_h;
  c.line(px + 20, y - 4, px + panel_w - 40, y - 4, grey);
  for (const auto& p : (*r)["points"]) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%6d  %6.1f ms  %6.3f %%  %8.0f KiB  %5.2f %%",
                  p["agents"].get<int>(), p["job_start_ms"]["p50"].get<double>(),
                  p.value("idle_cpu_per_agent_percent", 0.0),
                  p["controller_rss_per_agent_kib"].get<double>(),
                  p.value("controller_idle_cpu_percent", 0.0));
    c.text(px + 20, y, buf, font_scale, black);
    y += line_h;
  }
}

void facts_panel(Canvas& c, const json& results, int px, int py) {
  const int x = px + 20, width = image_w - 40;
  int y = py + 12;
  c.text(x, y, "Run facts", font_scale, black);
  y += line_h + 4;
  const json& m = results["machine"];
  const json& v = results["versions"];
  y = paragraph(
      c, x, y, width,
      "machine " + m["name"].get<std::string>() + ": " + m["cpu_model"].get<std::string>() + ", " +
          std::to_string(m["cores"].get<int>()) + " cores, " + m["kernel"].get<std::string>() +
          ", " + m["os"].get<std::string>() + "; load average at start " +
          fmt("%.1f", results["run"]["load_average_start"][0].get<double>()) + "; rig " +
          v["rig"].get<std::string>() + " (" + v["git"].get<std::string>() + ", " +
          v["build"].get<std::string>() + "), libuv " + v["libuv"].get<std::string>() +
          ", libsodium " + v["libsodium"].get<std::string>(),
      black);
  const json& plan = results["run"]["plan"];
  const json& clock = results["clock"];
  std::string cl = "clock: two back-to-back steady_clock reads p50 " +
                   fmt("%.0f", clock["steady_clock_ns"]["p50"].get<double>()) + " ns";
  if (clock.contains("rdtsc_ns") && !clock["rdtsc_ns"].is_null()) {
    cl += ", rdtsc p50 " + fmt("%.0f", clock["rdtsc_ns"]["p50"].get<double>()) + " ns";
  }
  y = paragraph(
      c, x, y, width,
      std::string(results["run"]["quick"].get<bool>() ? "QUICK RUN (counts reduced): " : "") +
          std::to_string(plan["samples"].get<long>()) +
          " samples per latency measurement after up to " +
          std::to_string(plan["warmup"].get<long>()) + " warm-up operations (excluded); " + cl +
          ", inside every sample and not subtracted",
      black);
  for (const auto& p : results["placements"]) {
    y = paragraph(c, x, y, width,
                  "placement " + p["name"].get<std::string>() + ": " +
                      p["what"].get<std::string>() + " (controller CPU " +
                      std::to_string(p["controller_cpu"].get<int>()) + ", agent CPU " +
                      std::to_string(p["agent_cpu"].get<int>()) + ")",
                  black);
  }
  y += 8;
  // Skipped scenarios, grouped by reason.
  std::vector<std::pair<std::string, std::string>> groups;
  for (const auto& s : results["scenarios"]) {
    if (s["status"] == "ran") continue;
    const std::string why = s["reason"];
    auto g = std::find_if(groups.begin(), groups.end(), [&](auto& e) { return e.first == why; });
    if (g == groups.end()) {
      groups.emplace_back(why, s["id"]);
    } else {
      g->second += ", " + s["id"].get<std::string>();
    }
  }
  for (const auto& [why, ids] : groups) {
    y = paragraph(c, x, y, width, "not measured: " + ids + ": " + why, grey);
  }
}

}  // namespace

void write_report(const json& results, const std::string& png_path) {
  Canvas c(image_w, image_h);
  std::string heading = "rig-bench: " + results["machine"]["name"].get<std::string>() + ", " +
                        results["run"]["date"].get<std::string>() + ", rig " +
                        results["versions"]["rig"].get<std::string>() + " (" +
                        results["versions"]["git"].get<std::string>() + ")";
  c.text(20, 14, heading, 3, black);
  const int row0 = heading_h, row1 = heading_h + panel_h, row2 = heading_h + 2 * panel_h;
  const int row3 = heading_h + 3 * panel_h;
  latency_panel(c, results, "same-core", 0, row0, "Latency CDF: both ends on one core");
  latency_panel(c, results, results["placements"].size() > 1 ? "cross-core" : "given", panel_w,
                row0,
                results["placements"].size() > 1 ? "Latency CDF: ends on different cores"
                                                 : "Latency CDF: given hosts");
  throughput_panel(c, results, 0, row1);
  rates_panel(c, results, panel_w, row1);
  scale_panel(c, results, 0, row2);
  scale_table_panel(c, results, panel_w, row2);
  facts_panel(c, results, 0, row3);
  // Thin rules between the panels.
  for (int y : {row1, row2, row3}) c.line(0, y, image_w, y, light_grey);
  c.line(panel_w, row0, panel_w, row3, light_grey);

  const auto png = encode_png(c);
  std::ofstream f(png_path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(png.data()), static_cast<std::streamsize>(png.size()));
  if (!f) throw std::runtime_error("cannot write " + png_path);
}

}  // namespace rig::bench
