#include "bigbatch/cli/config_reader.h"

#include <gtest/gtest.h>

#include "bigbatch/core/check.h"
#include "support/test_support.h"

namespace bigbatch {
namespace {

using cli::ConfigReader;

std::string error_of(const std::function<void()>& action) {
  return testing::input_error_of(action);
}

TEST(ConfigReader, ReadsTypedValuesAndDefaults) {
  ConfigReader c = ConfigReader::from_string(
      "[batch]\nglobal_batch = 128\n[optim]\nlr = 3e-4\nnesterov = true\nname = \"sgd\"\n",
      "t.toml");
  EXPECT_EQ(c.get_int("batch.global_batch", 64, ""), 128);
  EXPECT_EQ(c.get_int("batch.micro_batch", 8, ""), 8);
  EXPECT_DOUBLE_EQ(c.get_double("optim.lr", 1.0, ""), 3e-4);
  EXPECT_TRUE(c.get_bool("optim.nesterov", false, ""));
  EXPECT_EQ(c.get_choice("optim.name", "adamw", {"adamw", "sgd"}, ""), "sgd");
  EXPECT_DOUBLE_EQ(c.get_double("batch.global_batch", 0, ""), 128.0);  // integers are numbers
  EXPECT_NO_THROW(c.check_all_used());
}

TEST(ConfigReader, WrongTypesNameKeyValueAndExpectation) {
  ConfigReader c =
      ConfigReader::from_string("[batch]\nglobal_batch = \"64\"\nmicro_batch = 8.5\n", "t.toml");
  EXPECT_EQ(error_of([&] { c.get_int("batch.global_batch", 1, ""); }),
            "t.toml: batch.global_batch = '64' is a string; expected an integer");
  EXPECT_EQ(error_of([&] { c.get_int("batch.micro_batch", 1, ""); }),
            "t.toml: batch.micro_batch = 8.5 is a float; expected an integer");
  ConfigReader choice = ConfigReader::from_string("[optim]\nname = \"adam\"\n", "t.toml");
  EXPECT_NE(error_of([&] {
              choice.get_choice("optim.name", "adamw", {"adamw", "sgd"}, "");
            }).find("optim.name = \"adam\" is not allowed; expected one of \"adamw\", \"sgd\""),
            std::string::npos);
}

TEST(ConfigReader, UnknownKeysAreErrorsWithSuggestions) {
  ConfigReader c = ConfigReader::from_string(
      "[batch]\nglobal_bach = 128\n[optimizer]\nlr = 0.1\n[train]\nsteps = 5\n", "t.toml");
  c.get_int("batch.global_batch", 64, "");
  c.get_double("optim.lr", 1e-3, "");
  c.get_int("train.steps", 1, "");
  const std::string message = error_of([&] { c.check_all_used(); });
  EXPECT_NE(
      message.find("unknown key \"batch.global_bach\" (did you mean \"batch.global_batch\"?)"),
      std::string::npos)
      << message;
  EXPECT_NE(message.find("unknown key \"optimizer.lr\" (did you mean \"optim.lr\"?)"),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find("train.steps"), std::string::npos) << message;
}

TEST(ConfigReader, MalformedTomlNamesLineAndColumn) {
  const std::string message =
      error_of([] { ConfigReader::from_string("[batch]\nglobal_batch = = 3\n", "bad.toml"); });
  EXPECT_EQ(message.rfind("bad.toml:2:", 0), 0u) << message;
  EXPECT_NE(message.find("malformed TOML"), std::string::npos) << message;
}

TEST(ConfigReader, MissingFileIsNamed) {
  EXPECT_EQ(error_of([] { ConfigReader::from_file("/nonexistent/run.toml"); }),
            "config file /nonexistent/run.toml does not exist");
}

TEST(ConfigReader, OverridesParseTomlValuesOrBareStrings) {
  ConfigReader c = ConfigReader::from_string("[batch]\nglobal_batch = 64\n", "t.toml");
  c.set_override("batch.global_batch=256");
  c.set_override("model.kind=mlp");
  c.set_override("optim.lr = 1e-2");
  c.set_override("data.path=/tmp/some file.txt");
  c.set_override("sample.prompt=\"a = b\"");
  EXPECT_EQ(c.get_int("batch.global_batch", 0, ""), 256);
  EXPECT_EQ(c.get_string("model.kind", "", ""), "mlp");
  EXPECT_DOUBLE_EQ(c.get_double("optim.lr", 0, ""), 1e-2);
  EXPECT_EQ(c.get_string("data.path", "", ""), "/tmp/some file.txt");
  EXPECT_EQ(c.get_string("sample.prompt", "", ""), "a = b");
  EXPECT_NE(error_of([&] { c.set_override("no_equals_sign"); }).find("key=value"),
            std::string::npos);
  EXPECT_NE(error_of([&] { c.set_override("batch.global_batch.x=1"); }).find("not a section"),
            std::string::npos);
}

TEST(ConfigReader, ErrorsNameWhereTheValueCameFrom) {
  ConfigReader c = ConfigReader::from_string("[train]\nsteps = \"many\"\n", "run.toml");
  c.set_override("train.seed=\"one\"");
  std::string message = error_of([&] { c.get_int("train.seed", 1, ""); });
  EXPECT_EQ(message.rfind("--set: train.seed = ", 0), 0u) << message;
  message = error_of([&] { c.get_int("train.steps", 1, ""); });
  EXPECT_EQ(message.rfind("run.toml: train.steps = ", 0), 0u) << message;
  EXPECT_EQ(c.source(), "run.toml with --set");
  ConfigReader overrides_only;
  EXPECT_EQ(overrides_only.source(), "defaults");
  overrides_only.set_override("optim.name=adam");
  EXPECT_EQ(overrides_only.source(), "--set");
  message = error_of([&] { overrides_only.get_choice("optim.name", "adamw", {"adamw"}, ""); });
  EXPECT_EQ(message.rfind("--set: optim.name = \"adam\" is not allowed", 0), 0u) << message;
}

TEST(ConfigReader, EachKeyDeclaresHowItMayChangeOnResume) {
  ConfigReader c;
  c.get_int("train.threads", 0, "", cli::ResumeChange::kFree);
  c.get_string("memory.budget", "", "", cli::ResumeChange::kPermitted);
  c.get_choice("optim.name", "adamw", {"adamw", "sgd"}, "");
  const std::map<std::string, cli::ResumeChange> changes = c.resume_changes();
  EXPECT_EQ(changes.at("train.threads"), cli::ResumeChange::kFree);
  EXPECT_EQ(changes.at("memory.budget"), cli::ResumeChange::kPermitted);
  EXPECT_EQ(changes.at("optim.name"), cli::ResumeChange::kForbidden);  // the default
  EXPECT_EQ(changes.size(), 3u);
}

TEST(ConfigReader, ResolvedTomlRoundTrips) {
  ConfigReader c = ConfigReader::from_string("[optim]\nlr = 0.25\n", "t.toml");
  c.get_double("optim.lr", 1e-3, "learning rate");
  c.get_string("data.path", "/a \"quoted\" path", "corpus");
  c.get_int("train.steps", 7, "steps");
  ConfigReader again = ConfigReader::from_string(c.resolved_toml(), "resolved");
  EXPECT_DOUBLE_EQ(again.get_double("optim.lr", 0, ""), 0.25);
  EXPECT_EQ(again.get_string("data.path", "", ""), "/a \"quoted\" path");
  EXPECT_EQ(again.get_int("train.steps", 0, ""), 7);
  EXPECT_NO_THROW(again.check_all_used());
  EXPECT_NE(c.resolved_toml().find("# learning rate"), std::string::npos);
}

TEST(EditDistance, CountsEdits) {
  EXPECT_EQ(cli::edit_distance("global_bach", "global_batch"), 1u);
  EXPECT_EQ(cli::edit_distance("", "abc"), 3u);
  EXPECT_EQ(cli::edit_distance("kitten", "sitting"), 3u);
}

}  // namespace
}  // namespace bigbatch
