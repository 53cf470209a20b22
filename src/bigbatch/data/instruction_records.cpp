#include "bigbatch/data/instruction_records.h"

#include <nlohmann/json.hpp>

#include <fstream>

#include "bigbatch/core/check.h"

namespace bigbatch::data {

std::vector<InstructionRecord> read_instruction_records(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  BB_CHECK_INPUT(in.good(), "cannot open instruction data '", path, "'");
  std::vector<InstructionRecord> records;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    const std::string where = cat(path, ":", number);
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    BB_CHECK_INPUT(record.is_object(), where, ": not a JSON object");
    BB_CHECK_INPUT(!record.contains("messages"), where,
                   ": chat \"messages\" records need the tokenizer's chat template, which bigbatch "
                   "does not render yet; give \"prompt\" and \"response\" strings");
    for (const char* field : {"prompt", "response"}) {
      BB_CHECK_INPUT(record.contains(field) && record[field].is_string(), where,
                     ": needs a string field \"", field,
                     "\" (records are {\"prompt\": \"...\", "
                     "\"response\": \"...\"})");
    }
    records.push_back({record["prompt"].get<std::string>(), record["response"].get<std::string>()});
  }
  BB_CHECK_INPUT(in.eof(), "cannot read instruction data '", path, "'");
  BB_CHECK_INPUT(!records.empty(), "instruction data '", path, "' holds no record");
  return records;
}

}  // namespace bigbatch::data
