// The one registration of the model families this tree builds. The library holding this file
// is linked whole (worker/model/CMakeLists.txt: diloco_model_registry), so the registration
// runs in every program and test that links it, before main. A new family: its folder, and
// one line here. GPT comes last: it claims every spec the others leave.
#include "common/model_family.h"
#include "worker/model/gpt/gpt_family.h"
#include "worker/model/llama/llama_family.h"

namespace diloco {
namespace {

[[maybe_unused]] const bool registered = [] {
  RegisterModelFamily(&LlamaFamily());
  RegisterModelFamily(&GptFamily());
  return true;
}();

}  // namespace
}  // namespace diloco
