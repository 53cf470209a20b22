#include "bigbatch/cli/doctor_command.h"

#include <ATen/Version.h>

#include <sstream>
#include <vector>

#include "bigbatch/cli/doctor_checks.h"
#include "bigbatch/core/openblas_kernels.h"
#include "bigbatch/core/table.h"
#include "bigbatch/io/read_file.h"

namespace bigbatch::cli {

namespace {

/// `text` with every line indented by two spaces.
std::string indented(const std::string& text) {
  std::istringstream lines(text);
  std::string out;
  for (std::string line; std::getline(lines, line);)
    out += "  " + line + "\n";
  return out;
}

}  // namespace

int run_doctor(const DoctorOptions& options, std::ostream& out) {
  const ThreadSettings at_start{torch::get_num_threads(), blas_threads(), MatmulBackend::kBlas};
  const std::string show_config = at::show_config();
  const std::string cpuinfo = io::read_file_or_empty("/proc/cpuinfo");
  const std::set<std::string> cpu_flags = parse_cpu_flags(cpuinfo);
  const BlasLibrary blas = loaded_blas();
  Finding blas_finding = diagnose_blas(blas, openblas_alternative(blas), cpu_flags);
  if (blas.kind == BlasKind::kOpenBlas)
    blas_finding.detail += "; " + describe_openblas_coretype();

  std::vector<Finding> findings = {
      libtorch_finding(show_config),
      diagnose_cuda(cuda_facts(show_config)),
  };
  const std::vector<Finding> gpus = gpu_findings(gpu_report());
  findings.insert(findings.end(), gpus.begin(), gpus.end());
  findings.insert(findings.end(),
                  {
                      threads_finding(at_start, available_cores()),
                      blas_finding,
                      malloc_finding(loaded_malloc(), malloc_tuning_outcome()),
                      matmul_finding(torch::kFloat, options.matmul_seconds),
                      onednn_matmul_finding(options.matmul_seconds),
                      matmul_finding(torch::kBFloat16, options.matmul_seconds),
                      cpu_bf16_finding(cpu_flags, parse_cpu_model(cpuinfo)),
                      memory_finding(parse_meminfo(io::read_file_or_empty("/proc/meminfo"))),
                  });
  for (Finding& finding : dataset_findings(DatasetLocations()))
    findings.push_back(std::move(finding));
  findings.push_back(run_dir_finding(options.run_dir));

  Table table("bigbatch doctor");
  int problems = 0;
  for (const Finding& f : findings) {
    problems += f.problem ? 1 : 0;
    table.add(f.topic, f.value, f.problem ? "PROBLEM: " + f.detail : f.detail);
  }
  out << table.render() << "\nLibTorch build configuration (at::show_config()):\n"
      << indented(show_config) << "\n";
  if (problems == 0) {
    out << "no problems found\n";
    return 0;
  }
  out << problems << (problems == 1 ? " problem" : " problems") << " found:\n";
  for (const Finding& f : findings) {
    if (f.problem)
      out << "- " << f.topic << ": " << f.value << ", " << f.detail << "\n  fix: " << f.fix << "\n";
  }
  return 1;
}

}  // namespace bigbatch::cli
