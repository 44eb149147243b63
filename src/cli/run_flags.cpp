#include "cli/run_flags.h"

#include <charconv>
#include <limits>
#include <string>
#include <type_traits>

namespace mt::cli {

namespace {

// The whole text as a T, else the range a T holds: CLI11 would wrap -1 into an unsigned field and clamp a
// value beyond the type's range to its end.
template <typename T>
CLI::Validator whole_number() {
  return CLI::Validator(
      [](const std::string& text) -> std::string {
        T value{};
        const char* end = text.data() + text.size();
        const std::from_chars_result parsed = std::from_chars(text.data(), end, value);
        if (parsed.ec == std::errc() && parsed.ptr == end) return "";
        return text + ": expected a whole number from " + std::to_string(std::numeric_limits<T>::min()) +
               " to " + std::to_string(std::numeric_limits<T>::max());
      },
      "");
}

// One table entry as a CLI11 option or flag bound to its field; a mode parses through its name table.
CLI::Option* declare_flag(CLI::App& cmd, const RunFlag& flag, RunFlagInput& input) {
  const std::string names(flag.names), help(flag.help);
  return std::visit(
      [&](auto* field) -> CLI::Option* {
        using T = std::remove_pointer_t<decltype(field)>;
        if constexpr (std::is_same_v<T, bool>) {
          return cmd.add_flag(names, *field, help);
        } else if constexpr (std::is_enum_v<T>) {
          CLI::Option* option = cmd.add_option_function<std::string>(
              names, [field, &flag](const std::string& text) { parse_flag_value(flag.name(), text, *field); },
              help);
          if (flag.show_default) option->default_str(std::string(mode_name(*field)));
          return option;
        } else {
          CLI::Option* option = cmd.add_option(names, *field, help);
          if constexpr (std::is_integral_v<T>) option->check(whole_number<T>());
          if (flag.show_default) option->capture_default_str();
          if (flag.kind == FlagKind::optional_value) option->expected(0, 1)->type_name("[FILE]");
          return option;
        }
      },
      flag.field(input));
}

}  // namespace

void RunFlags::declare(CLI::App& cmd, const RunFlag& flag) {
  options.emplace_back(flag.name(), declare_flag(cmd, flag, input));
}

TrainConfig RunFlags::resolve() const {
  RunFlagInput with_given = input;
  for (const auto& [name, option] : options)
    if (option->count() > 0) with_given.given.emplace(name);
  return resolve_run_flags(with_given);
}

std::shared_ptr<RunFlags> add_run_flags(CLI::App& cmd) {
  auto flags = std::make_shared<RunFlags>();
  for (const RunFlag& flag : run_flag_table()) flags->declare(cmd, flag);
  cmd.get_option("--model")->required();
  return flags;
}

std::shared_ptr<RunFlags> add_run_flags(CLI::App& cmd, const TrainConfig& defaults,
                                        std::initializer_list<std::string_view> names) {
  auto flags = std::make_shared<RunFlags>();
  flags->input.config = defaults;
  for (const std::string_view name : names) flags->declare(cmd, run_flag(name));
  return flags;
}

}  // namespace mt::cli
