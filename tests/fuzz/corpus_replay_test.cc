// Replays the checked-in seed corpus through ParseMessage with whatever compiler builds the
// project: valid_* seeds must parse (a protocol change that strands the corpus fails here),
// bad_* seeds must be refused, payload_bad_* seeds parse and fail their payload check, and
// nothing may crash. The clang fuzz target grows from these.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "schema/wire.h"
#include "tests/fuzz/frame_split.h"
#include "tests/fuzz/payload_feed.h"
#include "tests/fuzz/train_feed.h"

namespace diloco::fuzz {
namespace {

std::string Read(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(CorpusReplayTest, SeedsParseAsNamed) {
  int valid = 0, bad = 0;
  for (const auto& e : std::filesystem::directory_iterator(DILOCO_FUZZ_CORPUS_DIR)) {
    const std::string name = e.path().filename().string();
    const std::string bytes = Read(e.path());
    auto m = wire::ParseMessage(
        SplitFrames(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
    if (name.rfind("valid_", 0) == 0) {
      ++valid;
      EXPECT_TRUE(m.ok()) << name << ": " << m.status();
      if (m.ok()) (void)Touch(*m);
    } else if (name.rfind("bad_", 0) == 0) {
      ++bad;
      EXPECT_FALSE(m.ok()) << name;
    }
  }
  EXPECT_GE(valid, 7);
  EXPECT_GE(bad, 5);
}

// Each prefix is read as it is and resealed (its header trailers made to match, as the fuzz
// target does), so that the checks behind the header checksum see the cut too.
TEST(CorpusReplayTest, EveryPrefixOfEverySeedIsSafe) {
  for (const auto& e : std::filesystem::directory_iterator(DILOCO_FUZZ_CORPUS_DIR)) {
    const std::string bytes = Read(e.path());
    for (size_t n = 0; n <= bytes.size(); ++n) {
      auto m = wire::ParseMessage(SplitFrames(reinterpret_cast<const uint8_t*>(bytes.data()), n));
      if (m.ok()) {
        (void)Touch(*m);
        (void)DecodePayload(*m);
      }
      (void)FeedTrains(reinterpret_cast<const uint8_t*>(bytes.data()), n);
      std::vector<uint8_t> copy(bytes.begin(), bytes.begin() + n);
      auto frames = SplitFrames(copy.data(), copy.size());
      if (!frames.empty()) wire::ResealHeaderFrame(frames[0]);
      auto resealed = wire::ParseMessage(std::move(frames));
      if (resealed.ok()) {
        (void)Touch(*resealed);
        (void)DecodePayload(*resealed);
      }
      std::vector<uint8_t> again(bytes.begin(), bytes.begin() + n);
      (void)FeedTrains(again.data(), again.size(), /*reseal=*/true);
    }
  }
}

// The header seeds are refused by the step each was made for: a flipped bit by the header
// checksum, an older peer by its version, a cut root offset (resealed) by the verifier.
TEST(CorpusReplayTest, HeaderSeedsAreRefusedByTheirStep) {
  const std::pair<const char*, wire::ErrorCode> cases[] = {
      {"bad_header_flip", wire::ErrorCode::BadChecksum},
      {"bad_old_version", wire::ErrorCode::BadProtocolVersion},
      {"bad_root_offset", wire::ErrorCode::Malformed}};
  for (const auto& [name, code] : cases) {
    const std::string bytes = Read(std::filesystem::path(DILOCO_FUZZ_CORPUS_DIR) / name);
    ASSERT_FALSE(bytes.empty()) << name;
    auto m = wire::ParseMessage(
        SplitFrames(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
    EXPECT_EQ(wire::ErrorCodeOf(m.status()), code) << name << ": " << m.status();
  }
}

// The train seed, read as a sequence of messages, joins into exactly one push of three chunks;
// without its last chunk, into none; every single-message seed reads the same both ways.
TEST(CorpusReplayTest, TrainSeedJoinsAndSingleSeedsPassThrough) {
  const std::string train = Read(std::filesystem::path(DILOCO_FUZZ_CORPUS_DIR) / "train_push");
  ASSERT_FALSE(train.empty());
  const auto* p = reinterpret_cast<const uint8_t*>(train.data());
  EXPECT_EQ(FeedTrains(p, train.size()), 1);
  EXPECT_EQ(FeedTrains(p, train.size() - 1), 0);  // last chunk one byte short: refused
  for (const auto& e : std::filesystem::directory_iterator(DILOCO_FUZZ_CORPUS_DIR)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("valid_", 0) != 0) continue;
    const std::string bytes = Read(e.path());
    EXPECT_EQ(FeedTrains(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 1) << name;
  }
}

// The top-k seeds: the valid pushes pass the payload check and decode; each payload_bad_* seed
// parses (its header is sound) and is refused BadCodec by the payload check, naming its cause.
TEST(CorpusReplayTest, TopKPayloadSeedsAreCheckedBeforeDecoding) {
  const std::filesystem::path dir(DILOCO_FUZZ_CORPUS_DIR);
  for (const char* name :
       {"valid_push_topk_packed", "valid_push_topk_bitmap", "valid_push_topk_eliasfano"}) {
    const std::string bytes = Read(dir / name);
    auto m = wire::ParseMessage(
        SplitFrames(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
    ASSERT_TRUE(m.ok()) << name << ": " << m.status();
    absl::Status why;
    EXPECT_EQ(DecodePayload(*m, &why), PayloadFate::kDecoded) << name << ": " << why;
  }
  const std::pair<const char*, const char*> refused[] = {
      {"payload_bad_topk_repeated", "repeats or is out of order"},
      {"payload_bad_topk_range", "index 40 out of range for a block of 32 values"},
      {"payload_bad_topk_scale", "negative or non-finite magnitude"},
      {"payload_bad_topk_bitmap", "bitmap marks 64 entries, the codec keeps 20"},
      {"payload_bad_topk_eliasfano", "Elias-Fano high bits mark 0 entries, the codec keeps 8"}};
  for (const auto& [name, cause] : refused) {
    const std::string bytes = Read(dir / name);
    ASSERT_FALSE(bytes.empty()) << name;
    auto m = wire::ParseMessage(
        SplitFrames(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
    ASSERT_TRUE(m.ok()) << name << ": " << m.status();
    absl::Status why;
    EXPECT_EQ(DecodePayload(*m, &why), PayloadFate::kRefused) << name;
    EXPECT_EQ(wire::ErrorCodeOf(why), wire::ErrorCode::BadCodec) << name << ": " << why;
    EXPECT_NE(why.message().find(cause), std::string::npos) << name << ": " << why;
  }
}

// The fuzzer's first find: a header whose uint64 vectors sit 4 bytes off 8-byte alignment, which
// FlatBuffers 2.0.8's verifier lets through and UBSan flags on the read (sealed with the current
// header trailer by seed_gen). Refused as Malformed before any payload length or checksum is read.
TEST(CorpusReplayTest, MisalignedVectorIsMalformed) {
  const std::string bytes =
      Read(std::filesystem::path(DILOCO_FUZZ_CORPUS_DIR) / "bad_misaligned_vector");
  ASSERT_FALSE(bytes.empty());
  // Copy to an 8-aligned buffer at the same offset parity the fuzzer saw.
  std::vector<uint64_t> aligned(bytes.size() / 8 + 1);
  std::memcpy(aligned.data(), bytes.data(), bytes.size());
  auto m = wire::ParseMessage(
      SplitFrames(reinterpret_cast<const uint8_t*>(aligned.data()), bytes.size()));
  EXPECT_EQ(wire::ErrorCodeOf(m.status()), wire::ErrorCode::Malformed) << m.status();
}

}  // namespace
}  // namespace diloco::fuzz
