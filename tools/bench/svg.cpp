// kiln-bench's chart: the speedup over kiln eager per workload as horizontal bars on a log
// scale, one bar per variant or peer, starting at the 1x line. Plain SVG text, no libraries.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "bench.h"

namespace kiln::bench {

namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string num(double v, const char* format = "%.1f") {
  char buf[32];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string times_label(double v) {
  return num(v, v >= 100 ? "%.0fx" : v >= 10 ? "%.1fx" : v >= 0.1 ? "%.2fx" : "%.3fx");
}

// The ticks of the 1-2-5 series from 1/1000 to 1000.
std::vector<double> candidate_ticks() {
  std::vector<double> t;
  for (int e = -3; e <= 3; ++e)
    for (double m : {1.0, 2.0, 5.0}) t.push_back(m * std::pow(10.0, e));
  return t;
}

const char* kColors[] = {"#1f77b4", "#d62728", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf"};

}  // namespace

std::string speedup_svg(const std::string& title, const std::vector<std::string>& workloads,
                        const std::vector<Series>& series) {
  const double width = 960, left = 180, right = 70, top = 86, bar = 12, bar_gap = 2, group_pad = 10;
  const size_t nseries = std::max<size_t>(series.size(), 1);
  const double group = double(nseries) * (bar + bar_gap) + group_pad;
  const double plot_h = group * double(workloads.size());
  const double height = top + plot_h + 44;
  const double plot_w = width - left - right;

  // The axis range: every finite positive value and 1, widened to ticks, at least 0.5x..2x.
  double vmin = 1, vmax = 1;
  for (const Series& s : series)
    for (const auto& v : s.values)
      if (v && std::isfinite(*v) && *v > 0) vmin = std::min(vmin, *v), vmax = std::max(vmax, *v);
  std::vector<double> ticks = candidate_ticks();
  double lo = ticks.front(), hi = ticks.back();
  for (double t : ticks)
    if (t <= std::min(vmin / 1.15, 0.5)) lo = t;  // the largest tick below
  for (auto it = ticks.rbegin(); it != ticks.rend(); ++it)
    if (*it >= std::max(vmax * 1.15, 2.0)) hi = *it;  // the smallest tick above
  auto x = [&](double v) {
    v = std::clamp(v, lo, hi);
    return left + (std::log(v) - std::log(lo)) / (std::log(hi) - std::log(lo)) * plot_w;
  };

  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" viewBox=\"0 0 " << width << " " << height << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << width / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">"
    << escape(title) << "</text>\n";
  o << "<text x=\"" << width / 2 << "\" y=\"40\" text-anchor=\"middle\" fill=\"#555\">"
    << "speedup over kiln eager (log scale; right of the 1x line: faster than kiln eager)</text>\n";
  // legend
  double lx = left;
  for (size_t i = 0; i < series.size(); ++i) {
    o << "<rect x=\"" << lx << "\" y=\"50\" width=\"12\" height=\"12\" fill=\"" << kColors[i % 8] << "\"/>";
    o << "<text x=\"" << lx + 16 << "\" y=\"60\">" << escape(series[i].label) << "</text>\n";
    lx += 28 + 7.0 * double(series[i].label.size());
  }
  // grid and tick labels
  for (double t : ticks) {
    if (t < lo || t > hi) continue;
    const bool one = t == 1.0;
    o << "<line x1=\"" << num(x(t)) << "\" y1=\"" << top - 6 << "\" x2=\"" << num(x(t)) << "\" y2=\"" << top + plot_h
      << "\" stroke=\"" << (one ? "#000" : "#ddd") << "\" stroke-width=\"" << (one ? 1.5 : 1) << "\"/>\n";
    o << "<text x=\"" << num(x(t)) << "\" y=\"" << top + plot_h + 16 << "\" text-anchor=\"middle\">"
      << num(t, "%gx") << "</text>\n";
  }
  o << "<text x=\"" << num(x(1)) << "\" y=\"" << top + plot_h + 32 << "\" text-anchor=\"middle\" fill=\"#555\">"
    << "1x = kiln eager</text>\n";
  // groups
  for (size_t w = 0; w < workloads.size(); ++w) {
    const double gy = top + group * double(w);
    if (w % 2) o << "<rect x=\"0\" y=\"" << gy << "\" width=\"" << width << "\" height=\"" << group
                 << "\" fill=\"#f4f4f4\"/>\n";
    o << "<text x=\"" << left - 8 << "\" y=\"" << num(gy + group / 2 + 4) << "\" text-anchor=\"end\">"
      << escape(workloads[w]) << "</text>\n";
    for (size_t i = 0; i < series.size(); ++i) {
      const double y = gy + group_pad / 2 + double(i) * (bar + bar_gap);
      const std::optional<double> v = w < series[i].values.size() ? series[i].values[w] : std::nullopt;
      if (!v || !std::isfinite(*v) || *v <= 0) {
        o << "<text x=\"" << num(x(1) + 4) << "\" y=\"" << y + bar - 2 << "\" fill=\"#999\">n/a</text>\n";
        continue;
      }
      const double x0 = std::min(x(1), x(*v)), x1 = std::max(x(1), x(*v));
      o << "<rect x=\"" << num(x0) << "\" y=\"" << y << "\" width=\"" << num(std::max(x1 - x0, 1.0)) << "\" height=\""
        << bar << "\" fill=\"" << kColors[i % 8] << "\"><title>" << escape(series[i].label) << ": "
        << times_label(*v) << "</title></rect>\n";
      const bool faster = *v >= 1;
      o << "<text x=\"" << num(faster ? x1 + 3 : x0 - 3) << "\" y=\"" << y + bar - 2 << "\" text-anchor=\""
        << (faster ? "start" : "end") << "\">" << times_label(*v) << "</text>\n";
    }
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace kiln::bench
