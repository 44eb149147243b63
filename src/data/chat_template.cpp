// Loading a chat template and finding the assistant turns of a rendered conversation (chat_template.h).
#include "data/chat_template.h"

#include <filesystem>
#include <system_error>

#include "core/error.h"
#include "core/json_text.h"
#include "core/whole_file.h"

namespace mt {
namespace {

using ordered_json = nlohmann::ordered_json;

std::shared_ptr<const jinja::Template> compile(const std::string& source, const std::string& origin) {
  try {
    return std::make_shared<const jinja::Template>(source);
  } catch (const jinja::TemplateError& e) {
    fail_data("--chat-template " + origin + ": chat template line " + std::to_string(e.line) + ": " +
              e.what());
  }
}

// A special token as tokenizer_config.json holds it: a string, {"content": string, ...} or null.
jinja::Value special_token(const ordered_json& config, const char* key, const std::string& path) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  fail_data("--chat-template " + path + ": \"" + key + "\" is neither a string nor {\"content\": string}");
}

void load_named_templates(const ordered_json& list, const std::string& path, ChatTemplate& chat) {
  for (const ordered_json& entry : list) {
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
        !entry.contains("template") || !entry["template"].is_string())
      fail_data("--chat-template " + path +
                ": \"chat_template\" is a list whose entries are not all {name, template}");
    const std::string name = entry["name"].get<std::string>();
    const std::string origin = path + " (chat_template \"" + name + "\")";
    if (name == "default") chat.main = compile(entry["template"].get<std::string>(), origin);
    if (name == "tool_use") chat.tool_use = compile(entry["template"].get<std::string>(), origin);
  }
  if (!chat.main)
    fail_data("--chat-template " + path + ": \"chat_template\" lists no template named \"default\"");
}

}  // namespace

ChatTemplate load_chat_template(const std::string& given) {
  // A model's folder: its tokenizer_config.json.
  const std::string path = std::filesystem::is_directory(given)
                               ? (std::filesystem::path(given) / "tokenizer_config.json").string()
                               : given;
  ChatTemplate chat;
  chat.origin = path;
  const std::string text = read_whole_file(path, "--chat-template");
  if (path.ends_with(".jinja")) {
    chat.main = compile(text, path);
    return chat;
  }
  if (!path.ends_with(".json"))
    fail_usage("--chat-template " + path + ": expected " + kBuiltinChatTemplate +
               ", a .jinja file or a tokenizer_config.json");
  const ordered_json config = ordered_json(parse_json_text(text, "--chat-template " + path, false));
  const auto it = config.is_object() ? config.find("chat_template") : config.end();
  if (it == config.end()) fail_data("--chat-template " + path + ": no key \"chat_template\"");
  if (it->is_string()) {
    chat.main = compile(it->get<std::string>(), path);
  } else if (it->is_array()) {
    load_named_templates(*it, path, chat);
  } else {
    fail_data("--chat-template " + path +
              ": \"chat_template\" is neither a string nor a list of {name, template}");
  }
  chat.bos_token = special_token(config, "bos_token", path);
  chat.eos_token = special_token(config, "eos_token", path);
  return chat;
}

std::optional<ChatTemplate> model_chat_template(const std::string& folder) {
  const std::filesystem::path config = std::filesystem::path(folder) / "tokenizer_config.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(config, ec)) return std::nullopt;
  const nlohmann::json parsed = parse_json_text(read_whole_file(config.string(), "--tokenizer"),
                                                "--tokenizer " + config.string(), false);
  if (!parsed.is_object() || !parsed.contains("chat_template") || parsed.at("chat_template").is_null())
    return std::nullopt;
  return load_chat_template(config.string());
}

namespace {

class Renderer {
 public:
  Renderer(const ChatTemplate& chat, const ordered_json& record, const std::string& messages_key,
           const std::string& where)
      : where_(where), origin_(chat.origin), messages_(record[messages_key]) {
    const auto tools = record.find("tools");
    const bool has_tools = tools != record.end() && !tools->is_null();
    tpl_ = has_tools && chat.tool_use ? chat.tool_use.get() : chat.main.get();
    context_ = {{"messages", jinja::Value{}},
                {"add_generation_prompt", false},
                {"bos_token", chat.bos_token},
                {"eos_token", chat.eos_token},
                {"tools", has_tools ? jinja::from_json(*tools) : jinja::Value{}}};
  }

  bool marks_generation() const { return tpl_->marks_generation(); }

  // The first `count` messages, with or without the generation prompt; with spans, its generation blocks'.
  std::string render(size_t count, bool generation_prompt,
                     std::vector<std::pair<size_t, size_t>>* spans = nullptr) {
    ordered_json prefix = ordered_json::array();
    for (size_t i = 0; i < count; ++i) prefix.push_back(messages_[i]);
    context_[0].second = jinja::from_json(prefix);
    context_[1].second = generation_prompt;
    try {
      return tpl_->render(context_, spans);
    } catch (const jinja::TemplateError& e) {
      fail_data(
          where_ + ": chat template " + origin_ + " line " + std::to_string(e.line) + ": " + e.what() +
          (count < messages_.size() ? " (rendering the first " + std::to_string(count) + " messages)" : ""));
    }
  }

 private:
  const std::string& where_;
  const std::string& origin_;
  const ordered_json& messages_;
  const jinja::Template* tpl_;
  jinja::Dict context_;
};

}  // namespace

ChatRender render_chat(const ChatTemplate& chat, const ordered_json& record, const std::string& messages_key,
                       bool add_generation_prompt, const std::string& where) {
  if (!record.is_object() || !record.contains(messages_key))
    fail_data(where + ": expected a JSON object with \"" + messages_key + "\"");
  const ordered_json& messages = record[messages_key];
  if (!messages.is_array() || messages.empty())
    fail_data(where + ": \"" + messages_key + "\" is not a non-empty list of messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    if (!messages[i].is_object() || !messages[i].contains("role") || !messages[i]["role"].is_string())
      fail_data(where + ": message " + std::to_string(i) + " is not an object with a string \"role\"");
  }
  Renderer renderer(chat, record, messages_key, where);
  ChatRender out;
  if (renderer.marks_generation()) {
    std::vector<std::pair<size_t, size_t>> marked;
    out.text = renderer.render(messages.size(), add_generation_prompt, &marked);
    for (const auto& span : marked)
      if (span.second > span.first) out.assistant_spans.push_back(span);
    return out;
  }
  out.text = renderer.render(messages.size(), add_generation_prompt);
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i]["role"] != "assistant") continue;
    const std::string before = renderer.render(i, true);
    const std::string with = renderer.render(i + 1, false);
    if (with.size() > before.size() && with.starts_with(before) && out.text.starts_with(with))
      out.assistant_spans.emplace_back(before.size(), with.size());
    else
      ++out.uncounted_turns;
  }
  return out;
}

}  // namespace mt
