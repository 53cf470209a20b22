// Instruction-tuning data: a JSONL file of prompt/response records or of chat conversations.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace bigbatch::data {

/// One record: what the model is asked and the answer it learns to give, either as a prompt and
/// a response, or as a conversation that the tokenizer's chat template renders.
struct InstructionRecord {
  std::string prompt;
  std::string response;
  /// A chat record's messages as the file gives them: a non-empty array of objects, each with a
  /// string "role" and a string "content" (or, with "tool_calls", a null or absent one), with at
  /// least one "assistant" message. Null for a prompt/response record. Ordered as in the file,
  /// as Python's dicts are, so a template's tojson writes the keys in their order.
  nlohmann::ordered_json messages;
  /// A chat record's "tools" (the functions a template may offer the model), null if absent.
  nlohmann::ordered_json tools;
  /// Whether this is a chat record.
  bool is_chat() const { return !messages.is_null(); }
};

/// The records of a JSONL file: one JSON object per line, either with string fields "prompt"
/// and "response", or with "messages" (chat format: {"messages": [{"role": "user", "content":
/// "..."}, {"role": "assistant", "content": "..."}], "tools": [...]}). Other fields are ignored;
/// blank lines are skipped. Throws InputError naming the file and line (and the message's index)
/// for a line that is not a JSON object, lacks the fields or holds ones of the wrong type, a chat
/// record without an assistant message, and for a file without records.
std::vector<InstructionRecord> read_instruction_records(const std::string& path);

}  // namespace bigbatch::data
