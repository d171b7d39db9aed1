// A command's arguments, parsed by CLI11 against the command's options.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dsa::cli {

// One option of a command: "--name VALUE" when `value` names what it takes,
// a flag "--name" when `value` is empty; `help` may hold several lines.
struct OptionSpec {
  std::string name;   // without the leading "--"
  std::string value;  // e.g. "N", "cpu|cuda"; "" for a flag
  std::string help;
};

// What a command accepts: its options and at most one word that is not an
// option (`positional`, e.g. replay's IN; an empty name: none).
struct CommandSpec {
  std::string name;
  std::string about;  // the help's description
  std::vector<OptionSpec> options;
  OptionSpec positional;
};

// The command's --help text.
std::string help_text(const CommandSpec& command);

// "--name value", "--name=value", "--flag", the positional word, and
// -h/--help anywhere (which wins over every error). Throws
// std::invalid_argument naming the first unknown option or stray word, a
// flag given a value, an option without its value, an option given twice.
class Args {
 public:
  Args(const CommandSpec& command, int argc, char** argv, int first);
  bool help() const { return help_; }
  std::string get(const std::string& name, const std::string& fallback) const;
  std::int64_t get_int(const std::string& name, std::int64_t fallback) const;
  bool flag(const std::string& name) const;  // given (a flag, or an option with its value)
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> options_;
  std::vector<std::string> positional_;
  bool help_ = false;
};

}  // namespace dsa::cli
