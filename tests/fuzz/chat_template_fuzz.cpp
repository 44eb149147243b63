// Chat templates (prepare --chat-template FILE.jinja): the Jinja subset's lexer, parser and evaluator, the
// template rendered with a chat that has tools, tool calls and several turns, and its assistant spans found.
#include <nlohmann/json.hpp>

#include "data/chat_template.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json record = nlohmann::ordered_json::parse(R"({"messages": [
    {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi é"},
    {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1.5}}}]},
    {"role": "tool", "content": "ok"}, {"role": "assistant", "content": "<think>\nx\n</think>\n\nDone."}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"x": [null, true]}}}]})");
  const std::string path = mt::fuzz::as_file(data, size, "template.jinja");
  mt::fuzz::refuse_or_accept([&] {
    const mt::ChatTemplate chat = mt::load_chat_template(path);
    mt::render_chat(chat, record, "messages", false, "records.jsonl line 1");
  });
  return 0;
}
