// `memtrain report RUN_DIR`: the run's memory timeline and loss curve as one SVG picture; `memtrain report
// RUN_DIR RUN_DIR... --out FILE`: those runs' losses overlaid, for runs that differ in one setting.
#include <filesystem>

#include "cli/commands.h"
#include "core/error.h"
#include "memory/report.h"
#include "report/loss_comparison.h"
#include "report/run_report.h"
#include "train/metrics.h"

namespace mt::cli {

namespace {

// Steps the comparison's training losses are averaged over: per-step losses of a small batch jump by more
// than the differences the picture is for.
constexpr int kTrainLossWindow = 10;

void check_svg_name(const std::string& out) {
  if (!out.ends_with(".svg")) fail_usage("--out " + out + ": the report is drawn as SVG; name it *.svg");
}

void check_run_dir(const std::string& run_dir) {
  if (!std::filesystem::is_directory(run_dir)) fail_data(run_dir + ": no such run directory");
}

LossCurve read_run_losses(const std::string& run_dir) {
  LossCurve loss = read_loss_curve(run_dir + "/metrics.jsonl");
  if (loss.torn_line > 0)
    std::printf("%s/metrics.jsonl: skipped its torn last line %lld (a write cut short)\n", run_dir.c_str(),
                static_cast<long long>(loss.torn_line));
  return loss;
}

void report(const std::string& run_dir, std::string out) {
  check_run_dir(run_dir);
  if (out.empty()) out = run_dir + "/report.svg";
  check_svg_name(out);
  const std::string timeline_path = run_dir + "/memory_timeline.json";
  if (!std::filesystem::exists(timeline_path))
    fail_data(timeline_path + ": no memory timeline (train with --memory-timeline to record one)");
  const MemoryTimeline timeline = read_memory_timeline(timeline_path);
  if (timeline.points.empty()) fail_data(timeline_path + ": the timeline has no ops");
  const LossCurve loss = read_run_losses(run_dir);
  write_file_atomically(out, draw_run_report(timeline, loss));
  const TimelinePoint& peak = timeline.points[timeline.peak_point()];
  std::printf("wrote %s: %zu ops, peak %s during %s; %zu logged steps\n", out.c_str(), timeline.points.size(),
              human_bytes(peak.live.total()).c_str(), peak.name.c_str(), loss.train.size());
}

// The directory's own name: "runs/int8/" is int8.
std::string run_name(const std::string& run_dir) {
  std::filesystem::path path = std::filesystem::path(run_dir).lexically_normal();
  if (!path.has_filename()) path = path.parent_path();
  return path.filename().string();
}

// Each run is named in the legend by its directory's name; the first is the one the others are measured
// against.
void compare(const std::vector<std::string>& run_dirs, const std::string& out, std::string title) {
  if (out.empty())
    fail_usage("report of " + std::to_string(run_dirs.size()) + " runs: name the picture with --out");
  check_svg_name(out);
  std::vector<NamedLossCurve> runs;
  for (const std::string& dir : run_dirs) {
    check_run_dir(dir);
    runs.push_back({run_name(dir), read_run_losses(dir)});
  }
  if (title.empty()) title = "memtrain: the losses of " + std::to_string(runs.size()) + " runs";
  write_file_atomically(out, draw_loss_comparison(title, runs, kTrainLossWindow));
  std::printf("wrote %s: the losses of %zu runs against %s\n", out.c_str(), runs.size(),
              runs[0].name.c_str());
}

}  // namespace

void add_report_command(CLI::App& app) {
  auto run_dirs = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>();
  auto title = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("report",
                                     "draw a run's memory timeline (from train --memory-timeline) above its "
                                     "loss curve, as SVG; of several runs, "
                                     "their losses overlaid");
  cmd->add_option(
         "RUN_DIR", *run_dirs,
         "a train --out directory: memory_timeline.json and metrics.jsonl; several: their metrics.jsonl, "
         "the first the reference")
      ->required();
  cmd->add_option("--out", *out,
                  "the SVG file to write (default RUN_DIR/report.svg; required with several runs)");
  cmd->add_option("--title", *title, "the title of a picture of several runs");
  cmd->callback([run_dirs, out, title] {
    if (run_dirs->size() == 1) {
      if (!title->empty()) fail_usage("--title: only a report of several runs has one");
      report(run_dirs->front(), *out);
    } else {
      compare(*run_dirs, *out, *title);
    }
  });
}

}  // namespace mt::cli
