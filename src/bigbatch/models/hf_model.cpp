#include "bigbatch/models/hf_model.h"

#include <algorithm>

#include "bigbatch/core/check.h"
#include "bigbatch/core/strings.h"
#include "bigbatch/core/table.h"
#include "bigbatch/io/hf_config.h"

namespace bigbatch::models {

std::string read_hf_model_type(const std::string& directory) {
  io::HfConfig config = io::HfConfig::read(directory);
  std::vector<std::string> types;
  for (const HfArchitecture& architecture : hf_architectures())
    types.push_back(architecture.model_type);
  return config.model_type(types);
}

int64_t read_hf_max_positions(const std::string& directory) {
  const std::string model_type = read_hf_model_type(directory);
  io::HfConfig config = io::HfConfig::read(directory);
  if (model_type == "gpt2")
    return config.get_int("n_positions");
  if (model_type == "modernbert")
    return read_hf_modernbert_config(config).max_position_embeddings();
  if (hf_task_of(model_type) == HfTask::kClassification)
    return read_hf_bert_config(config).max_length();
  return config.get_int("max_position_embeddings");
}

HfTask hf_task_of(const std::string& model_type) {
  return hf_architecture(model_type).task;
}

std::vector<std::string> HfModel::trained_heads() const {
  std::vector<std::string> heads;
  if (task == HfTask::kClassification) {
    for (const auto& item : module()->named_modules("", /*include_self=*/false)) {
      if (ends_with(item.key(), "classifier") || ends_with(item.key(), "score"))
        heads.push_back(item.key());
    }
  }
  std::vector<std::string> modules;
  const auto add = [&modules](const std::string& name) {
    if (std::find(modules.begin(), modules.end(), name) == modules.end())
      modules.push_back(name);
  };
  for (const std::string& name : fresh) {
    std::string owner = name.substr(0, name.rfind('.'));
    for (const std::string& head : heads) {
      if (starts_with(owner + ".", head + "."))
        owner = head;
    }
    add(owner);
  }
  for (const std::string& head : heads)
    add(head);
  return modules;
}

std::shared_ptr<torch::nn::Module> HfModel::module() const {
  if (gpt2)
    return gpt2.ptr();
  if (llama)
    return llama.ptr();
  if (modernbert)
    return modernbert.ptr();
  return bert.ptr();
}

torch::Tensor HfModel::forward(const torch::Tensor& input_ids,
                               const torch::Tensor& attention_mask) const {
  if (gpt2)
    return gpt2.ptr()->forward(input_ids, attention_mask);
  if (llama)
    return llama.ptr()->forward(input_ids, attention_mask);
  if (modernbert)
    return modernbert.ptr()->forward(input_ids, attention_mask);
  return bert.ptr()->forward(input_ids, attention_mask);
}

CausalLm HfModel::causal_lm() const {
  if (task != HfTask::kCausalLm) {
    std::vector<std::string> causal;
    for (const HfArchitecture& architecture : hf_architectures()) {
      if (architecture.task == HfTask::kCausalLm)
        causal.push_back(architecture.model_type);
    }
    throw InputError(cat("a ", model_type, " classifier does not generate text; a causal LM does (",
                         join(causal), ")"));
  }
  CausalLm lm;
  lm.forward = [model = *this](const torch::Tensor& ids) { return model.forward(ids); };
  if (gpt2) {
    lm.forward_cached = [model = gpt2](const torch::Tensor& ids, KvCache& cache) {
      return model.ptr()->forward(ids, cache);
    };
  } else {
    lm.forward_cached = [model = llama](const torch::Tensor& ids, KvCache& cache) {
      return model.ptr()->forward(ids, cache);
    };
  }
  return lm;
}

void HfModel::set_checkpointing(const nn::CheckpointPolicy& policy) const {
  if (gpt2)
    gpt2.ptr()->set_checkpointing(policy);
  else if (llama)
    llama.ptr()->set_checkpointing(policy);
  else if (modernbert)
    modernbert.ptr()->set_checkpointing(policy);
  else
    bert.ptr()->set_checkpointing(policy);
}

void HfModel::set_skip_padding(bool skip) const {
  if (bert)
    bert.ptr()->set_skip_padding(skip);
  else if (modernbert)
    modernbert.ptr()->set_skip_padding(skip);
}

int64_t HfModel::max_positions() const {
  if (gpt2)
    return gpt2->config().n_positions();
  if (llama)
    return llama->config().max_position_embeddings();
  if (modernbert)
    return modernbert->config().max_position_embeddings();
  return bert->config().max_length();
}

int64_t HfModel::outputs() const {
  if (gpt2)
    return gpt2->config().vocab_size();
  if (llama)
    return llama->config().vocab_size();
  if (modernbert)
    return modernbert->config().num_labels();
  return bert->config().num_labels();
}

int64_t HfModel::layers() const {
  if (gpt2)
    return gpt2->config().n_layer();
  if (llama)
    return llama->config().num_hidden_layers();
  if (modernbert)
    return modernbert->config().num_hidden_layers();
  return bert->config().num_hidden_layers();
}

std::string HfModel::describe() const {
  if (gpt2) {
    const HfGpt2Config& c = gpt2->config();
    return cat("gpt2: ", c.n_layer(), " layers, width ", c.n_embd(), ", ", c.n_head(),
               " heads, vocabulary ", group_thousands(c.vocab_size()), ", positions ",
               group_thousands(c.n_positions()));
  }
  if (llama) {
    const HfLlamaConfig& c = llama->config();
    const auto sliding = std::count(c.sliding_layers().begin(), c.sliding_layers().end(), true);
    const std::string window =
        sliding == 0 ? ""
        : sliding == c.num_hidden_layers()
            ? cat(", a sliding window of ", group_thousands(c.sliding_window()),
                  " tokens on every layer")
            : cat(", a sliding window of ", group_thousands(c.sliding_window()), " tokens on ",
                  sliding, " of the ", c.num_hidden_layers(), " layers");
    return cat(c.model_type(), ": ", c.num_hidden_layers(), " layers, width ", c.hidden_size(),
               ", ", c.num_attention_heads(), " heads (", c.num_key_value_heads(),
               " key/value), vocabulary ", group_thousands(c.vocab_size()), ", positions ",
               group_thousands(c.max_position_embeddings()), window);
  }
  if (modernbert) {
    const HfModernBertConfig& c = modernbert->config();
    const auto local = std::count(c.sliding_layers().begin(), c.sliding_layers().end(), true);
    return cat("modernbert: ", c.num_hidden_layers(), " layers (", local,
               " local over a window of ", c.local_attention(), " tokens), width ", c.hidden_size(),
               ", ", c.num_attention_heads(), " heads, vocabulary ",
               group_thousands(c.vocab_size()), ", ", c.num_labels(), " classes, ",
               c.classifier_pooling() == ModernBertPooling::kCls ? "cls" : "mean", " pooling");
  }
  const HfBertConfig& c = bert->config();
  return cat(c.model_type(), ": ", c.num_hidden_layers(), " layers, width ", c.hidden_size(), ", ",
             c.num_attention_heads(), " heads, vocabulary ", group_thousands(c.vocab_size()), ", ",
             c.num_labels(), " classes");
}

int64_t HfModel::lookup_parameters() const {
  if (bert) {
    return bert->word_embeddings->weight.numel() + bert->position_embeddings->weight.numel() +
           (bert->token_type_embeddings ? bert->token_type_embeddings->weight.numel() : 0);
  }
  if (llama)
    return llama->lm_head_weight.defined() ? llama->embed_tokens->weight.numel() : 0;
  if (modernbert)
    return modernbert->tok_embeddings->weight.numel();
  return gpt2->wpe->weight.numel() +
         (gpt2->lm_head_weight.defined() ? gpt2->wte->weight.numel() : 0);
}

std::string HfModel::dropouts() const {
  std::vector<std::pair<std::string, double>> all;
  if (gpt2) {
    const HfGpt2Config& c = gpt2->config();
    all = {{"embd_pdrop", c.embd_pdrop()},
           {"attn_pdrop", c.attn_pdrop()},
           {"resid_pdrop", c.resid_pdrop()}};
  } else if (llama) {
    all = {{"attention_dropout", llama->config().attention_dropout()}};
  } else if (modernbert) {
    const HfModernBertConfig& c = modernbert->config();
    all = {{"embedding_dropout", c.embedding_dropout()},
           {"attention_dropout", c.attention_dropout()},
           {"mlp_dropout", c.mlp_dropout()},
           {"classifier_dropout", c.classifier_dropout()}};
  } else if (bert->config().is_distilbert()) {  // under the names of its config.json
    const HfBertConfig& c = bert->config();
    all = {{"dropout", c.hidden_dropout_prob()},
           {"attention_dropout", c.attention_probs_dropout_prob()},
           {"seq_classif_dropout", c.classifier_dropout()}};
  } else {
    const HfBertConfig& c = bert->config();
    all = {{"hidden_dropout_prob", c.hidden_dropout_prob()},
           {"attention_probs_dropout_prob", c.attention_probs_dropout_prob()},
           {"classifier_dropout", c.classifier_dropout()}};
  }
  std::vector<std::string> drawing;
  for (const auto& [name, p] : all) {
    if (p > 0.0)
      drawing.push_back(cat(name, " ", p));
  }
  return join(drawing);
}

HfModel load_hf_model(const std::string& directory, int64_t num_labels) {
  HfModel model;
  model.model_type = read_hf_model_type(directory);
  model.task = hf_task_of(model.model_type);
  if (model.model_type == "gpt2") {
    model.gpt2 = load_hf_gpt2(directory);
  } else if (model.model_type == "modernbert") {
    LoadedHfModernBert loaded = load_hf_modernbert(directory, num_labels);
    model.modernbert = loaded.model;
    model.fresh = std::move(loaded.fresh);
    model.unused = std::move(loaded.unused);
  } else if (model.task == HfTask::kClassification) {
    LoadedHfBert loaded = load_hf_bert(directory, num_labels);
    model.bert = loaded.model;
    model.fresh = std::move(loaded.fresh);
    model.unused = std::move(loaded.unused);
  } else {
    model.llama = load_hf_llama(directory);
  }
  return model;
}

}  // namespace bigbatch::models
