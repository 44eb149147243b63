// memtrain: the command line. Each subcommand lives in its own file; every failure becomes one line on stderr
// and an exit code: 2 for flags and configuration, 1 for data and files, 3 for a plan that does not fit.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <new>
#include <stdexcept>

#include "cli/commands.h"
#include "core/error.h"
#include "core/int_math.h"
#include "core/warning.h"
#include "devices/devices.h"

int main(int argc, char** argv) {
  CLI::App app{"memtrain: train GPT-2 and LLaMA-style transformers in as little memory as possible"};
  app.require_subcommand(1);
  try {
    // The devices' own set-up (the CPU kernels' level, oneDNN capped to it) before anything reads it (the
    // commands' defaults do) or any product runs; a bad MEMTRAIN_MAX_ISA is a usage error before any work.
    mt::init_devices();
    mt::cli::add_train_command(app);
    mt::cli::add_estimate_command(app);
    mt::cli::add_prepare_command(app);
    mt::cli::add_tokenize_command(app);
    mt::cli::add_report_command(app);
    mt::cli::add_checkpoint_commands(app);
    mt::cli::add_plan_command(app);
    mt::cli::add_calibrate_command(app);
    mt::cli::add_chat_template_command(app);
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Every rank of a job parses the same command line: one of them says what is wrong with it.
    if (!mt::command_line_reported_by_rank_zero())
      std::fprintf(stderr, "memtrain: error: %s (see --help)\n", e.what());
    return static_cast<int>(mt::ErrorKind::usage);
  } catch (const mt::ReportedElsewhere& e) {
    return e.exit_code();
  } catch (const mt::Error& e) {
    mt::print_error(e.what());
    return e.exit_code();
  } catch (const mt::SizeOverflow& e) {
    // A size no check named the flags of (layout/run_layout.cpp names them for the plan's).
    std::fprintf(stderr, "memtrain: error: %s: lower --micro-batch-size or --seq-length\n", e.what());
    return static_cast<int>(mt::ErrorKind::usage);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "memtrain: error: out of memory\n");
    return static_cast<int>(mt::ErrorKind::no_fit);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memtrain: internal error: %s\n", e.what());
    return 70;
  }
  return 0;
}
