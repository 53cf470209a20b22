#include "bigbatch/job/builtin_workload.h"

#include "bigbatch/core/check.h"
#include "bigbatch/data/context_dataset.h"
#include "bigbatch/data/image_dataset.h"
#include "bigbatch/data/sequence_dataset.h"
#include "bigbatch/job/concurrency_choice.h"
#include "bigbatch/models/model_export.h"
#include "bigbatch/nn/norm.h"

namespace bigbatch::job {

using models::ModelKind;

namespace {

/// Class names when the data gives none: "0" .. "N-1".
std::vector<std::string> numbered_classes(int64_t classes) {
  std::vector<std::string> names;
  for (int64_t i = 0; i < classes; ++i)
    names.push_back(std::to_string(i));
  return names;
}

LoadedData load_images(const IdxDataOptions& idx, uint64_t seed) {
  LoadedData loaded;
  // Inputs are normalised with the training images' own per-channel mean and deviation.
  const data::ImageDataset raw = data::load_idx_classification(
      idx.train_images, idx.train_labels,
      data::ImageDatasetOptions().subsample(idx.subsample).subsample_seed(seed));
  const data::PixelStats stats = raw.pixel_stats();
  const auto options =
      data::ImageDatasetOptions().mean(stats.mean).std(stats.std).num_classes(raw.num_classes());
  auto train = std::make_shared<data::ImageDataset>(
      raw.images(), raw.labels(), data::ImageDatasetOptions(options).name("train"));
  auto test = std::make_shared<data::ImageDataset>(data::load_idx_classification(
      idx.test_images, idx.test_labels, data::ImageDatasetOptions(options).name("test")));
  loaded.classes = train->num_classes();
  loaded.in_channels = train->images().size(1);
  const bool fashion_mnist =
      idx.train_images == data::fashion_mnist_paths(data::kFashionMnistDirectory, "train").images;
  loaded.class_names = !train->class_names().empty()           ? train->class_names()
                       : fashion_mnist && loaded.classes == 10 ? data::fashion_mnist_class_names()
                                                               : numbered_classes(loaded.classes);
  loaded.description = cat("IDX files ", idx.train_images, ", ", idx.test_images);
  loaded.train = std::move(train);
  loaded.test = std::move(test);
  return loaded;
}

/// The GPT's or MLP's next-byte datasets over the corpus, objective and description.
void add_language_model_data(const BuiltinModelOptions& options, const data::TextCorpus& corpus,
                             const models::BuiltModel& model, Workload& w) {
  if (options.kind == ModelKind::kGpt) {
    const auto sequences = data::SequenceDatasetOptions(options.gpt.context());
    w.train = std::make_shared<data::SequenceDataset>(
        corpus.train_shared(), data::SequenceDatasetOptions(sequences).name("train"));
    if (corpus.val().size() >= 2) {  // one input byte and its target
      w.val = std::make_shared<data::SequenceDataset>(
          corpus.val_shared(), data::SequenceDatasetOptions(sequences).name("validation"));
    }
    w.objective = std::make_unique<engine::CrossEntropyObjective>(
        model.forward, engine::LossUnit::kToken, sequences.ignore_index());
    w.description = cat(options.gpt.layers(), " layers, ", options.gpt.heads(), " heads, width ",
                        options.gpt.embed(), ", context ", options.gpt.context(), " bytes");
    return;
  }
  const auto contexts = data::ContextDatasetOptions(options.mlp.context());
  w.train = std::make_shared<data::ContextDataset>(
      corpus.train_shared(), data::ContextDatasetOptions(contexts).name("train"));
  if (corpus.val().size() > static_cast<size_t>(options.mlp.context())) {
    w.val = std::make_shared<data::ContextDataset>(
        corpus.val_shared(), data::ContextDatasetOptions(contexts).name("validation"));
  }
  w.objective =
      std::make_unique<engine::CrossEntropyObjective>(model.forward, engine::LossUnit::kSample);
  w.description = cat(options.mlp.layers(), " hidden layers of ", options.mlp.hidden(),
                      ", context ", options.mlp.context(), " bytes");
}

/// The ResNet's or BERT's objective, description and the loaded splits.
void add_classifier_data(const BuiltinModelOptions& options, const models::ModelSpec& spec,
                         const LoadedData& data, const models::BuiltModel& model, Workload& w) {
  w.objective =
      std::make_unique<engine::CrossEntropyObjective>(model.forward, engine::LossUnit::kSample);
  if (options.kind == ModelKind::kResnet) {
    const models::ResNetOptions& resnet = spec.resnet;
    const bool to_group = resnet.norm() != options.resnet.norm();  // norm_policy = group
    w.description =
        cat(resnet.depth(), " layers, width ", resnet.width(), ", ", nn::to_string(resnet.norm()),
            " norm", to_group ? " (BatchNorm replaced, norm_policy = group)" : "", ", ",
            resnet.classes(), " classes");
  } else {
    const models::BertOptions& bert = spec.bert;
    w.description = cat(bert.layers(), " layers, ", bert.heads(), " heads, width ", bert.embed(),
                        ", context ", bert.context(), " bytes, ", bert.classes(), " classes");
  }
  w.train = data.train;
  w.val = data.test;
}

/// The plan table's checkpointing and norm_policy rows.
std::function<void(Table&, const engine::Plan&)> model_rows(const BuiltinModelOptions& options,
                                                            int64_t batch_norms) {
  return [options, batch_norms](Table& table, const engine::Plan& plan) {
    if (!options.init_from.empty())
      table.add("init_from", options.init_from,
                "the weights training started from: every parameter and buffer");
    if (options.kind != ModelKind::kMlp) {
      table.add("checkpointing", options.checkpointing.to_string(),
                options.checkpointing.mode == nn::CheckpointMode::kNone
                    ? "activations kept for backward"
                    : "recomputed in backward: less memory, more time");
    }
    if (batch_norms > 0) {
      const std::string notice = engine::batch_norm_notice(batch_norms, plan, options.norm_policy);
      table.add(
          "norm_policy", engine::to_string(options.norm_policy),
          notice.empty() ? "one micro-batch per window: BatchNorm sees the whole batch" : notice);
    }
  };
}

}  // namespace

LoadedData load_builtin_data(ModelKind kind, const BuiltinDataOptions& options) {
  if (kind == ModelKind::kResnet)
    return load_images(options.idx, options.seed);
  LoadedData loaded;
  if (kind == ModelKind::kBert) {
    const data::FortuneCollections fortunes = data::FortuneCollections::load(
        data::FortuneCollectionsOptions(options.fortunes).seed(options.seed));
    loaded.classes = static_cast<int64_t>(fortunes.class_names().size());
    loaded.class_names = fortunes.class_names();
    loaded.description = cat(fortunes.describe(), " in ", options.fortunes.directory());
    loaded.train = fortunes.train_shared();
    loaded.test = fortunes.test_shared();
    return loaded;
  }
  auto corpus = std::make_shared<data::TextCorpus>(data::TextCorpus::load(options.text));
  loaded.description = corpus->describe();
  loaded.corpus = std::move(corpus);
  return loaded;
}

models::ModelSpec describe_model(const BuiltinModelOptions& options, const LoadedData& data) {
  models::ModelSpec spec;
  spec.kind = options.kind;
  spec.float64 = options.float64;
  if (options.kind == ModelKind::kGpt) {
    spec.gpt = options.gpt;
  } else if (options.kind == ModelKind::kMlp) {
    spec.mlp = options.mlp;
  } else if (options.kind == ModelKind::kResnet) {
    const auto* images = dynamic_cast<const data::ImageDataset*>(data.train.get());
    BB_CHECK(images != nullptr, "describe_model: a resnet needs an ImageDataset to train on");
    spec.resnet = options.resnet;
    spec.resnet.classes(data.classes).in_channels(data.in_channels);
    // norm_policy = group builds GroupNorm where the options asked for BatchNorm.
    if (options.norm_policy == engine::NormPolicy::kGroup &&
        spec.resnet.norm() == nn::NormKind::kBatch)
      spec.resnet.norm(nn::NormKind::kGroup);
    const auto sizes = images->images().sizes();  // (N, C, H, W)
    spec.image = {sizes[1], sizes[2], sizes[3], images->options().mean(), images->options().std()};
    spec.class_names = data.class_names;
  } else if (options.kind == ModelKind::kBert) {
    const auto* fortunes = dynamic_cast<const data::FortuneDataset*>(data.train.get());
    BB_CHECK(fortunes != nullptr, "describe_model: a bert needs a FortuneDataset to train on");
    spec.bert = options.bert;
    spec.bert.classes(data.classes).context(fortunes->max_bytes()).pad_id(data::kFortunePadId);
    spec.class_names = data.class_names;
  }
  return spec;
}

Workload build_builtin_workload(const BuiltinModelOptions& options, const LoadedData& data,
                                const PassSite& site) {
  Workload w;
  w.name = models::to_string(options.kind);
  // Built through the spec, so an export rebuilds exactly this module (names and structure).
  const models::ModelSpec spec = describe_model(options, data);
  models::BuiltModel model = models::build_model(spec);  // in the spec's dtype
  // Initialised first all the same, so that the generator's later draws do not depend on it.
  if (!options.init_from.empty())
    models::load_weights(*model.module, options.init_from, models::model_words(spec));
  models::set_checkpointing(model, options.checkpointing);
  w.module = model.module;
  w.model_spec = models::spec_to_json(spec);
  w.data_description = data.description;
  if (data.corpus)
    add_language_model_data(options, *data.corpus, model, w);
  else
    add_classifier_data(options, spec, data, model, w);
  const int64_t batch_norms = nn::count_batch_norms(*w.module);
  if (options.norm_policy == engine::NormPolicy::kGhost && batch_norms > 0) {
    nn::set_running_stats_mode(*w.module, nn::RunningStatsMode::kPerWindow);
    w.window_hooks.push_back(std::make_shared<engine::BatchNormWindowHooks>(*w.module));
  }
  if (model.gpt) {
    w.attention_keys = spec.gpt.context();
    w.block_dropout = spec.gpt.dropout();
  } else if (model.bert) {
    w.attention_keys = spec.bert.context() + 1;  // [CLS] and the text
    w.block_dropout = spec.bert.dropout();
  }
  w.add_model_rows = model_rows(options, batch_norms);
  w.concurrency_need = concurrency_need(options, site);
  if (options.kind == ModelKind::kResnet)
    w.positions_per_sample = spec.image.height * spec.image.width;
  if (model.gpt && options.sample.max_new_bytes() > 0) {
    w.generate_sample = [gpt = model.gpt, prompt = options.prompt,
                         sample = options.sample]() mutable {
      return models::generate_text(gpt, prompt, sample);
    };
    w.sample_heading = cat("sample (temperature ", options.sample.temperature(), ", top-k ",
                           options.sample.top_k(), ")");
  }
  return w;
}

std::string concurrency_need(const BuiltinModelOptions& options, const PassSite& site) {
  // Per-call running statistics are deferred (in micro-batch order) only from nn::BatchNorm's
  // fused kernel; per-window ones from any forward.
  const bool batch_norm = options.kind == ModelKind::kResnet &&
                          options.resnet.norm() == nn::NormKind::kBatch &&
                          options.norm_policy == engine::NormPolicy::kKeep;
  const bool fused_batch_norm =
      !options.float64 && nn::fused_batch_norm_covers(site.precision, site.device);
  if (batch_norm && !fused_batch_norm) {
    return cat(
        "BatchNorm on its fused kernel (float32 or bf16 on the CPU), whose running "
        "statistics several passes write in micro-batch order; this ResNet runs ",
        nn::to_string(site.precision), options.float64 ? " in float64" : "", " on ",
        c10::DeviceTypeName(site.device, /*lower_case=*/true),
        " (set model.norm_policy = \"ghost\" or \"group\", or run one micro-batch at a "
        "time)");
  }
  const double dropout = options.kind == ModelKind::kGpt    ? options.gpt.dropout()
                         : options.kind == ModelKind::kMlp  ? options.mlp.dropout()
                         : options.kind == ModelKind::kBert ? options.bert.dropout()
                                                            : 0.0;
  if (dropout == 0.0)
    return "";
  return dropout_concurrency_need(models::to_string(options.kind) + ".dropout", dropout);
}

MatmulBackend builtin_backend(ModelKind kind) {
  return kind == ModelKind::kResnet ? MatmulBackend::kOneDnn : MatmulBackend::kBlas;
}

}  // namespace bigbatch::job
