// diloco-ctl eval: held-out loss of an exported global model (safetensors) on an llm.c .bin
// token file.
#include "absl/strings/str_cat.h"
#include "common/model_spec.h"
#include "ctl/commands.h"
#include "worker/model/evaluate.h"

namespace diloco::ctl {

int Eval(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  std::vector<std::string> pos;
  std::string error;
  if (!ParseArgs(argc, argv, {"model", "params", "data"}, &flags, &pos, &error))
    return Usage(error);
  if (flags["model"].empty() || flags["params"].empty() || flags["data"].empty())
    return Usage("eval needs --model, --params=FILE.safetensors and --data=FILE.bin");
  auto cfg = ParseGptConfig(flags["model"]);
  if (!cfg.ok()) return Fail(cfg.status());
  auto s = model::EvaluateSafetensors(flags["params"], flags["data"], *cfg);
  return s.ok() ? 0 : Fail(s);
}

}  // namespace diloco::ctl
