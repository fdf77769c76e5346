// diloco-ctl's subcommands and what they share. main() (ctl/main.cc) parses the whole command
// line with Abseil flags: the first positional argument names the subcommand, a flag the
// subcommand does not take is a usage error, and the subcommand gets the positional arguments
// after its name (store directories). Each subcommand defines its own flags in its file (the
// plan flags --model, --fragments and --shards are common/plan_flags.h's; --out and --tokens,
// shared, are main.cc's) and returns the process exit status: 0 success, 1 an error (printed on
// stderr), 2 a usage error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

ABSL_DECLARE_FLAG(std::string, out);                // export, gen-data, manifest, keys
ABSL_DECLARE_FLAG(std::optional<int64_t>, tokens);  // eval, gen-data (their own defaults)

namespace diloco::ctl {

int Usage(const std::string& why);
int Fail(const absl::Status& s);

using Args = std::vector<std::string>;  // the positional arguments after the subcommand

int Show(const Args& args);             // ctl/main.cc
int Export(const Args& args);           // ctl/main.cc
int Eval(const Args& args);             // ctl/eval.cc
int GenData(const Args& args);          // ctl/gen_data.cc
int Stats(const Args& args);            // ctl/stats.cc
int Top(const Args& args);              // ctl/top.cc
int ManifestCommand(const Args& args);  // ctl/manifest.cc
int Keys(const Args& args);             // ctl/keys.cc

}  // namespace diloco::ctl
