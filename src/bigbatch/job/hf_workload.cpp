#include "bigbatch/job/hf_workload.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <utility>

#include "bigbatch/core/check.h"
#include "bigbatch/core/device.h"
#include "bigbatch/core/strings.h"
#include "bigbatch/core/table.h"
#include "bigbatch/data/fortune_collections.h"
#include "bigbatch/data/instruction_records.h"
#include "bigbatch/data/shuffle.h"
#include "bigbatch/data/text_files.h"
#include "bigbatch/data/token_datasets.h"
#include "bigbatch/job/concurrency_choice.h"
#include "bigbatch/models/hf_model.h"
#include "bigbatch/models/model_info.h"
#include "bigbatch/models/peft_adapter.h"
#include "bigbatch/nn/mode_guard.h"
#include "bigbatch/text/conversation.h"
#include "bigbatch/text/tokenizer.h"

namespace bigbatch::job {

namespace {

using data::TokenIds;

constexpr int64_t kIgnoreIndex = -100;

/// Whether each of n samples is held out: round(fraction * n) of them (at most n - 1), drawn
/// with the seed.
std::vector<bool> held_out(int64_t n, double fraction, uint64_t seed) {
  const int64_t count = std::min<int64_t>(n - 1, std::llround(fraction * static_cast<double>(n)));
  std::vector<bool> held(static_cast<size_t>(n), false);
  const std::vector<int64_t> order = data::epoch_permutation(n, seed, /*epoch=*/0);
  for (int64_t i = 0; i < count; ++i)
    held[static_cast<size_t>(order[static_cast<size_t>(i)])] = true;
  return held;
}

TokenIds to_token_ids(const std::vector<int64_t>& ids) {
  return TokenIds(ids.begin(), ids.end());
}

/// How many special tokens the tokenizer puts after a text (BERT's [SEP]: 1), from a one-word
/// probe.
size_t special_tokens_after(const text::Tokenizer& tokenizer) {
  const std::vector<int64_t> plain = tokenizer.encode("a", /*add_special_tokens=*/false);
  const std::vector<int64_t> framed = tokenizer.encode("a");
  const auto at = std::search(framed.begin(), framed.end(), plain.begin(), plain.end());
  if (plain.empty() || at == framed.end())
    return 0;
  return framed.size() - static_cast<size_t>(at - framed.begin()) - plain.size();
}

/// The tokenized classification splits of a fortune or class-folder directory.
struct ClassificationData {
  std::shared_ptr<data::TokenClassificationDataset> train, val;
  std::vector<std::string> class_names;
  std::string description;
};

ClassificationData classification_data(const HfWorkloadOptions& options,
                                       const text::Tokenizer& tokenizer, int64_t context) {
  const data::FortuneCollections texts =
      data::FortuneCollections::load(data::FortuneCollectionsOptions()
                                         .directory(options.data_path)
                                         .min_per_class(options.min_per_class)
                                         .max_bytes(std::numeric_limits<int32_t>::max())
                                         .test_fraction(options.val_fraction)
                                         .seed(options.seed));
  const auto options_for = [&](const std::string& name) {
    return data::TokenDatasetOptions(context).pad_id(hf_pad_id(tokenizer)).name(name);
  };
  int64_t cut = 0;
  const auto tokenized = [&](const data::FortuneDataset& split, const std::string& name) {
    std::vector<TokenIds> sequences;
    std::vector<int64_t> labels;
    for (int64_t i = 0; i < split.size(); ++i) {
      sequences.push_back(encode_truncated(tokenizer, split.text(i), context));
      cut += static_cast<int64_t>(sequences.back().size()) == context ? 1 : 0;
      labels.push_back(split.label(i));
    }
    return std::make_shared<data::TokenClassificationDataset>(
        std::move(sequences), std::move(labels), texts.class_names(), options_for(name));
  };
  ClassificationData loaded;
  loaded.train = tokenized(texts.train(), "train");
  loaded.val = texts.test().size() > 0 ? tokenized(texts.test(), "validation") : nullptr;
  loaded.class_names = texts.class_names();
  const int64_t total = texts.train().size() + texts.test().size();
  loaded.description =
      cat(group_thousands(total), " texts of ", texts.class_names().size(), " classes in ",
          options.data_path, " (", group_thousands(cut), " at the limit of ", context,
          " tokens); train ", group_thousands(texts.train().size()), ", validation ",
          group_thousands(texts.test().size()));
  return loaded;
}

/// The chat renderer of the model directory's template, for chat records.
std::unique_ptr<text::ConversationRenderer> chat_renderer(const HfWorkloadOptions& options,
                                                          const text::Tokenizer& tokenizer) {
  const std::string source = text::chat_template(options.model_path);
  BB_CHECK_INPUT(!source.empty(), options.data_path,
                 " holds chat \"messages\" records, but the tokenizer of ", options.model_path,
                 " has no chat template (tokenizer_config.json \"chat_template\", or "
                 "chat_template.jinja) to render them with; give {\"prompt\", \"response\"} "
                 "records instead");
  return std::make_unique<text::ConversationRenderer>(
      tokenizer, source, options.model_path + "/tokenizer_config.json chat_template");
}

/// Instruction tuning: prompt/response records as the prompt's ids (with the tokenizer's leading
/// special tokens) and the response's ending in EOS; chat records rendered with the tokenizer's
/// chat template, their assistant turns learned. Split into train and validation.
void add_instruction_data(const HfWorkloadOptions& options, const text::Tokenizer& tokenizer,
                          int64_t context, Workload& w) {
  const std::vector<data::InstructionRecord> records =
      data::read_instruction_records(options.data_path);
  const auto chats = static_cast<size_t>(
      std::count_if(records.begin(), records.end(), [](const auto& r) { return r.is_chat(); }));
  const std::unique_ptr<text::ConversationRenderer> renderer =
      chats > 0 ? chat_renderer(options, tokenizer) : nullptr;
  const std::optional<int64_t> eos = tokenizer.special_tokens().eos;
  BB_CHECK_INPUT(chats == records.size() || eos.has_value(), options.model_path,
                 ": the tokenizer has no EOS token, which ends every response");
  const size_t after = special_tokens_after(tokenizer);
  std::vector<data::SupervisedTokens> train, val;
  int64_t split_tokens = 0;
  const std::vector<bool> held =
      held_out(static_cast<int64_t>(records.size()), options.val_fraction, options.seed);
  for (size_t i = 0; i < records.size(); ++i) {
    const data::InstructionRecord& record = records[i];
    data::SupervisedTokens sample;
    if (record.is_chat()) {
      text::ConversationTokens chat = renderer->tokenize(record.messages, record.tools);
      sample.tokens = to_token_ids(chat.ids);
      sample.learned = std::move(chat.assistant);
      split_tokens += chat.split_tokens;
    } else {
      // The prompt keeps what the tokenizer puts before a text (BOS), not what it puts after.
      std::vector<int64_t> prompt = tokenizer.encode(record.prompt);
      prompt.resize(prompt.size() - std::min(after, prompt.size()));
      std::vector<int64_t> response = tokenizer.encode(record.response, false);
      response.push_back(*eos);
      sample = data::prompt_then_response(to_token_ids(prompt), to_token_ids(response));
    }
    (held[i] ? val : train).push_back(std::move(sample));
  }
  const auto options_for = [&](const std::string& name) {
    return data::TokenDatasetOptions(context).pad_id(hf_pad_id(tokenizer)).name(name);
  };
  auto train_set =
      std::make_shared<data::SupervisedTokenDataset>(std::move(train), options_for("train"));
  const size_t pairs = records.size() - chats;
  w.data_description =
      cat(chats > 0 ? cat(group_thousands(chats), " chat conversations") : "",
          chats > 0 && pairs > 0 ? " and " : "",
          pairs > 0 ? cat(group_thousands(pairs), " prompt/response records") : "", " in ",
          options.data_path, chats > 0 ? ", rendered with the tokenizer's chat template" : "",
          "; the loss counts response tokens only", chats > 0 ? " (the assistant turns)" : "",
          split_tokens > 0 ? cat("; ", split_tokens, " turn boundaries inside a token") : "");
  w.train = std::move(train_set);
  if (!val.empty())
    w.val =
        std::make_shared<data::SupervisedTokenDataset>(std::move(val), options_for("validation"));
}

/// Causal LM on documents: each tokenized (without special tokens) and packed with EOS after it.
void add_document_data(const HfWorkloadOptions& options, const text::Tokenizer& tokenizer,
                       int64_t context, Workload& w) {
  const std::vector<std::string> documents = data::read_documents(options.data_path);
  const std::optional<int64_t> eos = tokenizer.special_tokens().eos;
  BB_CHECK_INPUT(eos.has_value(), options.model_path,
                 ": the tokenizer has no EOS token to put between documents");
  std::vector<TokenIds> train, val;
  const std::vector<bool> held =
      held_out(static_cast<int64_t>(documents.size()), options.val_fraction, options.seed);
  for (size_t i = 0; i < documents.size(); ++i)
    (held[i] ? val : train).push_back(to_token_ids(tokenizer.encode(documents[i], false)));
  const auto separator = static_cast<int32_t>(*eos);
  const auto options_for = [&](const std::string& name) {
    return data::TokenDatasetOptions(context).pad_id(*eos).name(name);
  };
  auto train_set = std::make_shared<data::PackedTokenDataset>(
      std::make_shared<const TokenIds>(data::pack_documents(train, separator)),
      options_for("train"));
  w.data_description = cat(group_thousands(documents.size()), " documents in ", options.data_path,
                           ", packed with EOS (id ", *eos, ") after each");
  w.train = std::move(train_set);
  if (!val.empty()) {
    TokenIds stream = data::pack_documents(val, separator);
    if (stream.size() >= 2) {
      w.val = std::make_shared<data::PackedTokenDataset>(
          std::make_shared<const TokenIds>(std::move(stream)), options_for("validation"));
    }
  }
}

/// Adds the adapters (those of `start`, adapter.init_from's, when it is set), freezes the rest and
/// narrows the frozen weights; returns the plan row.
std::string adapt(const models::HfModel& model, const HfAdapterOptions& adapter,
                  const std::optional<models::PeftLoraConfig>& start,
                  const std::string& model_path) {
  torch::nn::Module& module = *model.module();
  if (!adapter.lora)
    return "none: every weight trains";
  nn::LoraOptions lora = adapter.lora_options;
  if (lora.targets().empty())
    lora.targets(default_lora_targets(model.model_type));
  std::vector<std::string> trainable = lora.trainable();
  std::vector<std::string> also_trainable = model.trained_heads();
  if (start) {
    // PEFT lists names for any model of the task ("classifier", "score"); those of this one.
    for (const std::string& saved : start->modules_to_save) {
      for (const auto& item : module.named_modules("", /*include_self=*/false)) {
        if (nn::module_named(item.key(), saved)) {
          also_trainable.push_back(saved);
          break;
        }
      }
    }
  }
  for (const std::string& name : also_trainable) {
    if (std::find(trainable.begin(), trainable.end(), name) == trainable.end())
      trainable.push_back(name);
  }
  lora.trainable(trainable);
  std::vector<std::string> adapted;
  if (start) {
    adapted = models::apply_peft_lora(module, *start, lora, model_path);
    models::load_peft_weights(module, adapted, *start);
    lora.rank(start->rank).alpha(start->alpha).targets(models::peft_targets(module, *start));
  } else {
    adapted = nn::apply_lora(module, lora);
  }
  nn::store_frozen_weights(module, adapter.frozen_dtype);
  return cat("lora: rank ", lora.rank(), ", alpha ", lora.alpha(), ", dropout ", lora.dropout(),
             " on ", adapted.size(), " layers (", join(lora.targets()), ")",
             trainable.empty() ? "" : cat("; trained in full: ", join(trainable)),
             start ? cat("; from ", adapter.init_from) : "");
}

/// "1,234 of 5,678 (21.7%)": trainable parameters of all.
std::string trainable_share(const torch::nn::Module& module) {
  const int64_t all = models::parameter_count(module);
  const int64_t trainable = models::trainable_parameter_count(module);
  return cat(group_thousands(trainable), " of ", group_thousands(all), " (",
             format_fixed(100.0 * static_cast<double>(trainable) / static_cast<double>(all), 2),
             "%)");
}

}  // namespace

data::TokenIds encode_truncated(const text::Tokenizer& tokenizer, const std::string& text,
                                int64_t context) {
  const std::vector<int64_t> ids = tokenizer.encode(text);
  const auto limit = static_cast<size_t>(context);
  if (ids.size() <= limit)
    return to_token_ids(ids);
  const size_t after = special_tokens_after(tokenizer);  // [SEP] stays at the end
  TokenIds cut(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(limit - after));
  cut.insert(cut.end(), ids.end() - static_cast<std::ptrdiff_t>(after), ids.end());
  return cut;
}

std::string continue_prompt(const models::CausalLm& lm, const text::Tokenizer& tokenizer,
                            const std::string& prompt, int64_t context,
                            const models::SampleOptions& sample, torch::Device device) {
  std::vector<int64_t> ids = tokenizer.encode(prompt);
  const std::optional<int64_t> eos = tokenizer.special_tokens().eos;
  if (ids.empty())
    ids.push_back(eos.value_or(0));
  const std::vector<int64_t> generated = models::generate_ids(
      lm, ids, context, models::SampleOptions(sample).drawable_ids(tokenizer.vocab_size()), eos,
      device);
  return prompt + tokenizer.decode(generated);
}

int64_t hf_pad_id(const text::Tokenizer& tokenizer) {
  const text::SpecialTokens& special = tokenizer.special_tokens();
  return special.pad ? *special.pad : special.eos ? *special.eos : 0;
}

std::vector<std::string> default_lora_targets(const std::string& model_type) {
  if (model_type == "gpt2")
    return {"c_attn"};
  if (model_type == "distilbert")
    return {"q_lin", "v_lin"};
  if (model_type == "modernbert")
    return {"Wqkv"};  // queries, keys and values in one product
  if (models::hf_task_of(model_type) == models::HfTask::kClassification)
    return {"query", "value"};  // BERT's, RoBERTa's and ELECTRA's
  return {"q_proj", "v_proj"};
}

int64_t hf_context(const HfWorkloadOptions& options, bool classification, int64_t max_positions) {
  BB_CHECK_INPUT(options.context >= 0, "hf.context must be >= 0 (0: the default), got ",
                 options.context);
  BB_CHECK_INPUT(options.context <= max_positions, "hf.context = ", options.context,
                 " exceeds the model's ", max_positions, " positions (", options.model_path, ")");
  if (options.context > 0)
    return options.context;
  return std::min<int64_t>(classification ? 128 : 256, max_positions);
}

Workload build_hf_workload(const HfWorkloadOptions& options, HfWorkloadParts* parts) {
  const std::string model_type = models::read_hf_model_type(options.model_path);
  const bool classification = models::hf_task_of(model_type) == models::HfTask::kClassification;
  const std::shared_ptr<const text::Tokenizer> tokenizer = text::load_tokenizer(options.model_path);
  Workload w;
  w.name = "hf-" + model_type;

  ClassificationData classes;
  const int64_t context =
      hf_context(options, classification, models::read_hf_max_positions(options.model_path));
  // A causal LM is loaded (and its checkpoint checked) before its data is tokenized; a
  // classifier after it, with a head of as many classes as the data has.
  models::HfModel model;
  if (classification)
    classes = classification_data(options, *tokenizer, context);
  // The PEFT adapter the LoRA adapters start from, if any.
  std::optional<models::PeftLoraConfig> start;
  if (options.adapter.lora && !options.adapter.init_from.empty())
    start = models::read_peft_lora_config(options.adapter.init_from);
  {
    // Linear weights that LoRA will freeze narrow are built narrow, so that the model is never
    // whole in float32. Where some train in full, they are loaded in float32 as the rest.
    const bool frozen_narrow = options.adapter.lora &&
                               options.adapter.frozen_dtype != torch::kFloat &&
                               options.adapter.lora_options.trainable().empty() &&
                               !options.float64 && (!start || start->modules_to_save.empty());
    std::optional<nn::LinearStorageScope> narrow_linears;
    if (frozen_narrow)
      narrow_linears.emplace(options.adapter.frozen_dtype);
    model =
        models::load_hf_model(options.model_path, static_cast<int64_t>(classes.class_names.size()));
  }
  if (options.float64)
    model.module()->to(torch::kFloat64);
  const std::string adapter_row = adapt(model, options.adapter, start, options.model_path);
  model.set_checkpointing(options.checkpointing);
  model.set_skip_padding(options.skip_padding);
  w.module = model.module();
  w.attention_keys = context;
  w.llama_ops = !model.llama.is_empty();
  w.attention_softcap = w.llama_ops && model.llama->config().attn_logit_softcapping() > 0;
  w.lookup_parameters = model.lookup_parameters();
  if (model.bert) {
    for (size_t i = 0; i < model.bert->layer->size(); ++i) {
      const auto& layer = *model.bert->layer->ptr(i)->as<models::HfBertLayer>();
      w.block_dropout = layer.dropout();
      w.block_adapters = w.block_adapters || layer.has_adapters();
    }
  }
  if (const std::string dropouts = model.dropouts(); !dropouts.empty()) {
    w.concurrency_need = cat("a model without dropout: ", options.model_path, "/config.json has ",
                             dropouts, " (or run one micro-batch at a time)");
  } else if (options.adapter.lora && options.adapter.lora_options.dropout() > 0.0) {
    w.concurrency_need =
        dropout_concurrency_need("adapter.dropout", options.adapter.lora_options.dropout());
  }

  const int64_t pad = hf_pad_id(*tokenizer);
  if (classification) {
    w.train = classes.train;
    w.val = classes.val;
    w.data_description = classes.description;
    // Padding is masked out of attention: the inputs are right-padded with the pad id.
    w.objective = std::make_unique<engine::CrossEntropyObjective>(
        [model, pad](const torch::Tensor& inputs) { return model.forward(inputs, inputs.ne(pad)); },
        engine::LossUnit::kSample);
  } else {
    if (ends_with(options.data_path, ".jsonl"))
      add_instruction_data(options, *tokenizer, context, w);
    else
      add_document_data(options, *tokenizer, context, w);
    // Right padding needs no attention mask in a causal model: no real token attends to a later
    // position. The targets there are kIgnoreIndex.
    w.objective = std::make_unique<engine::CrossEntropyObjective>(
        [model](const torch::Tensor& inputs) { return model.forward(inputs); },
        engine::LossUnit::kToken, kIgnoreIndex);
  }
  w.description =
      cat(model.describe(), ", context ", context, " tokens",
          model.fresh.empty() ? "" : cat("; fresh: ", join(model.fresh)),
          model.unused.empty() ? ""
                               : cat("; unused: ", model.unused.size(),
                                     model.unused.size() == 1 ? " tensor" : " tensors",
                                     " of the checkpoint's other heads (", model.unused.front(),
                                     model.unused.size() > 1 ? ", ..." : "", ")"));
  const std::string tokenizer_row = tokenizer->description();
  const std::string trainable = trainable_share(*w.module);
  const std::string frozen_dtype = !options.adapter.lora                              ? ""
                                   : options.adapter.frozen_dtype == torch::kBFloat16 ? "bfloat16"
                                   : options.adapter.frozen_dtype == torch::kHalf     ? "float16"
                                                                                      : "float32";
  w.add_model_rows = [=, checkpointing = options.checkpointing](Table& table, const engine::Plan&) {
    table.add("model directory", options.model_path, "config.json, weights, tokenizer");
    table.add("tokenizer", tokenizer_row, "");
    table.add("adapter", adapter_row, cat("trainable parameters: ", trainable));
    if (!frozen_dtype.empty())
      table.add("frozen weights", frozen_dtype, "storage of the frozen linear-layer weights");
    table.add("checkpointing", checkpointing.to_string(),
              checkpointing.mode == nn::CheckpointMode::kNone
                  ? "activations kept for backward"
                  : "recomputed in backward: less memory, more time");
    if (classification) {
      table.add("padding", options.skip_padding ? "skipped" : "computed",
                options.skip_padding
                    ? "hf.skip_padding: the encoder computes only the real tokens of a micro-batch"
                    : "hf.skip_padding = false: every padded position is computed too");
    }
  };
  if (parts != nullptr)
    *parts = {model, tokenizer, classes.class_names};
  if (!classification && options.sample.max_new_bytes() > 0) {
    w.generate_sample = [model, tokenizer, context, prompt = options.prompt,
                         sample = options.sample]() {
      torch::NoGradGuard no_grad;
      nn::ModeGuard eval_mode(*model.module(), /*train=*/false);
      return continue_prompt(model.causal_lm(), *tokenizer, prompt, context, sample,
                             device_of(*model.module()));
    };
    w.sample_heading = cat("sample (temperature ", options.sample.temperature(), ", top-k ",
                           options.sample.top_k(), ")");
  }
  return w;
}

}  // namespace bigbatch::job
