// Tokens (lexer.h) to a template's statements (ast.h). Anything outside the subset memtrain implements, a
// statement, filter or test it does not know, is a TemplateError naming it and its line, as is bad syntax.
#pragma once

#include <vector>

#include "data/jinja/ast.h"
#include "data/jinja/lexer.h"

namespace mt::jinja {

Body parse(const std::vector<Token>& tokens);

}  // namespace mt::jinja
