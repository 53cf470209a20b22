// Instruction-tuning data: a JSONL file of prompt/response records.
#pragma once

#include <string>
#include <vector>

namespace bigbatch::data {

/// One record: what the model is asked and the answer it learns to give.
struct InstructionRecord {
  std::string prompt;
  std::string response;
};

/// The records of a JSONL file: one JSON object per line with string fields "prompt" and
/// "response" (other fields are ignored; blank lines are skipped). Throws InputError naming the
/// file and line for a line that is not a JSON object, lacks either field or holds one that is
/// not a string, and for a file without records. Records with "messages" (chat format) are
/// refused by name: bigbatch renders no chat templates yet.
std::vector<InstructionRecord> read_instruction_records(const std::string& path);

}  // namespace bigbatch::data
