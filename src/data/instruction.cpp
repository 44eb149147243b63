// Instruction records: each JSON line checked, rendered by the template of instruction.h and tokenized, with
// a loss mask beside the tokens. Every record is read before anything is written, so a bad line leaves no
// shard behind.
#include "data/instruction.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_text.h"

namespace mt {
namespace {

using nlohmann::ordered_json;  // key order kept: a template's tojson shows it

// Where a record came from, for its errors: "FILE line N".
struct RecordSource {
  const std::string& path;
  int64_t line;
  [[noreturn]] void fail(const std::string& what) const {
    fail_data(path + " line " + std::to_string(line) + ": " + what);
  }
};

std::string type_of(const ordered_json& value) {
  return value.is_null()     ? "null"
         : value.is_array()  ? "a list"
         : value.is_object() ? "an object"
                             : value.type_name();
}

const std::string& text_at(const ordered_json& object, const std::string& key, const RecordSource& src,
                           const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end()) src.fail(where + "missing key \"" + key + "\"");
  if (!it->is_string()) src.fail(where + "\"" + key + "\" is " + type_of(*it) + ", expected a string");
  return it->get_ref<const std::string&>();
}

class RecordWriter {
 public:
  RecordWriter(const Tokenizer& tokenizer, TokenStream& out)
      : tokenizer_(tokenizer), out_(out), end_(record_end_token(tokenizer)) {}

  void begin(int64_t line) {
    out_.record_starts.push_back(static_cast<int64_t>(out_.tokens.size()));
    out_.record_lines.push_back(line);
  }

  // Text whose tokens the loss counts (counted) or only reads as context.
  void add(const std::string& text, bool counted, const RecordSource& src) {
    if (tokenizer_.end_of_text() < 0 && text.find(static_cast<char>(end_)) != std::string::npos)
      src.fail("text holds byte " + std::to_string(end_) + ", which ends a record for the byte tokenizer");
    for (int32_t t : tokenizer_.encode(text)) push(t, counted);
  }

  void end() { push(end_, true); }

 private:
  // A record's first token is never counted: nothing of its record comes before it (an empty prompt).
  void push(int32_t token, bool counted) {
    const bool first = static_cast<int64_t>(out_.tokens.size()) == out_.record_starts.back();
    out_.tokens.push_back(token);
    out_.loss_mask.push_back(counted && !first ? 1 : 0);
  }

  const Tokenizer& tokenizer_;
  TokenStream& out_;
  int32_t end_;
};

void render_plain_chat(const ordered_json& messages, const std::string& key, const RecordSource& src,
                       RecordWriter& out) {
  if (!messages.is_array() || messages.empty())
    src.fail("\"" + key + "\" is " + type_of(messages) + ", expected a non-empty list of {role, content}");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string where = "message " + std::to_string(i) + ": ";
    if (!messages[i].is_object())
      src.fail(where + "is " + type_of(messages[i]) + ", expected {role, content}");
    const std::string& role = text_at(messages[i], "role", src, where);
    const std::string& content = text_at(messages[i], "content", src, where);
    if (role != "system" && role != "user" && role != "assistant")
      src.fail(where + "role \"" + role + "\", expected system, user or assistant");
    const bool assistant = role == "assistant";
    if (assistant && content.empty()) src.fail(where + "empty completion (the assistant's content)");
    if (i + 1 == messages.size() && !assistant)
      src.fail(where + "the last message is the " + role +
               "'s, expected the assistant's, which the record ends");
    out.add("<|" + role + "|>\n", false, src);
    out.add(content + "\n", assistant, src);
  }
}

// A chat through the model's template: the text between assistant spans read, the spans counted.
void render_template_chat(const ordered_json& record, const std::string& key, const ChatTemplate& chat,
                          const RecordSource& src, RecordWriter& out, int64_t& uncounted_turns) {
  const ChatRender r = render_chat(chat, record, key, false, src.path + " line " + std::to_string(src.line));
  if (r.assistant_spans.empty() && r.uncounted_turns == 0)
    src.fail("no assistant message, nothing for the loss to count");
  if (r.assistant_spans.empty())
    src.fail("chat template " + chat.origin +
             " renders no assistant turn as a prefix of the whole conversation (docs/data.md), so the loss "
             "would count nothing");
  uncounted_turns += r.uncounted_turns;
  size_t pos = 0;
  for (const auto& [start, end] : r.assistant_spans) {
    out.add(r.text.substr(pos, start - pos), false, src);
    out.add(r.text.substr(start, end - start), true, src);
    pos = end;
  }
  out.add(r.text.substr(pos), false, src);
}

void render_record(const ordered_json& record, const InstructionKeys& keys, const ChatTemplate* chat,
                   const RecordSource& src, RecordWriter& out, int64_t& uncounted_turns) {
  if (!record.is_object()) src.fail("record is " + type_of(record) + ", expected a JSON object");
  out.begin(src.line);
  if (const auto chat_messages = record.find(keys.messages); chat_messages != record.end()) {
    // Rendering one of the two would drop the other without a word.
    for (const std::string& key : {keys.prompt, keys.completion})
      if (record.contains(key))
        src.fail("both \"" + keys.messages + "\" and \"" + key +
                 "\": a record is a chat or a prompt and completion, not both");
    if (chat) return render_template_chat(record, keys.messages, *chat, src, out, uncounted_turns);
    render_plain_chat(*chat_messages, keys.messages, src, out);
  } else {
    const std::string& prompt = text_at(record, keys.prompt, src, "");
    const std::string& completion = text_at(record, keys.completion, src, "");
    if (completion.empty()) src.fail("empty completion \"" + keys.completion + "\"");
    out.add(prompt, false, src);
    out.add(completion, true, src);
  }
  out.end();
}

}  // namespace

int32_t record_end_token(const Tokenizer& tokenizer) {
  return tokenizer.end_of_text() >= 0 ? tokenizer.end_of_text() : 0;
}

TokenStream read_instruction_records(const std::string& path, const InstructionKeys& keys,
                                     const Tokenizer& tokenizer, const ChatTemplate* chat,
                                     int64_t* uncounted_turns) {
  int64_t uncounted = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_data("--jsonl " + path + ": cannot open");
  TokenStream stream;
  RecordWriter writer(tokenizer, stream);
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const RecordSource src{path, number};
    ordered_json record;
    try {
      record = ordered_json::parse(line);
    } catch (const ordered_json::exception& e) {
      src.fail("invalid JSON: " + json_error_text(e));
    }
    render_record(record, keys, chat, src, writer, uncounted);
  }
  if (uncounted_turns) *uncounted_turns += uncounted;
  if (in.bad()) fail_data("--jsonl " + path + ": read failed");
  if (stream.record_starts.empty()) fail_data("--jsonl " + path + ": no records");
  return stream;
}

}  // namespace mt
