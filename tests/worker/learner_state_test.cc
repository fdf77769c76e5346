// What a learner keeps to stop and continue (--state_dir): the data stream's position
// (worker/data/batcher.h), the optimizer's moments (worker/optimizer_state.h) and the resume
// point that carries the position (worker/resume_state.h). A trainer restored from them, with
// the same parameters, takes exactly the steps the uninterrupted one takes: no batch again, none
// skipped, AdamW where it was.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "worker/data/batcher.h"
#include "worker/model/cpu_trainer.h"
#include "worker/model/gpt/gpt_trainer_family.h"
#include "worker/model/presets.h"
#include "worker/optimizer_state.h"
#include "worker/resume_state.h"

namespace diloco::worker {
namespace {

namespace fs = std::filesystem;

fs::path TempDir() {
  const fs::path d =
      fs::temp_directory_path() / ("learner_state_test." + std::to_string(::getpid()) + "." +
                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::unique_ptr<Trainer> Tiny(int layers = 2) {
  model::TrainerOptions o = model::CiTrainingOptions();
  o.model = model::GptTrainerModel(
      GptConfig{.vocab = 256, .context = 64, .layers = layers, .heads = 4, .width = 64});
  o.batch_size = 2;
  o.seq_len = 16;
  o.data.train_tokens = 1 << 14;
  o.data.heldout_tokens = 1 << 12;
  o.eval_batches = 1;
  o.threads = 1;
  auto t = model::MakeCpuTrainer(o);
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

TEST(LearnerStateTest, ABatcherAtARecordedPositionDrawsWhatTheOriginalDrawsNext) {
  std::vector<uint16_t> tokens(4096);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i * 7919 % 251);
  data::Batcher a(tokens, 2, 8, 5), b(tokens, 2, 8, 5);
  std::vector<int32_t> in(16), tg(16), in2(16), tg2(16);
  for (int i = 0; i < 3; ++i) a.Next(in, tg);
  const std::string at3 = a.Position();
  ASSERT_TRUE(b.SetPosition(at3).ok());
  for (int i = 0; i < 5; ++i) {
    a.Next(in, tg);
    b.Next(in2, tg2);
    EXPECT_EQ(in, in2) << "batch " << 4 + i;
    EXPECT_EQ(tg, tg2);
  }
  // Not a generator state: refused, and the stream goes on as before.
  const std::string before = b.Position();
  EXPECT_FALSE(b.SetPosition("12 13 x").ok());
  EXPECT_FALSE(b.SetPosition(at3 + " 99").ok());
  EXPECT_FALSE(b.SetPosition("").ok());
  EXPECT_EQ(b.Position(), before);
}

TEST(LearnerStateTest, ATrainerRestoredMidRunTakesTheSameStepsAsTheUninterruptedOne) {
  const fs::path dir = TempDir();
  auto a = Tiny();
  for (int i = 0; i < 3; ++i) a->Step();
  const std::vector<float> params(a->params().begin(), a->params().end());
  const std::string position = a->DataPosition();
  ASSERT_TRUE(WriteOptimizerState(dir.string(), 4, 3, *a).ok());
  std::vector<float> losses;
  for (int i = 0; i < 4; ++i) losses.push_back(a->Step());

  auto b = Tiny();
  std::copy(params.begin(), params.end(), b->params().begin());
  ASSERT_TRUE(b->SetDataPosition(position).ok());
  auto from = RestoreOptimizerState(dir.string(), 4, *b);
  ASSERT_TRUE(from.ok()) << from.status();
  ASSERT_EQ(*from, std::optional<int64_t>(3));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b->Step(), losses[i]) << "step " << 4 + i;
  EXPECT_TRUE(std::equal(a->params().begin(), a->params().end(), b->params().begin()));

  // Without the position the stream starts over: the first batch again, another loss.
  auto c = Tiny();
  std::copy(params.begin(), params.end(), c->params().begin());
  ASSERT_TRUE(RestoreOptimizerState(dir.string(), 4, *c).ok());
  EXPECT_NE(c->Step(), losses[0]);
  // Without the moments AdamW starts over: same batch, another step.
  auto d = Tiny();
  std::copy(params.begin(), params.end(), d->params().begin());
  ASSERT_TRUE(d->SetDataPosition(position).ok());
  EXPECT_EQ(d->Step(), losses[0]) << "the same batch on the same parameters";
  EXPECT_NE(d->Step(), losses[1]) << "the step after it moved the parameters as before";
  fs::remove_all(dir);
}

TEST(LearnerStateTest, AnOptimizerStateOfAnotherWorkerModelOrDamagedIsRefusedAndChangesNothing) {
  const fs::path dir = TempDir();
  auto a = Tiny();
  for (int i = 0; i < 2; ++i) a->Step();
  ASSERT_TRUE(WriteOptimizerState(dir.string(), 4, 2, *a).ok());
  const fs::path file = OptimizerStatePath(dir.string(), 4);

  auto fresh = Tiny();
  const auto moments = [&] {
    const auto s = fresh->optimizer_state();
    std::vector<float> m(s->m.begin(), s->m.end());
    m.insert(m.end(), s->v.begin(), s->v.end());
    m.push_back(static_cast<float>(s->step));
    return m;
  };
  const std::vector<float> untouched = moments();
  const auto refused = [&](uint32_t worker, Trainer& t, const std::string& why) {
    auto r = RestoreOptimizerState(dir.string(), worker, t);
    EXPECT_FALSE(r.ok()) << why;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find(OptimizerStatePath(dir.string(), worker)),
                std::string::npos)
          << r.status();
      EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status();
    }
  };
  // No file: nothing restored, no error.
  auto none = RestoreOptimizerState(dir.string(), 5, *fresh);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  // Another worker's file under this worker's name.
  fs::copy_file(file, OptimizerStatePath(dir.string(), 5));
  refused(5, *fresh, "written by worker 4");
  // Another model.
  auto other = Tiny(/*layers=*/1);
  refused(4, *other, "of another model");
  // A flipped byte, a cut.
  const auto bytes = fs::file_size(file);
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(bytes / 2));
    char c;
    f.seekg(static_cast<std::streamoff>(bytes / 2));
    f.get(c);
    f.seekp(static_cast<std::streamoff>(bytes / 2));
    f.put(static_cast<char>(c ^ 0x40));
  }
  refused(4, *fresh, "damaged");
  fs::resize_file(file, bytes - 100);
  refused(4, *fresh, "cut short");
  fs::resize_file(file, 20);
  refused(4, *fresh, "cut short");
  EXPECT_EQ(moments(), untouched);
  fs::remove_all(dir);
}

TEST(LearnerStateTest, TheResumePointCarriesTheDataPositionAndRefusesAMangledOne) {
  const fs::path dir = TempDir();
  auto a = Tiny();
  a->Step();
  ASSERT_TRUE(WriteResumePoint(dir.string(), 2, {17, absl::Seconds(3), a->DataPosition()}).ok());
  auto p = ReadResumePoint(dir.string(), 2);
  ASSERT_TRUE(p.ok() && p->has_value()) << p.status();
  EXPECT_EQ((*p)->step, 17);
  EXPECT_EQ((*p)->data_position, a->DataPosition());
  // The older form, without a position, still reads.
  std::ofstream(ResumeStatePath(dir.string(), 3)) << "12 4.5\n";
  p = ReadResumePoint(dir.string(), 3);
  ASSERT_TRUE(p.ok() && p->has_value());
  EXPECT_TRUE((*p)->data_position.empty());
  // A line that is not "data ...", or an empty position, is named.
  std::ofstream(ResumeStatePath(dir.string(), 3)) << "12 4.5\nnonsense 1 2\n";
  EXPECT_EQ(ReadResumePoint(dir.string(), 3).status().code(), absl::StatusCode::kDataLoss);
  std::ofstream(ResumeStatePath(dir.string(), 3)) << "12 4.5\ndata \n";
  EXPECT_EQ(ReadResumePoint(dir.string(), 3).status().code(), absl::StatusCode::kDataLoss);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace diloco::worker
