// The subcommands of the memtrain binary, each registered on the top-level CLI11 app by its own file.
#pragma once

#include <CLI/CLI.hpp>

namespace mt::cli {

void add_train_command(CLI::App& app);
void add_estimate_command(CLI::App& app);
void add_prepare_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_checkpoint_commands(CLI::App& app);  // inspect, export
void add_plan_command(CLI::App& app);
void add_calibrate_command(CLI::App& app);
void add_chat_template_command(CLI::App& app);

}  // namespace mt::cli
