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
// Splits argv[2..] into --key=value (or --key value) flags, checked against `known`, and
// positional arguments. `switches` are known flags that take no value: --key means "true".
bool ParseArgs(int argc, char** argv, const std::vector<std::string>& known,
               std::map<std::string, std::string>* flags, std::vector<std::string>* positional,
               std::string* error, const std::vector<std::string>& switches = {});

int Stats(int argc, char** argv);    // ctl/stats.cc
int Eval(int argc, char** argv);     // ctl/eval.cc
int GenData(int argc, char** argv);  // ctl/gen_data.cc

}  // namespace diloco::ctl
