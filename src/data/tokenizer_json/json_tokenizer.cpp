// The tokenizer.json pipeline, in the reference's order: added tokens are found in the raw text; each
// stretch between them is normalized, pre-tokenized and encoded by the model; the post-processor puts the
// special tokens around the whole when they are asked for.
#include "data/tokenizer_json/json_tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "data/tokenizer_json/added_tokens.h"
#include "data/tokenizer_json/bpe_model.h"
#include "data/tokenizer_json/decoder.h"
#include "data/tokenizer_json/normalizer.h"
#include "data/tokenizer_json/post_processor.h"
#include "data/tokenizer_json/pre_tokenizer.h"
#include "data/utf8.h"

namespace mt::tokjson {

namespace {

// The reference's clean_up_tokenization: no space before these punctuation marks and contractions.
std::string clean_up_spaces(std::string text) {
  static const std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) {
    std::string out;
    size_t at = 0;
    for (size_t hit = text.find(from); hit != std::string::npos; hit = text.find(from, at)) {
      out.append(text, at, hit - at).append(to), at = hit + from.size();
    }
    text = out.append(text, at);
  }
  return text;
}

class JsonTokenizer : public Tokenizer {
 public:
  JsonTokenizer(const nlohmann::json& json, const std::string& file, const Settings& settings)
      : settings_(settings), model_(Node(json, file, "").at("model")) {
    const Node root(json, file, "");
    root.only({"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer",
               "post_processor", "decoder", "model"});
    // Encoding whole texts, memtrain neither truncates nor pads.
    for (const char* key : {"truncation", "padding"}) {
      if (root.has(key)) root.unsupported(key);
    }
    static const nlohmann::json kNull;
    const auto field = [&](const char* key) {
      return Node(json.contains(key) ? json.at(key) : kNull, file, key);
    };
    added_ = std::make_unique<AddedTokens>(field("added_tokens"), &model_);
    normalizer_ = parse_normalizer(field("normalizer"));
    pre_tokenizer_ = parse_pre_tokenizer(field("pre_tokenizer"));
    post_ = parse_post_processor(field("post_processor"));
    decoder_ = parse_decoder(field("decoder"), [this](const std::string& token) {
      const int32_t id = model_.id_of(token);
      return id >= 0 && added_->is_added(id);
    });
    check_agrees("add_bos_token", settings_.add_bos, !post_.before.empty(), "before");
    check_agrees("add_eos_token", settings_.add_eos, !post_.after.empty(), "after");
    for (int32_t id : post_.before) check_id(root, id);
    for (int32_t id : post_.after) check_id(root, id);
    if (!settings_.end_of_text.empty()) {
      end_of_text_ = model_.id_of(settings_.end_of_text);
      if (end_of_text_ < 0)
        fail_data(file + ": the end-of-text token \"" + settings_.end_of_text + "\" is not in it");
    }
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    const std::string valid = to_valid_utf8(text);
    std::vector<int32_t> ids;
    for (const Section& section : added_->split(valid)) {
      if (section.token >= 0) {
        ids.push_back(section.token);
      } else {
        encode_section(section.text, section.text.data() == valid.data(), &ids);
      }
    }
    return ids;
  }

  std::vector<int32_t> encode_with_special_tokens(std::string_view text) const override {
    std::vector<int32_t> ids = post_.before;
    const std::vector<int32_t> body = encode(text);
    ids.insert(ids.end(), body.begin(), body.end());
    ids.insert(ids.end(), post_.after.begin(), post_.after.end());
    return ids;
  }

  std::string decode(const std::vector<int32_t>& tokens) const override {
    std::vector<std::string> spelled;
    for (int32_t t : tokens) {
      const std::string* token = model_.token(t);
      if (!token)
        fail_data(settings_.name + " tokenizer: token " + std::to_string(t) + " is not in its vocabulary");
      spelled.push_back(*token);
    }
    std::string text;
    if (decoder_) {
      for (const std::string& s : decoder_->decode_chain(std::move(spelled))) text += s;
    } else {  // the reference joins the tokens with spaces
      for (size_t k = 0; k < spelled.size(); ++k) text += (k ? " " : "") + spelled[k];
    }
    return settings_.clean_up_spaces ? clean_up_spaces(std::move(text)) : text;
  }

  int32_t vocab_size() const override { return model_.size(); }
  int32_t end_of_text() const override { return end_of_text_; }
  std::string name() const override { return settings_.name; }
  uint32_t fingerprint() const override { return settings_.fingerprint; }

 private:
  void check_agrees(const char* key, std::optional<bool> asked, bool added, const char* where) const {
    if (!asked || *asked == added) return;
    fail_data(settings_.config_file + ": " + key + " " + (*asked ? "true" : "false") +
              " is not supported: the " + "tokenizer.json's post_processor adds " +
              (added ? "a token " : "nothing ") + where + " the text");
  }

  void check_id(const Node& root, int32_t id) const {
    if (!model_.token(id))
      root.fail("post_processor's special token id " + std::to_string(id) + " is not in the vocabulary");
  }

  // `starts_text`: no added token comes before the section.
  void encode_section(std::string_view raw, bool starts_text, std::vector<int32_t>* ids) const {
    std::string text(raw);
    if (normalizer_) text = normalizer_->normalize(std::move(text));
    if (text.empty()) return;
    std::vector<std::string> pieces;
    if (pre_tokenizer_) {
      pre_tokenizer_->split(text, starts_text, &pieces);
    } else {
      pieces.push_back(std::move(text));
    }
    const size_t first = ids->size();
    for (const std::string& piece : pieces) model_.encode(piece, ids);
    if (model_.fuse_unknown() && model_.unknown() >= 0) {  // runs of the unknown token become one
      const int32_t unk = model_.unknown();
      const auto from = ids->begin() + static_cast<std::ptrdiff_t>(first);
      ids->erase(std::unique(from, ids->end(), [unk](int32_t a, int32_t b) { return a == unk && b == unk; }),
                 ids->end());
    }
  }

  Settings settings_;
  BpeModel model_;
  std::unique_ptr<AddedTokens> added_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  PostProcessor post_;
  std::unique_ptr<Decoder> decoder_;
  int32_t end_of_text_ = -1;
};

}  // namespace

std::unique_ptr<Tokenizer> make_json_tokenizer(const nlohmann::json& tokenizer, const std::string& file,
                                               const Settings& settings) {
  if (!tokenizer.is_object()) fail_data(file + ": expected a JSON object");
  return std::make_unique<JsonTokenizer>(tokenizer, file, settings);
}

}  // namespace mt::tokjson
