// TemplateProcessing's single template, read into the ids before and after the text.
#include "data/tokenizer_json/post_processor.h"

namespace mt::tokjson {

namespace {

// The ids of one {"SpecialToken": {"id": NAME}} item, from the template's "special_tokens" table.
std::vector<int32_t> special_ids(const Node& item, const Node& table) {
  item.only({"id", "type_id"});
  const std::string name = item.string("id");
  if (!table.has(name.c_str()))
    item.fail("special token " + nlohmann::json(name).dump() + " is not in special_tokens");
  const Node entry = table.at(name.c_str());
  entry.only({"id", "ids", "tokens"});
  const Node ids = entry.at("ids");
  if (!ids.json().is_array()) ids.fail("expected a list of ids");
  std::vector<int32_t> out;
  for (const auto& id : ids.json()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) ids.fail("expected ids >= 0, found " + id.dump());
    out.push_back(id.get<int32_t>());
  }
  return out;
}

PostProcessor template_processing(const Node& n) {
  n.only({"type", "single", "pair", "special_tokens"});
  const Node single = n.at("single"), table = n.at("special_tokens");
  if (!single.json().is_array()) single.fail("expected a list");
  PostProcessor p;
  bool seen_text = false;
  for (size_t k = 0; k < single.size(); ++k) {
    const Node item = single.at(k);
    item.only({"SpecialToken", "Sequence"});
    if (item.has("Sequence")) {
      const Node sequence = item.at("Sequence");
      sequence.only({"id", "type_id"});
      if (sequence.string("id") != "A" || seen_text) sequence.unsupported("id");
      seen_text = true;
      continue;
    }
    const std::vector<int32_t> ids = special_ids(item.at("SpecialToken"), table);
    auto& side = seen_text ? p.after : p.before;
    side.insert(side.end(), ids.begin(), ids.end());
  }
  if (!seen_text) single.fail("has no {\"Sequence\": {\"id\": \"A\"}}");
  return p;
}

}  // namespace

PostProcessor parse_post_processor(const Node& n) {
  if (n.json().is_null()) return {};
  const std::string type = n.string("type");
  if (type == "TemplateProcessing") return template_processing(n);
  if (type == "ByteLevel")
    return n.only({"type", "add_prefix_space", "trim_offsets", "use_regex"}), PostProcessor{};
  n.unsupported("type");
}

}  // namespace mt::tokjson
