// A model's own chat template (Jinja, data/jinja/) for instruction records: loaded from a .jinja file or a
// tokenizer_config.json, rendered with a record's messages, and the assistant turns found in the rendered
// text so that the loss counts them only.
//
// How the assistant spans are found (docs/data.md): a template that marks them with transformers'
// {% generation %} blocks gives them, exactly what those blocks write. Otherwise by prefix rendering: for
// each assistant message i, the conversation before it with the generation prompt (A) and up to and with it
// without (B). Where the whole conversation's rendering starts with B, and B with A, the text from A's end to
// B's is the turn: the message as the template writes it and the template's end-of-turn text. A template that
// renders a turn differently once later turns follow (Qwen3 drops earlier turns' reasoning; Llama-3 base's
// writes an assistant header after every conversation) breaks this for that turn: it is not counted, and said
// so.
#pragma once

#include <cstddef>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/jinja/template.h"

namespace mt {

// The built-in plain template's name for --chat-template (data/instruction.h).
inline constexpr const char* kBuiltinChatTemplate = "memtrain";

struct ChatTemplate {
  std::string origin;                                     // the file, and the key it came from, for errors
  std::shared_ptr<const jinja::Template> main, tool_use;  // tool_use: for records with tools, when named so
  // bos_token and eos_token as tokenizer_config.json gives them; undefined for a .jinja file.
  jinja::Value bos_token, eos_token;
};

// `path`: a .jinja file, a model's folder (its tokenizer_config.json), or a tokenizer_config.json whose
// chat_template is a string or a list of {name, template} (the one named "default", and "tool_use" for
// records with tools). A file that cannot be read, a missing or ill-typed key, or a template outside the
// subset are data errors naming the file.
ChatTemplate load_chat_template(const std::string& path);

// The template of the model whose tokenizer files are in `folder`: its tokenizer_config.json's chat_template,
// or none when the folder has no tokenizer_config.json or it holds no chat_template (Llama-2's has none).
std::optional<ChatTemplate> model_chat_template(const std::string& folder);

struct ChatRender {
  std::string text;
  std::vector<std::pair<size_t, size_t>> assistant_spans;  // [start, end) byte offsets into text
  int64_t uncounted_turns = 0;  // assistant messages whose rendering is not a prefix of the whole
};

// Renders record[messages_key] (with its "tools" when it has them). `where` names the record for errors
// ("FILE line N"); a template error there is a data error naming it and the template's line.
ChatRender render_chat(const ChatTemplate& chat, const nlohmann::ordered_json& record,
                       const std::string& messages_key, bool add_generation_prompt, const std::string& where);

}  // namespace mt
