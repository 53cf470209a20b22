#include "bigbatch/text/post_processors.h"

#include <map>
#include <string>

#include "bigbatch/core/check.h"

namespace bigbatch::text {
namespace {

/// [token, id] as BertProcessing and RobertaProcessing write their cls and sep.
int64_t token_id_pair(const nlohmann::json& j, const std::string& key, const JsonPlace& place) {
  const nlohmann::json& value = member(j, key, place);
  BB_CHECK_INPUT(
      value.is_array() && value.size() == 2 && value[0].is_string() && value[1].is_number_integer(),
      place.at(key).str(), ": expected [\"token\", id], got ", value.dump());
  return value[1].get<int64_t>();
}

/// [CLS] A [SEP] (B [SEP]); RoBERTa: <s> A </s> (</s> B </s>).
class ClsSep : public PostProcessor {
 public:
  ClsSep(int64_t cls, int64_t sep, bool roberta) : cls_(cls), sep_(sep), roberta_(roberta) {}
  std::vector<std::vector<int64_t>> process(
      std::vector<std::vector<int64_t>> sequences) const override {
    std::vector<int64_t> out{cls_};
    out.insert(out.end(), sequences[0].begin(), sequences[0].end());
    out.push_back(sep_);
    if (sequences.size() > 1) {
      if (roberta_)
        out.push_back(sep_);
      out.insert(out.end(), sequences[1].begin(), sequences[1].end());
      out.push_back(sep_);
    }
    return {out};
  }

 private:
  int64_t cls_, sep_;
  bool roberta_;
};

/// The "single" and "pair" templates of TemplateProcessing.
class Template : public PostProcessor {
 public:
  Template(const nlohmann::json& j, const JsonPlace& place) {
    const nlohmann::json& specials = member(j, "special_tokens", place);
    BB_CHECK_INPUT(specials.is_object(), place.at("special_tokens").str(), ": expected an object");
    std::map<std::string, std::vector<int64_t>> special_ids;
    for (const auto& [name, entry] : specials.items()) {
      const JsonPlace at = place.at("special_tokens").at(name);
      const nlohmann::json& ids = member(entry, "ids", at);
      BB_CHECK_INPUT(ids.is_array(), at.at("ids").str(), ": expected a list of ids");
      for (const auto& id : ids) {
        BB_CHECK_INPUT(id.is_number_integer() && id.get<int64_t>() >= 0, at.at("ids").str(),
                       ": expected ids >= 0, got ", id.dump());
        special_ids[name].push_back(id.get<int64_t>());
      }
    }
    single_ = read(member(j, "single", place), place.at("single"), special_ids);
    if (j.contains("pair") && !j["pair"].is_null())
      pair_ = read(j["pair"], place.at("pair"), special_ids);
  }
  std::vector<std::vector<int64_t>> process(
      std::vector<std::vector<int64_t>> sequences) const override {
    const bool pair = sequences.size() > 1;
    std::vector<int64_t> out;
    for (const Item& item : pair ? pair_ : single_) {
      if (item.sequence == 'A')
        out.insert(out.end(), sequences[0].begin(), sequences[0].end());
      else if (item.sequence == 'B' && pair)
        out.insert(out.end(), sequences[1].begin(), sequences[1].end());
      else
        out.insert(out.end(), item.ids.begin(), item.ids.end());
    }
    return {out};
  }

 private:
  struct Item {
    char sequence = 0;  ///< 'A', 'B' or 0 for a special token
    std::vector<int64_t> ids;
  };
  static std::vector<Item> read(const nlohmann::json& list, const JsonPlace& place,
                                const std::map<std::string, std::vector<int64_t>>& special_ids) {
    BB_CHECK_INPUT(list.is_array(), place.str(), ": expected a list");
    std::vector<Item> items;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const nlohmann::json& entry = list[i];
      const JsonPlace at = place.at(i);
      if (entry.contains("Sequence")) {
        const std::string id = string_member(entry["Sequence"], "id", at.at("Sequence"));
        BB_CHECK_INPUT(id == "A" || id == "B", at.str(), ": sequence \"", id,
                       "\" is neither A nor B");
        items.push_back({id[0], {}});
      } else if (entry.contains("SpecialToken")) {
        const std::string id = string_member(entry["SpecialToken"], "id", at.at("SpecialToken"));
        const auto it = special_ids.find(id);
        BB_CHECK_INPUT(it != special_ids.end(), at.str(), ": special token \"", id,
                       "\" is not in special_tokens");
        items.push_back({0, it->second});
      } else {
        throw InputError(cat(at.str(),
                             ": expected {\"Sequence\": ...} or {\"SpecialToken\": ...}"
                             ", got ",
                             entry.dump()));
      }
    }
    return items;
  }

  std::vector<Item> single_, pair_;
};

class Sequence : public PostProcessor {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  std::vector<std::vector<int64_t>> process(
      std::vector<std::vector<int64_t>> sequences) const override {
    for (const auto& part : parts_)
      sequences = part->process(std::move(sequences));
    return sequences;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

/// ByteLevel's post-processing only trims offsets: the ids stay as they are.
class Identity : public PostProcessor {
 public:
  std::vector<std::vector<int64_t>> process(
      std::vector<std::vector<int64_t>> sequences) const override {
    return sequences;
  }
};

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& j,
                                                   const JsonPlace& place) {
  if (j.is_null())
    return nullptr;
  const std::string type = type_of(j, "post-processor", place);
  if (type == "TemplateProcessing")
    return std::make_unique<Template>(j, place);
  if (type == "BertProcessing" || type == "RobertaProcessing")
    return std::make_unique<ClsSep>(token_id_pair(j, "cls", place), token_id_pair(j, "sep", place),
                                    type == "RobertaProcessing");
  if (type == "ByteLevel")
    return std::make_unique<Identity>();
  if (type == "Sequence") {
    auto parts = component_list<PostProcessor>(j, "processors", place, make_post_processor);
    return std::make_unique<Sequence>(std::move(parts));
  }
  unsupported_type("post-processor", type, place,
                   "TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, Sequence");
}

}  // namespace bigbatch::text
