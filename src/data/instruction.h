// Instruction data: JSON Lines records, each a prompt and its completion or a chat of messages, rendered by
// one plain template into tokens and a loss mask that counts only what the model should learn to write.
//
// The template (docs/data.md), with EOT the tokenizer's end-of-text token (GPT-2's <|endoftext|>; byte 0
// for the byte tokenizer, which has none):
//   prompt/completion:  prompt completion EOT
//   messages:           for each {role, content}: "<|" role "|>\n" content "\n", then EOT
// The loss counts the completion (or every assistant message's content and its "\n") and the closing EOT,
// nothing else, so the model learns the answers and where a record ends; never a record's first token (an
// empty prompt's completion), which nothing of its record comes before.
//
// With a model's chat template (data/chat_template.h), a chat renders through it instead: the loss counts
// the assistant turns the template's prefix renderings find, no end token is added (the template writes its
// own end of turn), and the messages may hold what the template reads (tool_calls, tool messages, ...), the
// record its "tools". Prompt/completion records keep the plain template.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/chat_template.h"
#include "data/tokenizer.h"

namespace mt {

// The record keys; a record with messages_key is a chat, any other needs prompt_key and completion_key.
struct InstructionKeys {
  std::string prompt = "prompt";
  std::string completion = "completion";
  std::string messages = "messages";
};

// Records in file order, one after another: tokens, the mask of each token (1: the loss counts it as a
// target), where each record starts and the line it came from (0: padding).
struct TokenStream {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> loss_mask;
  std::vector<int64_t> record_starts, record_lines;
};

// The token that closes each record.
int32_t record_end_token(const Tokenizer& tokenizer);

// Reads and renders every record of a JSON Lines file (blank lines are skipped). Invalid JSON, a missing
// key, a value of the wrong type, an unknown role, an empty completion, a chat without an assistant message
// or not ending with one, text holding the byte tokenizer's end-of-record byte, and a file without records
// are data errors naming the file and line; with `chat`, so is a chat that renders no counted assistant turn,
// and the turns it leaves uncounted are added to *uncounted_turns.
TokenStream read_instruction_records(const std::string& path, const InstructionKeys& keys,
                                     const Tokenizer& tokenizer, const ChatTemplate* chat = nullptr,
                                     int64_t* uncounted_turns = nullptr);

}  // namespace mt
