#include "args.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <memory>
#include <stdexcept>

namespace dsa::cli {
namespace {

constexpr std::size_t kHelpColumn = 30;

// CLI11's help with the usage line first, where readers of --help look for it.
class UsageFirst : public CLI::Formatter {
 public:
  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override {
    return make_usage(app, name) + "\n" + make_description(app) + make_positionals(app) + make_groups(app, mode);
  }
};

// The command as a CLI11 app. Options keep every occurrence and may come
// without their value, and unknown words are left over rather than thrown,
// so that -h anywhere wins and each error gets this tool's wording (below).
std::unique_ptr<CLI::App> make_app(const CommandSpec& command) {
  auto app = std::make_unique<CLI::App>(command.about, "dsa-topk " + command.name);
  app->set_help_flag("-h,--help", "print this help")->group("options");
  app->allow_extras();
  const auto formatter = std::make_shared<UsageFirst>();
  formatter->column_width(kHelpColumn);
  formatter->label("Usage", "usage");
  formatter->label("Positionals", "arguments");
  app->formatter(formatter);
  for (const OptionSpec& o : command.options) {
    CLI::Option* opt = o.value.empty() ? app->add_flag("--" + o.name, o.help)
                                       : app->add_option("--" + o.name, o.help)->type_name(o.value)->expected(0, 1);
    opt->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)->group("options");
  }
  if (!command.positional.name.empty()) app->add_option(command.positional.name, command.positional.help);
  return app;
}

}  // namespace

std::string help_text(const CommandSpec& command) { return make_app(command)->help(); }

Args::Args(const CommandSpec& command, int argc, char** argv, int first) {
  const auto app = make_app(command);
  std::vector<std::string> words(argv + first, argv + argc);
  std::reverse(words.begin(), words.end());  // CLI11 takes them last first
  try {
    app->parse(words);
  } catch (const CLI::CallForHelp&) {
    help_ = true;
    return;
  } catch (const CLI::ParseError& e) {
    throw std::invalid_argument(e.what());
  }
  // What CLI11 leaves to the tool (make_app): words it did not take, a value
  // given to a flag (CLI11 would read "--verify=yes" as the flag's value), an
  // option given twice or without its value.
  const std::string see = " (dsa-topk " + command.name + " --help lists its options)";
  const std::vector<std::string> extras = app->remaining();
  if (!extras.empty()) {
    const std::string& word = extras.front();
    if (word.size() > 1 && word[0] == '-') {
      throw std::invalid_argument("unknown option " + word.substr(0, word.find('=')) + see);
    }
    throw std::invalid_argument("unexpected argument '" + word + "'" + see);
  }
  for (const OptionSpec& o : command.options) {
    const CLI::Option* opt = app->get_option("--" + o.name);
    if (opt->count() == 0) continue;
    const std::string arg = "--" + o.name;
    if (opt->count() > 1) throw std::invalid_argument(arg + ": given more than once");
    const std::string value = opt->results().front();
    if (o.value.empty() && value != "true") throw std::invalid_argument(arg + ": takes no value, got '" + value + "'");
    if (!o.value.empty() && value.empty()) {
      throw std::invalid_argument(arg + ": needs a value (" + arg + " " + o.value + ")");
    }
    options_[o.name] = o.value.empty() ? "" : value;
  }
  if (!command.positional.name.empty()) positional_ = app->get_option(command.positional.name)->results();
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  const auto it = options_.find(name);
  return it == options_.end() ? fallback : it->second;
}

std::int64_t Args::get_int(const std::string& name, std::int64_t fallback) const {
  const auto it = options_.find(name);
  if (it == options_.end()) return fallback;
  std::int64_t v = 0;
  if (!CLI::detail::lexical_cast(it->second, v)) {
    throw std::invalid_argument("--" + name + ": expected an integer, got '" + it->second + "'");
  }
  return v;
}

bool Args::flag(const std::string& name) const { return options_.count(name) != 0; }

}  // namespace dsa::cli
