// `memtrain report RUN_DIR`: the run's memory timeline and loss curve as one SVG picture.
#include <filesystem>

#include "cli/commands.h"
#include "core/error.h"
#include "memory/report.h"
#include "report/run_report.h"
#include "train/metrics.h"

namespace mt::cli {

namespace {

void report(const std::string& run_dir, std::string out) {
  if (!std::filesystem::is_directory(run_dir)) fail_data(run_dir + ": no such run directory");
  if (out.empty()) out = run_dir + "/report.svg";
  if (!out.ends_with(".svg")) fail_usage("--out " + out + ": the report is drawn as SVG; name it *.svg");
  const std::string timeline_path = run_dir + "/memory_timeline.json";
  if (!std::filesystem::exists(timeline_path))
    fail_data(timeline_path + ": no memory timeline (train with --memory-timeline to record one)");
  const MemoryTimeline timeline = read_memory_timeline(timeline_path);
  if (timeline.points.empty()) fail_data(timeline_path + ": the timeline has no ops");
  const LossCurve loss = read_loss_curve(run_dir + "/metrics.jsonl");
  if (loss.torn_line > 0)
    std::printf("%s/metrics.jsonl: skipped its torn last line %lld (a write cut short)\n", run_dir.c_str(),
                static_cast<long long>(loss.torn_line));
  write_file_atomically(out, draw_run_report(timeline, loss));
  const TimelinePoint& peak = timeline.points[timeline.peak_point()];
  std::printf("wrote %s: %zu ops, peak %s during %s; %zu logged steps\n", out.c_str(), timeline.points.size(),
              human_bytes(peak.live.total()).c_str(), peak.name.c_str(), loss.train.size());
}

}  // namespace

void add_report_command(CLI::App& app) {
  auto run_dir = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "report", "draw a run's memory timeline (from train --memory-timeline) above its loss curve, as SVG");
  cmd->add_option("RUN_DIR", *run_dir, "a train --out directory: memory_timeline.json and metrics.jsonl")
      ->required();
  cmd->add_option("--out", *out, "the SVG file to write (default RUN_DIR/report.svg)");
  cmd->callback([run_dir, out] { report(*run_dir, *out); });
}

}  // namespace mt::cli
