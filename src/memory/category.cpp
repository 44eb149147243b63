#include "memory/category.h"

#include "core/int_math.h"

namespace mt {

std::string_view category_key(Category c) {
  switch (c) {
    case Category::params:
      return "params";
    case Category::frozen:
      return "frozen";
    case Category::master:
      return "master";
    case Category::grads:
      return "grads";
    case Category::optim:
      return "optim";
    case Category::activations:
      return "activations";
    case Category::workspace:
      return "workspace";
    case Category::comm:
      return "comm";
    case Category::other:
      return "other";
  }
  return "?";
}

std::string_view category_title(Category c) {
  switch (c) {
    case Category::params:
      return "parameters";
    case Category::frozen:
      return "frozen weights";
    case Category::master:
      return "master weights";
    case Category::grads:
      return "gradients";
    case Category::optim:
      return "optimizer states";
    case Category::activations:
      return "activations";
    case Category::workspace:
      return "workspace";
    case Category::comm:
      return "communication";
    case Category::other:
      return "other";
  }
  return "?";
}

int64_t CategoryBytes::total() const {
  int64_t sum = 0;
  for (int64_t b : bytes) sum = checked_add(sum, b);
  return sum;
}

}  // namespace mt
