#include "bigbatch/data/instruction_records.h"

#include <fstream>

#include "bigbatch/core/check.h"

namespace bigbatch::data {

namespace {

/// Checks a chat record's "messages" and "tools"; `where` is "FILE:LINE".
void check_chat(const nlohmann::ordered_json& record, const std::string& where) {
  const nlohmann::ordered_json& messages = record["messages"];
  BB_CHECK_INPUT(messages.is_array() && !messages.empty(), where,
                 ": \"messages\" must be a non-empty list of {\"role\": ..., \"content\": ...}");
  bool answered = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    const nlohmann::ordered_json& message = messages[i];
    const std::string at = cat(where, ": messages[", i, "]");
    BB_CHECK_INPUT(message.is_object(), at, ": not a JSON object");
    BB_CHECK_INPUT(message.contains("role") && message["role"].is_string(), at,
                   ": needs a string field \"role\" (\"system\", \"user\", \"assistant\", ...)");
    const bool calls_tools = message.contains("tool_calls");
    const bool has_content = message.contains("content") && !message["content"].is_null();
    BB_CHECK_INPUT(has_content ? message["content"].is_string() : calls_tools, at,
                   ": needs a string field \"content\"",
                   calls_tools ? " (or null, with tool_calls)" : "");
    answered = answered || message["role"] == "assistant";
  }
  BB_CHECK_INPUT(answered, where,
                 ": the conversation has no \"assistant\" message, which is what the model learns");
  BB_CHECK_INPUT(
      !record.contains("tools") || record["tools"].is_array() || record["tools"].is_null(), where,
      ": \"tools\" must be a list of tool definitions");
}

}  // namespace

std::vector<InstructionRecord> read_instruction_records(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  BB_CHECK_INPUT(in.good(), "cannot open instruction data '", path, "'");
  std::vector<InstructionRecord> records;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    const std::string where = cat(path, ":", number);
    nlohmann::ordered_json record;
    try {
      record = nlohmann::ordered_json::parse(line);
    } catch (const nlohmann::json::parse_error& error) {
      throw InputError(cat(where, ": not valid JSON (", error.what(), ")"));
    }
    BB_CHECK_INPUT(record.is_object(), where, ": not a JSON object but ", record.type_name());
    if (record.contains("messages")) {
      check_chat(record, where);
      InstructionRecord chat;
      chat.messages = std::move(record["messages"]);
      if (record.contains("tools"))
        chat.tools = std::move(record["tools"]);
      records.push_back(std::move(chat));
      continue;
    }
    for (const char* field : {"prompt", "response"}) {
      BB_CHECK_INPUT(record.contains(field) && record[field].is_string(), where,
                     ": needs a string field \"", field,
                     "\" (records are {\"prompt\": \"...\", \"response\": \"...\"}, or chat "
                     "{\"messages\": [...]})");
    }
    InstructionRecord pair;
    pair.prompt = record["prompt"].get<std::string>();
    pair.response = record["response"].get<std::string>();
    records.push_back(std::move(pair));
  }
  BB_CHECK_INPUT(in.eof(), "cannot read instruction data '", path, "'");
  BB_CHECK_INPUT(!records.empty(), "instruction data '", path, "' holds no record");
  return records;
}

}  // namespace bigbatch::data
