// config.json of a model directory in Hugging Face's layout, read field by field so that no field
// the architecture does not implement passes unnoticed.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

namespace bigbatch::io {

/// The config.json of a model directory. Every field must be read by a getter, required to have
/// the one value the architecture supports, or ignored by name as not changing the computation;
/// finish() then refuses any other field, naming it. Usage:
///
///   HfConfig config = HfConfig::read(directory);
///   const int64_t layers = config.get_int("n_layer");
///   config.require("scale_attn_by_inverse_layer_idx", false);
///   config.ignore({"architectures", "transformers_version"});
///   config.finish();  // throws InputError: "... config.json: unsupported field \"foo\" ..."
class HfConfig {
 public:
  /// Reads `directory`/config.json; throws InputError naming the file when it is missing, not
  /// JSON or not an object.
  static HfConfig read(const std::string& directory);
  /// A config from JSON text; `origin` starts every error message.
  HfConfig(nlohmann::json json, std::string origin);

  /// The value of `key`: required (an InputError names it when absent or of another type) or,
  /// with a fallback, the fallback when absent or null.
  int64_t get_int(const std::string& key);
  int64_t get_int(const std::string& key, int64_t fallback);
  double get_double(const std::string& key, double fallback);
  bool get_bool(const std::string& key, bool fallback);
  std::string get_string(const std::string& key, const std::string& fallback);
  /// The JSON value at `key` as it is (marks it read), or null when absent.
  nlohmann::json get_json(const std::string& key);
  /// Whether `key` is present and not null (marks it read).
  bool has(const std::string& key);
  /// Requires `key` to be absent, null or `supported`; otherwise throws InputError naming the key,
  /// its value and the one supported.
  void require(const std::string& key, const nlohmann::json& supported);
  /// The required field model_type, which must be one of `supported`; throws InputError naming
  /// the value and the supported ones otherwise.
  std::string model_type(const std::vector<std::string>& supported);
  /// Marks fields that do not change what the model computes (names, versions, token ids).
  void ignore(std::initializer_list<const char*> keys);
  /// ignore() of the fields every architecture's config.json may carry without their changing the
  /// computation: architectures, transformers_version, dtype, torch_dtype, _name_or_path,
  /// bos_token_id, eos_token_id, pad_token_id, use_cache.
  void ignore_metadata();
  /// Throws InputError naming every field neither read, required nor ignored, and `what` (the
  /// architecture) that does not support them.
  void finish(const std::string& what) const;

  /// The file (or origin) the config came from.
  const std::string& origin() const { return origin_; }

 private:
  const nlohmann::json* find(const std::string& key);
  nlohmann::json json_;
  std::string origin_;
  std::set<std::string> used_;
};

}  // namespace bigbatch::io
