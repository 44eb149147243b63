// A Jinja template of the subset chat templates use (docs/data.md lists it), parsed once and rendered with a
// context of values. Anything outside the subset is refused when the template is parsed (a statement, filter
// or test) or when it is reached (a method or function), as a TemplateError naming it and its line; so is
// raise_exception(message), with the template's message.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "data/jinja/ast.h"
#include "data/jinja/lexer.h"
#include "data/jinja/value.h"

namespace mt::jinja {

class Template {
 public:
  explicit Template(const std::string& source);
  // The globals raise_exception, namespace and range are there besides `context`. With generation_spans,
  // the [start, end) byte offsets of what each {% generation %} block wrote.
  std::string render(const Dict& context,
                     std::vector<std::pair<size_t, size_t>>* generation_spans = nullptr) const;
  // Whether the template marks what the model generates with {% generation %} blocks.
  bool marks_generation() const { return marks_generation_; }

 private:
  Body body_;
  bool marks_generation_ = false;
};

}  // namespace mt::jinja
