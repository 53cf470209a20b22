#include "bigbatch/engine/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "bigbatch/core/check.h"
#include "bigbatch/core/device.h"
#include "bigbatch/core/rng_state.h"
#include "bigbatch/engine/summary_json.h"
#include "bigbatch/io/checkpoint_file.h"

namespace bigbatch::engine {

namespace fs = std::filesystem;
// Keys keep their insertion order, so a header reads format, version and position first.
using json = nlohmann::ordered_json;

namespace {

constexpr const char* kFormatName = "bigbatch training checkpoint";
constexpr const char* kFilePrefix = "step-";
constexpr const char* kFileSuffix = ".ckpt";

/// A model tensor as the header lists it.
struct TensorEntry {
  std::string name;
  torch::Tensor tensor;
  bool buffer = false;
};

/// Parameters, then buffers, in the module's own order (the order is part of the format).
std::vector<TensorEntry> model_tensors(torch::nn::Module& model) {
  std::vector<TensorEntry> entries;
  for (const auto& item : model.named_parameters(/*recurse=*/true))
    entries.push_back({item.key(), item.value(), false});
  for (const auto& item : model.named_buffers(/*recurse=*/true))
    entries.push_back({item.key(), item.value(), true});
  return entries;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i)
    out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

std::string optimizer_kind(const torch::optim::Optimizer& optimizer) {
  if (dynamic_cast<const torch::optim::AdamW*>(&optimizer) != nullptr)
    return "adamw";
  if (dynamic_cast<const torch::optim::Adam*>(&optimizer) != nullptr)
    return "adam";
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer) != nullptr)
    return "sgd";
  return "other";
}

std::string file_name(int64_t steps) {
  char name[64];
  std::snprintf(name, sizeof(name), "%s%08lld%s", kFilePrefix, static_cast<long long>(steps),
                kFileSuffix);
  return name;
}

/// The step in a checkpoint file name, or -1 for other names.
int64_t step_of(const std::string& name) {
  const std::string prefix = kFilePrefix;
  const std::string suffix = kFileSuffix;
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  const std::string digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stoll(digits);
}

/// A checkpoint file read, verified and parsed, not yet applied to anything.
struct ParsedCheckpoint {
  json header;
  torch::serialize::InputArchive archive;
};

/// Reads the checkpoint at `path`, its tensors mapped onto `device` (wherever they were saved
/// from), so that a run saved on a GPU resumes on the CPU and the other way round.
ParsedCheckpoint parse(const std::string& path, c10::Device device = c10::Device(c10::kCPU)) {
  io::CheckpointFile file = io::read_checkpoint_file(path);
  ParsedCheckpoint parsed;
  try {
    parsed.header = json::parse(file.header);
    BB_CHECK_INPUT(parsed.header.value("format", "") == kFormatName,
                   "not a training checkpoint (format \"", parsed.header.value("format", ""),
                   "\")");
  } catch (const std::exception& error) {
    throw io::CheckpointFileError(path, cat("unreadable header: ", error.what()));
  }
  try {
    parsed.archive.load_from(file.payload.data(), file.payload.size(), device);
  } catch (const c10::Error& error) {
    throw io::CheckpointFileError(path,
                                  cat("unreadable tensors: ", error.what_without_backtrace()));
  }
  return parsed;
}

/// Throws InputError naming `path` unless the header's model tensors are `entries` by name,
/// shape and dtype, in order.
void check_model(const std::string& path, const json& saved,
                 const std::vector<TensorEntry>& entries) {
  std::vector<std::string> missing;
  std::vector<std::string> extra;
  std::map<std::string, const json*> by_name;
  for (const json& item : saved)
    by_name[item.at("name").get<std::string>()] = &item;
  for (const TensorEntry& entry : entries) {
    const auto found = by_name.find(entry.name);
    if (found == by_name.end()) {
      missing.push_back(entry.name);
      continue;
    }
    const json& item = *found->second;
    const auto shape = item.at("shape").get<std::vector<int64_t>>();
    const std::string dtype = item.at("dtype").get<std::string>();
    const std::string here = c10::toString(entry.tensor.scalar_type());
    BB_CHECK_INPUT(shape == entry.tensor.sizes().vec() && dtype == here, path,
                   " is a checkpoint of another model: its tensor ", entry.name, " is ",
                   shape_text(shape), " ", dtype, ", this model's is ",
                   shape_text(entry.tensor.sizes().vec()), " ", here);
    by_name.erase(found);
  }
  for (const auto& [name, item] : by_name)
    extra.push_back(name);
  if (missing.empty() && extra.empty())
    return;
  auto some = [](const std::vector<std::string>& names) {
    std::string text;
    for (size_t i = 0; i < names.size() && i < 3; ++i)
      text += (i ? ", " : "") + names[i];
    return names.size() > 3 ? cat(text, " and ", names.size() - 3, " more") : text;
  };
  throw InputError(
      cat(path, " is a checkpoint of another model: ",
          missing.empty() ? "" : cat("this model's ", some(missing), " missing there"),
          !missing.empty() && !extra.empty() ? "; " : "",
          extra.empty() ? "" : cat("it holds ", some(extra), " that this model lacks")));
}

/// The model tensors of a parsed checkpoint, in `entries` order (names and shapes checked).
std::vector<torch::Tensor> read_model(const std::string& path, ParsedCheckpoint& parsed,
                                      const std::vector<TensorEntry>& entries) {
  const json& saved = parsed.header.at("model");
  check_model(path, saved, entries);
  torch::serialize::InputArchive model_archive;
  parsed.archive.read("model", model_archive);
  std::map<std::string, torch::Tensor> by_name;
  for (size_t i = 0; i < saved.size(); ++i) {
    torch::Tensor tensor;
    model_archive.read(cat("t", i), tensor, saved[i].at("buffer").get<bool>());
    by_name[saved[i].at("name").get<std::string>()] = tensor;
  }
  std::vector<torch::Tensor> tensors;
  for (const TensorEntry& entry : entries) {
    const torch::Tensor& tensor = by_name.at(entry.name);
    if (!tensor.sizes().equals(entry.tensor.sizes()) ||
        tensor.scalar_type() != entry.tensor.scalar_type())
      throw io::CheckpointFileError(
          path, cat("its tensor ", entry.name, " does not match its own header"));
    tensors.push_back(tensor);
  }
  return tensors;
}

void copy_into(const std::vector<TensorEntry>& entries, const std::vector<torch::Tensor>& saved) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < entries.size(); ++i)
    entries[i].tensor.copy_(saved[i]);
}

LoopState loop_state_from(const json& header) {
  LoopState state;
  state.summary = summary_from_json(header.at("summary"));
  state.data.epoch = header.at("data").at("epoch").get<int64_t>();
  state.data.cursor = header.at("data").at("cursor").get<int64_t>();
  state.windows = header.at("windows").get<int64_t>();
  state.consecutive_skips = header.at("consecutive_skips").get<int64_t>();
  state.micro_batch = header.at("micro_batch").get<int64_t>();
  return state;
}

LoadedCheckpoint info_of(const std::string& path, const json& header) {
  LoadedCheckpoint loaded;
  loaded.path = path;
  try {
    loaded.state = loop_state_from(header);
  } catch (const json::exception& error) {
    throw io::CheckpointFileError(path, cat("incomplete header: ", error.what()));
  }
  loaded.run_json = header.contains("run") ? header.at("run").dump() : "{}";
  return loaded;
}

}  // namespace

Checkpointer::Checkpointer(const CheckpointParts& parts, CheckpointOptions options)
    : parts_(parts), options_(std::move(options)) {
  BB_CHECK(parts.model && parts.optimizer && parts.plan, "CheckpointParts is missing a part");
  BB_CHECK_INPUT(options_.keep() >= 1, "CheckpointOptions.keep = ", options_.keep(),
                 " must be >= 1");
  std::error_code error;
  fs::create_directories(options_.directory(), error);
  if (error) {
    throw std::runtime_error(
        cat("cannot create checkpoint directory ", options_.directory(), ": ", error.message()));
  }
  // A save killed before its rename leaves `<file>.tmp.<pid>`; it holds nothing that is needed.
  for (const auto& item : fs::directory_iterator(options_.directory(), error)) {
    const std::string name = item.path().filename().string();
    if (name.rfind(kFilePrefix, 0) == 0 &&
        name.find(std::string(kFileSuffix) + ".tmp.") != std::string::npos)
      fs::remove(item.path(), error);
  }
}

namespace {

/// The archive of one rank's random generator states ("rng" for rank 0, as in a single process).
std::string rng_archive_name(int64_t rank) {
  return rank == 0 ? std::string("rng") : cat("rng_rank", rank);
}

}  // namespace

namespace {

/// Writes the model's tensors into `archive` under "model"; returns their header entries.
json write_model(torch::serialize::OutputArchive& archive, torch::nn::Module& module) {
  const std::vector<TensorEntry> entries = model_tensors(module);
  torch::serialize::OutputArchive model_archive(archive.compilation_unit());
  json model = json::array();
  for (size_t i = 0; i < entries.size(); ++i) {
    // On the CPU, whatever the model's device: `bigbatch export` reads it on any machine.
    model_archive.write(cat("t", i), entries[i].tensor.detach().cpu(), entries[i].buffer);
    model.push_back({{"name", entries[i].name},
                     {"shape", entries[i].tensor.sizes().vec()},
                     {"dtype", c10::toString(entries[i].tensor.scalar_type())},
                     {"buffer", entries[i].buffer}});
  }
  archive.write("model", model_archive);
  return model;
}

/// Writes the generators the model's computations draw from (dropout): the CPU one, and in CUDA
/// builds that of the model's device; under data parallel those of every rank. Returns their
/// names.
json write_rng(torch::serialize::OutputArchive& archive, const LoopState& state,
               torch::nn::Module& module) {
  std::vector<std::vector<std::pair<std::string, torch::Tensor>>> rank_states =
      state.rank_rng_states;
  if (rank_states.empty())
    rank_states.push_back(RngState::capture(module).states());
  json rng = json::array();
  for (const auto& named : rank_states.front())
    rng.push_back(named.first);
  for (size_t rank = 0; rank < rank_states.size(); ++rank) {
    torch::serialize::OutputArchive rng_archive(archive.compilation_unit());
    for (size_t i = 0; i < rank_states[rank].size(); ++i)
      rng_archive.write(cat("s", i), rank_states[rank][i].second);
    archive.write(rng_archive_name(static_cast<int64_t>(rank)), rng_archive);
  }
  return rng;
}

}  // namespace

void Checkpointer::save(const LoopState& state) {
  torch::serialize::OutputArchive archive;
  const json model = write_model(archive, *parts_.model);
  torch::serialize::OutputArchive optimizer_archive(archive.compilation_unit());
  parts_.optimizer->save(optimizer_archive);
  archive.write("optimizer", optimizer_archive);
  const json rng = write_rng(archive, state, *parts_.model);

  json header = {{"format", kFormatName},
                 {"bigbatch_version", BIGBATCH_VERSION},
                 {"steps", state.summary.steps},
                 {"windows", state.windows},
                 {"consecutive_skips", state.consecutive_skips},
                 {"micro_batch", state.micro_batch},
                 {"global_batch", parts_.plan->global_batch},
                 {"world_size", parts_.plan->world_size},
                 {"data", {{"epoch", state.data.epoch}, {"cursor", state.data.cursor}}},
                 {"summary", to_json(state.summary)},
                 {"optimizer", optimizer_kind(*parts_.optimizer)},
                 {"model", model},
                 {"rng", rng}};
  if (parts_.loss_scaler != nullptr) {
    const LossScalerState& scaler = parts_.loss_scaler->state();
    header["loss_scaler"] = {{"scale", scaler.scale},
                             {"clean_windows", scaler.clean_windows},
                             {"skipped_windows", scaler.skipped_windows}};
  } else {
    header["loss_scaler"] = nullptr;
  }
  header["run"] = annotate_ ? json::parse(annotate_()) : json::object();

  const std::string path =
      (fs::path(options_.directory()) / file_name(state.summary.steps)).string();
  // The archive streams into the file: no in-memory copy of the weights and optimizer state. No
  // exception may cross LibTorch's zip writer (its destructor writes too, and would terminate):
  // the first failure (a full disk) is kept, the rest of the archive skipped, and it is rethrown.
  io::write_checkpoint_file(path, header.dump(1), [&archive](const io::PayloadSink& sink) {
    std::exception_ptr failure;
    archive.save_to([&sink, &failure](const void* data, size_t size) {
      if (!failure) {
        try {
          sink(data, size);
        } catch (...) {
          failure = std::current_exception();
        }
      }
      return size;
    });
    if (failure)
      std::rethrow_exception(failure);
  });
  last_path_ = path;
  std::vector<std::string> files = list_checkpoints(options_.directory());
  std::error_code error;
  for (size_t i = 0; i + options_.keep() < files.size(); ++i)
    fs::remove(files[i], error);
}

std::vector<std::string> list_checkpoints(const std::string& directory) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code error;
  for (const auto& item : fs::directory_iterator(directory, error)) {
    const int64_t step = step_of(item.path().filename().string());
    if (step >= 0 && item.is_regular_file(error))
      found.emplace_back(step, item.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> files;
  for (auto& item : found)
    files.push_back(std::move(item.second));
  return files;
}

LoadedCheckpoint read_checkpoint_info(const std::string& path) {
  const ParsedCheckpoint parsed = parse(path);
  return info_of(path, parsed.header);
}

void load_model_weights(const std::string& path, torch::nn::Module& model) {
  ParsedCheckpoint parsed = parse(path);
  const std::vector<TensorEntry> entries = model_tensors(model);
  copy_into(entries, read_model(path, parsed, entries));
}

LoadedCheckpoint load_checkpoint(const std::string& path, const CheckpointParts& parts) {
  BB_CHECK(parts.model && parts.optimizer && parts.plan, "CheckpointParts is missing a part");
  // The optimizer's state is loaded where the parameters are.
  const c10::Device device = device_of(*parts.model);
  ParsedCheckpoint parsed = parse(path, device);
  const json& header = parsed.header;
  LoadedCheckpoint loaded = info_of(path, header);
  // Everything is checked and read before anything is changed.
  const int64_t global_batch = header.at("global_batch").get<int64_t>();
  const int64_t world_size = header.at("world_size").get<int64_t>();
  BB_CHECK_INPUT(global_batch == parts.plan->global_batch, path, " was saved at global batch ",
                 global_batch, "; this run has ", parts.plan->global_batch,
                 ". Resuming at another global batch would change the data order and every "
                 "later step; start a new run instead");
  BB_CHECK_INPUT(world_size == parts.plan->world_size, path, " was saved by ", world_size,
                 " process(es); this run has ", parts.plan->world_size);
  const std::string saved_optimizer = header.at("optimizer").get<std::string>();
  BB_CHECK_INPUT(saved_optimizer == optimizer_kind(*parts.optimizer), path, " holds ",
                 saved_optimizer, " optimizer state; this run uses ",
                 optimizer_kind(*parts.optimizer));
  const bool saved_scaler = !header.at("loss_scaler").is_null();
  BB_CHECK_INPUT(saved_scaler == (parts.loss_scaler != nullptr), path, " was saved ",
                 saved_scaler ? "with" : "without", " a loss scaler; this run has ",
                 parts.loss_scaler != nullptr ? "one" : "none",
                 " (a run keeps its loss scaling: the same precision and loss scale mode)");
  const std::vector<TensorEntry> entries = model_tensors(*parts.model);
  const std::vector<torch::Tensor> model = read_model(path, parsed, entries);
  torch::serialize::InputArchive optimizer_archive;
  parsed.archive.read("optimizer", optimizer_archive);
  torch::serialize::InputArchive rng_archive;
  parsed.archive.read(rng_archive_name(parts.rank), rng_archive);
  std::vector<std::pair<std::string, torch::Tensor>> rng_states;
  const json& rng_names = header.at("rng");
  for (size_t i = 0; i < rng_names.size(); ++i) {
    torch::Tensor state;
    rng_archive.read(cat("s", i), state);
    // The CPU's generator, and this run's device's: a GPU's state means nothing on another device.
    const std::string name = rng_names[i].get<std::string>();
    if (name == "cpu" || name == device.str())
      rng_states.emplace_back(name, state.cpu());
  }
  const RngState rng = RngState::from_states(rng_states);

  copy_into(entries, model);
  try {
    parts.optimizer->load(optimizer_archive);
  } catch (const c10::Error& error) {
    throw InputError(cat(path, ": its optimizer state does not fit this optimizer: ",
                         error.what_without_backtrace()));
  }
  if (parts.loss_scaler != nullptr) {
    const json& scaler = header.at("loss_scaler");
    LossScalerState state;
    state.scale = scaler.at("scale").get<double>();
    state.clean_windows = scaler.at("clean_windows").get<int64_t>();
    state.skipped_windows = scaler.at("skipped_windows").get<int64_t>();
    parts.loss_scaler->load_state(state);
  }
  rng.restore();
  return loaded;
}

namespace {

/// `open` applied to the newest checkpoint in `directory` that does not throw
/// io::CheckpointFileError, the newer ones it passed over listed with their causes.
template <typename Open>
LoadedCheckpoint newest_that_opens(const std::string& directory, Open open) {
  const std::vector<std::string> files = list_checkpoints(directory);
  BB_CHECK_INPUT(!files.empty(), "no checkpoint in ", directory,
                 " (files named step-NNNNNNNN.ckpt); the run stopped before its first "
                 "checkpoint, so start it again");
  std::vector<std::string> skipped;
  for (auto file = files.rbegin(); file != files.rend(); ++file) {
    try {
      LoadedCheckpoint loaded = open(*file);
      loaded.skipped = skipped;
      return loaded;
    } catch (const io::CheckpointFileError& error) {
      skipped.push_back(error.what());
    }
  }
  std::string causes;
  for (const std::string& cause : skipped)
    causes += "\n  " + cause;
  throw InputError(cat("no usable checkpoint in ", directory, ":", causes));
}

}  // namespace

LoadedCheckpoint load_newest_checkpoint(const std::string& directory,
                                        const CheckpointParts& parts) {
  return newest_that_opens(
      directory, [&parts](const std::string& file) { return load_checkpoint(file, parts); });
}

LoadedCheckpoint newest_checkpoint_info(const std::string& directory) {
  return newest_that_opens(directory, read_checkpoint_info);
}

}  // namespace bigbatch::engine
