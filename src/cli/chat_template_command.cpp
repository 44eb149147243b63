// `memtrain chat-template RECORDS.jsonl --chat-template FILE`: each chat record rendered through a model's
// chat template, one JSON object a line: the text and its assistant spans (what prepare's loss counts).
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/json_text.h"
#include "data/chat_template.h"

namespace mt::cli {
namespace {

struct ChatTemplateArgs {
  std::string records, chat_template, messages_key = "messages";
  bool add_generation_prompt = false;
};

void run_chat_template(const ChatTemplateArgs& a) {
  const ChatTemplate chat = load_chat_template(a.chat_template);
  std::ifstream in(a.records, std::ios::binary);
  if (!in) fail_data(a.records + ": cannot open");
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = a.records + " line " + std::to_string(number);
    nlohmann::ordered_json record;
    try {
      record = nlohmann::ordered_json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail_data(where + ": invalid JSON: " + json_error_text(e));
    }
    const ChatRender r = render_chat(chat, record, a.messages_key, a.add_generation_prompt, where);
    nlohmann::ordered_json out = {
        {"text", r.text}, {"assistant_spans", r.assistant_spans}, {"uncounted_turns", r.uncounted_turns}};
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  if (in.bad()) fail_data(a.records + ": read failed");
}

}  // namespace

void add_chat_template_command(CLI::App& app) {
  auto args = std::make_shared<ChatTemplateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "chat-template",
      "render chat records through a model's chat template: per record a JSON line with the text and its "
      "assistant spans ([start, end) byte offsets, what prepare's loss counts)");
  cmd->add_option("records", args->records, "JSON Lines records with messages (and tools)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--chat-template", args->chat_template,
                  "a .jinja file, a tokenizer_config.json or the folder holding it")
      ->required();
  cmd->add_option("--messages-key", args->messages_key, "the key of a record's messages")
      ->capture_default_str();
  cmd->add_flag("--add-generation-prompt", args->add_generation_prompt,
                "render the text with the template's generation prompt after the last message");
  cmd->callback([args] { run_chat_template(*args); });
}

}  // namespace mt::cli
