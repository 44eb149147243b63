// memtrain: the command line. Each subcommand lives in its own file; errors become one line and an exit code.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"memtrain: train GPT-2 and LLaMA-style transformers in as little memory as possible"};
  app.require_subcommand(1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : static_cast<int>(mt::ErrorKind::usage);
  }
  return 0;
}
