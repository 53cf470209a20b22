#include "bigbatch/cli/config_reader.h"

#define TOML_HEADER_ONLY 1
#define TOML_EXCEPTIONS 1
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "bigbatch/core/check.h"

namespace bigbatch::cli {

namespace {

/// One key read, with what was in effect.
struct Entry {
  std::string key;
  std::string value_toml;  // the value as TOML text
  std::string help;
  ResumeChange resume = ResumeChange::kForbidden;
};

std::string type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    default:
      return "a date or time";
  }
}

std::string node_text(const toml::node& node) {
  std::ostringstream out;
  node.visit([&out](const auto& value) { out << value; });
  return out.str();
}

template <typename T>
std::string value_text(const T& value) {
  std::ostringstream out;
  out << toml::value<T>(value);
  return out.str();
}

/// The shortest decimal that reads back as the same double (0.1, not 0.10000000000000001).
template <>
std::string value_text<double>(const double& value) {
  if (!std::isfinite(value)) {
    std::ostringstream out;
    out << toml::value<double>(value);
    return out.str();
  }
  char buffer[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value)
      break;
  }
  if (value == std::floor(value) && std::fabs(value) < 1e15)
    std::snprintf(buffer, sizeof(buffer), "%.0f", value);  // 300.0, not 3e+02
  std::string text = buffer;
  if (text.find_first_of(".eEn") == std::string::npos)
    text += ".0";  // TOML needs a float form
  return text;
}

void collect_keys(const toml::table& table, const std::string& prefix,
                  std::vector<std::string>& keys) {
  for (const auto& [name, node] : table) {
    const std::string key =
        prefix.empty() ? std::string(name.str()) : prefix + "." + std::string(name.str());
    if (const toml::table* sub = node.as_table()) {
      collect_keys(*sub, key, keys);
    } else {
      keys.push_back(key);
    }
  }
}

std::vector<std::string> split_key(const std::string& key) {
  std::vector<std::string> parts;
  std::stringstream stream(key);
  std::string part;
  while (std::getline(stream, part, '.'))
    parts.push_back(part);
  return parts;
}

}  // namespace

struct ConfigReader::State {
  std::string source = "defaults";
  toml::table document;
  std::set<std::string> overridden;  ///< keys that --set gave a value
  std::vector<Entry> entries;
  std::set<std::string> read_keys;

  /// The node at `key`, or null; records the key as known.
  const toml::node* find(const std::string& key, const std::string& help,
                         const std::string& default_text, ResumeChange resume) {
    if (read_keys.insert(key).second)
      entries.push_back({key, default_text, help, resume});
    const toml::node* node = document.at_path(key).node();
    return node;
  }

  void record_value(const std::string& key, std::string text) {
    for (Entry& entry : entries) {
      if (entry.key == key)
        entry.value_toml = std::move(text);
    }
  }

  /// The value at `key` if it has exactly TOML type T (no conversion), `fallback` when absent.
  template <typename T>
  T get_exact(const std::string& key, const T& fallback, const std::string& help,
              const std::string& expected, ResumeChange resume) {
    const toml::node* node = find(key, help, value_text<T>(fallback), resume);
    if (node == nullptr)
      return fallback;
    const toml::value<T>* typed = node->as<T>();
    if (typed == nullptr)
      type_error(key, *node, expected);
    const T value = typed->get();
    record_value(key, value_text<T>(value));
    return value;
  }

  /// Where the value of `key` came from: "--set", the file, or "defaults".
  std::string where(const std::string& key) const {
    return overridden.count(key) != 0 ? "--set" : source;
  }

  [[noreturn]] void type_error(const std::string& key, const toml::node& node,
                               const std::string& expected) const {
    throw InputError(cat(where(key), ": ", key, " = ", node_text(node), " is ", type_name(node),
                         "; expected ", expected));
  }
};

ConfigReader::ConfigReader() : state_(std::make_unique<State>()) {}
ConfigReader::~ConfigReader() = default;
ConfigReader::ConfigReader(ConfigReader&&) noexcept = default;
ConfigReader& ConfigReader::operator=(ConfigReader&&) noexcept = default;

ConfigReader ConfigReader::from_file(const std::string& path) {
  std::error_code error;
  BB_CHECK_INPUT(std::filesystem::exists(path, error), "config file ", path, " does not exist");
  BB_CHECK_INPUT(!std::filesystem::is_directory(path, error), "config file ", path,
                 " is a directory; expected a TOML file");
  std::ifstream in(path, std::ios::binary);
  BB_CHECK_INPUT(in.good(), "config file ", path, " cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  return from_string(text.str(), path);
}

ConfigReader ConfigReader::from_string(const std::string& text, const std::string& source) {
  ConfigReader reader;
  reader.state_->source = source;
  try {
    reader.state_->document = toml::parse(text, source);
  } catch (const toml::parse_error& error) {
    throw InputError(cat(source, ":", error.source().begin.line, ":", error.source().begin.column,
                         ": malformed TOML: ", error.description()));
  }
  return reader;
}

void ConfigReader::set_override(const std::string& assignment) {
  const size_t equals = assignment.find('=');
  BB_CHECK_INPUT(equals != std::string::npos && equals > 0, "override \"", assignment,
                 "\" is not of the form key=value (for example batch.global_batch=128)");
  std::string key = assignment.substr(0, equals);
  key.erase(std::remove_if(key.begin(), key.end(), ::isspace), key.end());
  const std::string value = assignment.substr(equals + 1);

  toml::table parsed;
  try {
    parsed = toml::parse("value = " + value);
  } catch (const toml::parse_error&) {
    parsed.insert_or_assign("value", value);  // a bare word: take it as a string
  }
  const std::vector<std::string> parts = split_key(key);
  toml::table* table = &state_->document;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    BB_CHECK_INPUT(!parts[i].empty(), "override key \"", key, "\" has an empty part");
    toml::node* child = table->get(parts[i]);
    if (child == nullptr) {
      table->insert_or_assign(parts[i], toml::table{});
      child = table->get(parts[i]);
    }
    BB_CHECK_INPUT(child->is_table(), "override key \"", key, "\": ", parts[i],
                   " is a value, not a section");
    table = child->as_table();
  }
  BB_CHECK_INPUT(!parts.empty() && !parts.back().empty(), "override key \"", key,
                 "\" has an empty part");
  table->insert_or_assign(parts.back(), *parsed.get("value"));
  state_->overridden.insert(key);
}

int64_t ConfigReader::get_int(const std::string& key, int64_t fallback, const std::string& help,
                              ResumeChange resume) {
  return state_->get_exact<int64_t>(key, fallback, help, "an integer", resume);
}

double ConfigReader::get_double(const std::string& key, double fallback, const std::string& help,
                                ResumeChange resume) {
  const toml::node* node = state_->find(key, help, value_text<double>(fallback), resume);
  if (node == nullptr)
    return fallback;
  double value = 0.0;
  if (node->is_integer()) {
    value = static_cast<double>(node->as_integer()->get());
  } else if (node->is_floating_point()) {
    value = node->as_floating_point()->get();
  } else {
    state_->type_error(key, *node, "a number");
  }
  state_->record_value(key, value_text<double>(value));
  return value;
}

bool ConfigReader::get_bool(const std::string& key, bool fallback, const std::string& help,
                            ResumeChange resume) {
  return state_->get_exact<bool>(key, fallback, help, "true or false", resume);
}

std::string ConfigReader::get_string(const std::string& key, const std::string& fallback,
                                     const std::string& help, ResumeChange resume) {
  return state_->get_exact<std::string>(key, fallback, help, "a string", resume);
}

std::string ConfigReader::get_choice(const std::string& key, const std::string& fallback,
                                     const std::vector<std::string>& choices,
                                     const std::string& help, ResumeChange resume) {
  std::string options;
  for (const std::string& choice : choices) {
    options += (options.empty() ? "\"" : ", \"") + choice + "\"";
  }
  const std::string value = get_string(key, fallback, help + " (one of " + options + ")", resume);
  BB_CHECK_INPUT(std::find(choices.begin(), choices.end(), value) != choices.end(), where(key),
                 ": ", key, " = \"", value, "\" is not allowed; expected one of ", options);
  return value;
}

std::optional<int64_t> ConfigReader::get_int_or_keyword(const std::string& key,
                                                        std::optional<int64_t> fallback,
                                                        const std::string& keyword,
                                                        const std::string& help,
                                                        ResumeChange resume) {
  const std::string fallback_text =
      fallback ? value_text<int64_t>(*fallback) : value_text<std::string>(keyword);
  const toml::node* node = state_->find(key, help, fallback_text, resume);
  if (node == nullptr)
    return fallback;
  if (node->is_integer()) {
    const int64_t value = node->as_integer()->get();
    state_->record_value(key, value_text<int64_t>(value));
    return value;
  }
  if (node->is_string() && node->as_string()->get() == keyword) {
    state_->record_value(key, value_text<std::string>(keyword));
    return std::nullopt;
  }
  state_->type_error(key, *node, cat("an integer or \"", keyword, "\""));
}

void ConfigReader::check_all_used() const {
  std::vector<std::string> present;
  collect_keys(state_->document, "", present);
  std::ostringstream problems;
  int unknown = 0;
  for (const std::string& key : present) {
    if (state_->read_keys.count(key) != 0)
      continue;
    ++unknown;
    problems << "\n  unknown key \"" << key << "\"";
    std::string best;
    size_t best_distance = 4;  // suggest only close matches
    const std::string leaf = key.substr(key.rfind('.') + 1);
    for (const std::string& known : state_->read_keys) {
      const std::string known_leaf = known.substr(known.rfind('.') + 1);
      const size_t distance = std::min(
          edit_distance(key, known), leaf == known_leaf ? 0 : edit_distance(leaf, known_leaf) + 1);
      if (distance < best_distance) {
        best_distance = distance;
        best = known;
      }
    }
    if (!best.empty())
      problems << " (did you mean \"" << best << "\"?)";
  }
  BB_CHECK_INPUT(unknown == 0, source(), ": ", unknown == 1 ? "a key is" : "keys are",
                 " not understood:", problems.str(),
                 "\n  run `bigbatch config` to list every key with its default");
}

std::string ConfigReader::resolved_toml() const {
  std::map<std::string, std::vector<const Entry*>> sections;
  std::vector<std::string> order;
  for (const Entry& entry : state_->entries) {
    const std::string section = entry.key.substr(0, entry.key.rfind('.'));
    if (sections.find(section) == sections.end())
      order.push_back(section);
    sections[section].push_back(&entry);
  }
  std::ostringstream out;
  for (const std::string& section : order) {
    out << "[" << section << "]\n";
    for (const Entry* entry : sections[section]) {
      out << entry->key.substr(entry->key.rfind('.') + 1) << " = " << entry->value_toml;
      if (!entry->help.empty())
        out << "  # " << entry->help;
      out << "\n";
    }
    out << "\n";
  }
  return out.str();
}

std::map<std::string, ResumeChange> ConfigReader::resume_changes() const {
  std::map<std::string, ResumeChange> changes;
  for (const Entry& entry : state_->entries)
    changes[entry.key] = entry.resume;
  return changes;
}

std::vector<std::pair<std::string, std::string>> ConfigReader::resolved_values() const {
  std::vector<std::pair<std::string, std::string>> values;
  for (const Entry& entry : state_->entries)
    values.emplace_back(entry.key, entry.value_toml);
  return values;
}

std::string ConfigReader::source() const {
  if (state_->overridden.empty())
    return state_->source;
  return state_->source == "defaults" ? "--set" : state_->source + " with --set";
}

std::string ConfigReader::where(const std::string& key) const {
  return state_->where(key);
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace bigbatch::cli
