// The memory categories every report uses (see DESIGN.md), with their JSON keys.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace mt {

// frozen: weights that get no gradient and no optimizer state (a LoRA run's base), outside the flat
// parameter range.
enum class Category { params, frozen, master, grads, optim, activations, workspace, comm, other };

constexpr int kNumCategories = 9;
constexpr std::array<Category, kNumCategories> kAllCategories = {
    Category::params,      Category::frozen,    Category::master, Category::grads, Category::optim,
    Category::activations, Category::workspace, Category::comm,   Category::other};

// The categories whose tensors with lifetimes the Plan packs into an arena each.
constexpr std::array<Category, 4> kArenaCategories = {Category::activations, Category::workspace,
                                                      Category::comm, Category::grads};

std::string_view category_key(Category c);    // "params", "master", ...
std::string_view category_title(Category c);  // "parameters", "master weights", ...

// Where a planned byte lives: the device's own memory, or host memory the device reads and writes (staging:
// the loaders' windows, the checkpoint stream, the batch on a device whose memory the host cannot write). On
// the CPU both are host memory.
enum class MemorySpace { device, host };

// Bytes per category, indexable by Category.
struct CategoryBytes {
  std::array<int64_t, kNumCategories> bytes{};
  int64_t& operator[](Category c) { return bytes[static_cast<int>(c)]; }
  int64_t operator[](Category c) const { return bytes[static_cast<int>(c)]; }
  int64_t total() const;  // throws SizeOverflow (core/int_math.h) rather than wrap
};

}  // namespace mt
