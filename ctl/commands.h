// diloco-ctl's subcommands and the argument helpers they share. Each subcommand returns the
// process exit status: 0 success, 1 an error (printed on stderr), 2 a usage error.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace diloco::ctl {

int Usage(const std::string& why);
int Fail(const absl::Status& s);
// Splits argv[2..] into --key=value flags (checked against `known`) and positional arguments.
bool ParseArgs(int argc, char** argv, const std::vector<std::string>& known,
               std::map<std::string, std::string>* flags, std::vector<std::string>* positional,
               std::string* error);

int Stats(int argc, char** argv);    // ctl/stats.cc
int Eval(int argc, char** argv);     // ctl/eval.cc
int GenData(int argc, char** argv);  // ctl/gen_data.cc

}  // namespace diloco::ctl
