// The --plot PNG: gnuplot data and script beside it (FILE.png.dat, .gp), two
// rows of panels (runs/s, resume p99 against C), one column per latency.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "contenders.hpp"
#include "report.hpp"

namespace bench {
namespace {

// One gnuplot data block: the cells of one (latency, contender).
struct plot_block {
  long latency;
  std::string contender;
  bool has_p99;
  // The block's lowest and highest y in each row (runs/s, p99); NaN: none.
  double lo[2] = {NAN, NAN}, hi[2] = {NAN, NAN};
};

// Widens [lo, hi] to hold v (NaN ignored).
void widen(double& lo, double& hi, double v) {
  if (std::isnan(v)) return;
  lo = std::isnan(lo) ? v : std::min(lo, v);
  hi = std::isnan(hi) ? v : std::max(hi, v);
}

bool have_gnuplot() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

// Reports a file of the plot that could not be written, as --json does;
// always false. Called with errno from the failed call.
bool cannot_write(const std::string& path) {
  std::fprintf(stderr, "xrtio-bench: --plot: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
  return false;
}

// Closes f; false (reported) if a write to it or the close failed, a full
// disk for one: gnuplot would otherwise plot what part of it was written.
bool close_written(FILE* f, const std::string& path) {
  bool write_failed = std::ferror(f);
  int write_errno = errno;  // a failed write's, if one failed
  if (std::fclose(f) != 0) return cannot_write(path);
  if (!write_failed) return true;
  errno = write_errno ? write_errno : EIO;
  return cannot_write(path);
}

// Writes the data file, one block per (latency, contender) separated by two
// blank lines; the blocks in file order, or nullopt (reported) if it cannot
// be written.
std::optional<std::vector<plot_block>> write_plot_data(const std::string& dat, const std::vector<cell>& cells,
                                                       const std::vector<long>& lats,
                                                       const std::vector<std::string>& names) {
  FILE* d = std::fopen(dat.c_str(), "w");
  if (!d) {
    cannot_write(dat);
    return std::nullopt;
  }
  std::vector<plot_block> blocks;
  for (long l : lats)
    for (auto& n : names) {
      bool any = false, p99 = false;
      plot_block block{l, n, false};
      for (auto& c : cells)
        if (c.latency_us == l && c.contender == n && !c.reps.empty()) {
          // Two blank lines between blocks (gnuplot's `index`), none after
          // the last: the data file stays free of trailing blank lines.
          if (!any && !blocks.empty()) std::fprintf(d, "\n\n");
          std::fprintf(d, "%d %s %s\n", c.c, jnum(c.med.runs_per_s).c_str(),
                       std::isnan(c.med.p99) ? "NaN" : jnum(c.med.p99).c_str());
          any = true;
          p99 = p99 || !std::isnan(c.med.p99);
          widen(block.lo[0], block.hi[0], c.med.runs_per_s);
          widen(block.lo[1], block.hi[1], c.med.p99);
        }
      if (!any) continue;
      block.has_p99 = p99;
      blocks.push_back(block);
    }
  if (!close_written(d, dat)) return std::nullopt;
  return blocks;
}

// One panel: row 0 runs/s, row 1 resume p99, for latency l (negative: the
// XRT no-op device with delay -1 - l).
void write_panel(FILE* g, int row, long l, const std::string& dat, const std::vector<plot_block>& blocks,
                 const std::vector<std::string>& names) {
  static const char* styles[] = {"lc rgb '#d62728' lw 2 pt 7",  "lc rgb '#1f77b4' lw 2 pt 5",
                                 "lc rgb '#2ca02c' lw 2 pt 9",  "lc rgb '#9467bd' lw 2 pt 11",
                                 "lc rgb '#ff7f0e' lw 2 pt 13", "lc rgb '#8c564b' lw 2 pt 3"};
  if (l >= 0)
    std::fprintf(g, "set title 'sim, L = %ld us: %s'\n", l, row == 0 ? "runs per second" : "resume p99");
  else
    std::fprintf(g, "set title 'XRT no-op device (delay %ld us): %s'\n", -1 - l,
                 row == 0 ? "runs per second" : "resume p99");
  // One y value in the panel (one point, or equal ones): gnuplot would warn
  // of an empty y range; a factor of ten either side (the axis is log, and
  // a decade holds a labelled tic).
  double lo = NAN, hi = NAN;
  for (auto& b : blocks)
    if (b.latency == l) {
      widen(lo, hi, b.lo[row]);
      widen(lo, hi, b.hi[row]);
    }
  if (!std::isnan(lo) && lo == hi && lo > 0) std::fprintf(g, "set yrange [%g:%g]\n", lo / 10, hi * 10);
  else std::fprintf(g, "set autoscale y\n");
  std::fprintf(g, "set ylabel '%s'\nplot ", row == 0 ? "runs/s" : "p99 us");
  bool first = true;
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    if (blocks[b].latency != l || (row == 1 && !blocks[b].has_p99)) continue;
    std::size_t ni = std::size_t(std::find(names.begin(), names.end(), blocks[b].contender) - names.begin());
    std::fprintf(g, "%s'%s' index %zu using 1:%d with linespoints %s title '%s'", first ? "" : ", ", dat.c_str(), b,
                 row == 0 ? 2 : 3, styles[ni % 6], blocks[b].contender.c_str());
    first = false;
  }
  if (first) std::fprintf(g, "NaN notitle");
  std::fprintf(g, "\n");
}

// False (reported) if the script cannot be written.
bool write_plot_script(const std::string& gp, const std::string& png, const std::string& dat,
                       const std::vector<long>& lats, const std::vector<std::string>& names,
                       const std::vector<plot_block>& blocks, int min_c, int max_c) {
  FILE* g = std::fopen(gp.c_str(), "w");
  if (!g) return cannot_write(gp);
  int cols = int(lats.size());
  std::fprintf(g,
               "set terminal pngcairo size %d,900 font ',10'\nset output '%s'\n"
               "set multiplot layout 2,%d title 'xrtio-bench: throughput and completion-to-resume p99 vs runs in "
               "flight (medians)'\n"
               "set termoption noenhanced\nset logscale x 4\nset logscale y\nset grid\nset key top left font ',8'\nset datafile missing 'NaN'\n"
               "set xlabel 'runs in flight C'\n",
               std::max(700, 480 * cols), png.c_str(), cols);
  // One runs-in-flight value: gnuplot would warn of an empty x range and
  // pick one itself; a factor of two either side keeps the point centred.
  if (min_c == max_c) std::fprintf(g, "set xrange [%g:%g]\n", min_c / 2.0, max_c * 2.0);
  for (int row = 0; row < 2; ++row)
    for (long l : lats) write_panel(g, row, l, dat, blocks, names);
  std::fprintf(g, "unset multiplot\n");
  return close_written(g, gp);
}

// False (reported on stderr) if gnuplot was there and the PNG was not
// written: the plot asked for is missing, as an unwritable --json is. Without
// gnuplot the plot is skipped with a message on stdout, as documented
// (docs/PERFORMANCE.md): it is an optional tool.
bool write_plot(const std::string& png, const std::vector<cell>& cells, const std::vector<long>& lats,
                const std::vector<std::string>& names) {
  if (!have_gnuplot()) {
    std::printf("--plot: gnuplot not found (Debian package gnuplot-nox): %s not written\n", png.c_str());
    return true;
  }
  std::string dat = png + ".dat", gp = png + ".gp";
  auto blocks = write_plot_data(dat, cells, lats, names);
  int min_c = 0, max_c = 0;
  for (auto& c : cells)
    if (!c.reps.empty()) {
      min_c = min_c == 0 ? c.c : std::min(min_c, c.c);
      max_c = std::max(max_c, c.c);
    }
  if (!blocks || !write_plot_script(gp, png, dat, lats, names, *blocks, min_c, max_c)) return false;
  std::string cmd = "gnuplot '" + gp + "'";
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "xrtio-bench: --plot: gnuplot failed on %s: %s not written\n", gp.c_str(), png.c_str());
    return false;
  }
  std::printf("plot written: %s\n", png.c_str());
  return true;
}

}  // namespace

bool plot_sweep(const std::string& png, std::vector<cell> cells, const options& o, bool xrt) {
  std::vector<long> plot_lats = o.lats;
  std::vector<std::string> names;
  for (auto& n : o.contenders)
    if (!is_xrt_contender(n)) names.push_back(n);
  if (xrt) {
    // XRT cells share latency_us with a sim latency possibly: plot them in
    // their own panel, at latency -1 - delay.
    plot_lats.push_back(-1 - o.xrt_delay_us);
    for (auto& n : o.contenders)
      if (is_xrt_contender(n)) names.push_back(n);
    for (auto& c : cells)
      if (is_xrt_contender(c.contender)) c.latency_us = -1 - c.latency_us;
  }
  return write_plot(png, cells, plot_lats, names);
}

}  // namespace bench
