// diloco-ctl export and show: two shards' stores written through the API with known values,
// assembled into one safetensors file, read back by our reader, by the diloco-ctl binary, and
// (where /usr/bin/python3 has torch) by a tiny PyTorch script that parses the format itself.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/plan.h"
#include "common/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/checkpoint_store.h"
#include "storage/model_export.h"
#include "tests/storage/test_util.h"
#include "worker/model/gpt/gpt_config.h"

namespace diloco::storage {
namespace {

using ::testing::HasSubstr;
using testutil::TempDir;

constexpr char kSpec[] = "L=1,H=2,C=8,T=4,V=16";
constexpr uint32_t kFragments = 5, kShards = 2;

float GlobalValue(uint64_t i) { return static_cast<float>(i % 1000) * 0.25f - 7.0f; }

// Runs a command and returns (exit status, stdout).
std::pair<int, std::string> RunCommand(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, ""};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

class ExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    manifest_ = *GptManifest(*ParseGptConfig(kSpec));
    plan_ = *Plan::Create(manifest_, kFragments, kShards);
    for (uint64_t i = 0; i < plan_.total_elements(); ++i) flat_.push_back(GlobalValue(i));
    for (uint32_t s = 0; s < kShards; ++s) {
      stores_.push_back(dir_.Sub(absl::StrCat("shard", s)));
      StoreIdentity id{plan_.fingerprint(), manifest_.fingerprint(), s, kShards};
      auto store = CheckpointStore::Open(stores_.back(), id);
      ASSERT_TRUE(store.ok()) << store.status();
      // Checkpoint 1 holds stale values; export must take checkpoint 2.
      for (uint64_t cid : {1, 2}) {
        std::vector<FragmentState> states;
        for (uint32_t f : plan_.FragmentsOfShard(s)) {
          FragmentState st;
          st.id = f;
          st.version = cid == 2 ? 100 + f : 1;
          st.params.resize(plan_.fragment(f).numel);
          plan_.Gather(plan_.fragment(f), flat_.data(), st.params.data());
          if (cid == 1)
            for (float& v : st.params) v += 1.0f;
          st.momentum.assign(st.params.size(), 0.5f);
          states.push_back(std::move(st));
        }
        std::vector<FragmentView> views;
        for (const FragmentState& st : states)
          views.push_back({st.id, st.version, st.params, st.momentum});
        ASSERT_TRUE((*store)->Write(cid, 10 * cid + s, {}, views, {}, true).ok());
      }
    }
  }

  ExportRequest Request() const {
    return {kSpec, kFragments, kShards, {stores_[1], stores_[0]}, dir_.Sub("model.safetensors")};
  }

  TempDir dir_;
  Manifest manifest_;
  Plan plan_;
  std::vector<float> flat_;
  std::vector<std::string> stores_;
};

TEST_F(ExportTest, AssemblesTheGlobalModel) {
  auto summary = ExportModel(Request());
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->tensors, manifest_.tensors().size());
  auto file = ReadSafetensors(Request().out);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->tensors.size(), manifest_.tensors().size());
  for (size_t i = 0; i < file->tensors.size(); ++i) {
    const TensorSpec& spec = manifest_.tensors()[i];
    const LoadedTensor& t = file->tensors[i];
    EXPECT_EQ(t.name, spec.name);
    EXPECT_EQ(t.shape, spec.shape);
    const std::vector<float> want(flat_.begin() + spec.offset,
                                  flat_.begin() + spec.offset + spec.numel());
    EXPECT_EQ(t.data, want) << spec.name;
  }
  EXPECT_EQ(file->metadata["diloco.plan_fingerprint"],
            absl::StrFormat("%016x", plan_.fingerprint()));
  EXPECT_EQ(file->metadata["diloco.fragment_versions"], "100,101,102,103,104");
  EXPECT_EQ(file->metadata["diloco.checkpoints"], "0:2,1:2");
  EXPECT_EQ(file->metadata["format"], "pt");
}

// In memory (diloco-ctl eval of store directories): the same values and metadata the export
// writes, in manifest order, and no file.
TEST_F(ExportTest, AssemblesInMemoryWhatTheExportWrites) {
  ExportRequest r = Request();
  r.out.clear();
  auto m = AssembleModel(r);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->params, flat_);
  EXPECT_EQ(m->manifest.fingerprint(), manifest_.fingerprint());
  EXPECT_EQ(m->summary.fragment_versions, (std::vector<uint64_t>{100, 101, 102, 103, 104}));
  ASSERT_TRUE(ExportModel(Request()).ok());
  auto file = ReadSafetensors(Request().out);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata, m->metadata);
  EXPECT_EQ(m->metadata["diloco.model"], GptConfigString(*ParseGptConfig(kSpec)));
}

TEST_F(ExportTest, RefusesAnotherPlan) {
  ExportRequest r = Request();
  r.num_fragments = 4;
  auto s = ExportModel(r);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.status().message()),
              HasSubstr(absl::StrFormat("%016x", plan_.fingerprint())));
  r = Request();
  r.model_spec = "L=2,H=2,C=8,T=4,V=16";
  EXPECT_EQ(ExportModel(r).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ExportTest, RefusesMissingAndDuplicateShards) {
  ExportRequest r = Request();
  r.stores = {stores_[0]};
  auto s = ExportModel(r);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("shard(s) 1"));
  r.stores = {stores_[0], stores_[0]};
  EXPECT_EQ(ExportModel(r).status().code(), absl::StatusCode::kInvalidArgument);
  r.stores = {stores_[0], dir_.Sub("nothing-here")};
  EXPECT_EQ(ExportModel(r).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(std::ifstream(r.out).good()) << "no file on failure";
}

TEST_F(ExportTest, CtlShowsAndExports) {
  auto [rc, out] = RunCommand(absl::StrCat(DILOCO_CTL_PATH, " show --store=", stores_[1]));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("shard      1 of 2"));
  EXPECT_THAT(out, HasSubstr("newest checkpoint 2"));
  EXPECT_THAT(out, HasSubstr(absl::StrFormat("%016x", plan_.fingerprint())));
  const std::string out_file = dir_.Sub("ctl.safetensors");
  std::tie(rc, out) = RunCommand(absl::StrCat(DILOCO_CTL_PATH, " export --model=", kSpec,
                                              " --fragments=5 --shards=2", " --out=", out_file, " ",
                                              stores_[0], " ", stores_[1], " 2>&1"));
  EXPECT_EQ(rc, 0) << out;
  ASSERT_TRUE(ReadSafetensors(out_file).ok());
  std::tie(rc, out) = RunCommand(absl::StrCat(DILOCO_CTL_PATH, " export --model=", kSpec,
                                              " --fragments=5 --shards=2 --out=", out_file, " ",
                                              stores_[0], " 2>&1"));
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(out, HasSubstr("no store given for shard(s) 1"));
  std::tie(rc, out) = RunCommand(absl::StrCat(DILOCO_CTL_PATH, " show --bogus=1 2>&1"));
  EXPECT_EQ(rc, 2);
}

constexpr char kPythonReader[] = R"(
import json, struct, sys, torch
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
assert (8 + n) % 8 == 0
h = json.loads(b[8:8 + n])
meta = h.pop('__metadata__')
data = bytearray(b[8 + n:])
for name, t in h.items():
    s, e = t['data_offsets']
    assert t['dtype'] == 'F32'
    x = torch.frombuffer(data, dtype=torch.float32, count=(e - s) // 4, offset=s)
    x = x.reshape(t['shape'])
    print(name, 'x'.join(str(d) for d in x.shape), float(x.double().sum()),
          float(x.flatten()[0]), float(x.flatten()[-1]))
print('meta', meta['diloco.plan_fingerprint'], meta['diloco.fragment_versions'])
)";

TEST_F(ExportTest, PyTorchReadsTheFile) {
  if (RunCommand("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1").first != 0)
    GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  ASSERT_TRUE(ExportModel(Request()).ok());
  const std::string script = dir_.Sub("read.py");
  std::ofstream(script) << kPythonReader;
  auto [rc, out] = RunCommand(absl::StrCat("/usr/bin/python3 ", script, " ", Request().out));
  ASSERT_EQ(rc, 0) << out;
  std::map<std::string, std::vector<std::string>> lines;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    lines[f[0]] = f;
  }
  for (const TensorSpec& spec : manifest_.tensors()) {
    ASSERT_TRUE(lines.count(spec.name)) << spec.name << " missing in:\n" << out;
    const std::vector<std::string>& f = lines[spec.name];
    ASSERT_EQ(f.size(), 5u);
    std::vector<std::string> dims;
    for (int64_t d : spec.shape) dims.push_back(absl::StrCat(d));
    EXPECT_EQ(f[1], absl::StrJoin(dims, "x")) << spec.name;
    double sum = 0;
    for (uint64_t i = 0; i < spec.numel(); ++i) sum += flat_[spec.offset + i];
    EXPECT_EQ(std::strtod(f[2].c_str(), nullptr), sum) << spec.name;
    EXPECT_EQ(std::strtod(f[3].c_str(), nullptr), flat_[spec.offset]) << spec.name;
    EXPECT_EQ(std::strtod(f[4].c_str(), nullptr), flat_[spec.offset + spec.numel() - 1]);
  }
  ASSERT_TRUE(lines.count("meta"));
  EXPECT_EQ(lines["meta"][1], absl::StrFormat("%016x", plan_.fingerprint()));
  EXPECT_EQ(lines["meta"][2], "100,101,102,103,104");
}

}  // namespace
}  // namespace diloco::storage
