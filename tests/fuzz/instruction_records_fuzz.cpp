// Instruction records (prepare --jsonl FILE): prompt/completion and chat records, byte tokens.
#include "data/instruction.h"
#include "data/tokenizer.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<mt::Tokenizer> bytes = mt::make_byte_tokenizer();
  const std::string path = mt::fuzz::as_file(data, size, "records.jsonl");
  mt::fuzz::refuse_or_accept([&] { mt::read_instruction_records(path, mt::InstructionKeys{}, *bytes); });
  return 0;
}
