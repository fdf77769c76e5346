// Shared by the storage tests: per-test temp dirs (tests/util/temp_dir.h) and checkpoint contents
// that encode their checkpoint id, so a value from another checkpoint (or a torn one) is
// detectable.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "storage/checkpoint_store.h"
#include "tests/util/temp_dir.h"

namespace diloco::storage::testutil {

using diloco::testing::TempDir;

inline std::string ReadAll(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Every file under `dir` by relative path, with its bytes: two snapshots compare equal when
// nothing in the directory changed.
inline std::map<std::string, std::string> DirectoryContents(const std::filesystem::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[std::filesystem::relative(e.path(), dir).string()] = ReadAll(e);
  return files;
}

inline StoreIdentity TestIdentity(uint32_t shard = 0) {
  return {0x1234abcd5678ef01ull, 0x0fedcba987654321ull, shard, 2};
}

// A checkpoint's contents as owned vectors, derivable from (id, sizes) alone.
struct Contents {
  uint64_t id = 0;
  uint64_t rounds = 0;
  OptimizerMeta optimizer;
  std::vector<FragmentState> fragments;
  std::vector<DedupEntry> dedup;

  std::vector<FragmentView> Views() const {
    std::vector<FragmentView> v;
    for (const FragmentState& f : fragments) v.push_back({f.id, f.version, f.params, f.momentum});
    return v;
  }
};

// Values are small integers (exact in fp32) mixing id, fragment and index.
inline float ValueFor(uint64_t id, uint32_t frag, uint64_t i, bool momentum) {
  const uint64_t x = (id * 7919 + frag * 131 + i * 17 + (momentum ? 5 : 0)) % 1000003;
  return momentum ? -static_cast<float>(x) : static_cast<float>(x);
}

inline Contents MakeContents(uint64_t id, std::vector<uint32_t> fragment_ids,
                             uint64_t numel_per_fragment, int dedup_entries = 3) {
  Contents c;
  c.id = id;
  c.rounds = id * 2 + 1;
  c.optimizer = {0.5f + 0.001f * static_cast<float>(id % 100), 0.9f};
  for (uint32_t f : fragment_ids) {
    FragmentState s;
    s.id = f;
    s.version = id * 10 + f;
    const uint64_t n = numel_per_fragment + f;  // fragments differ in size
    for (uint64_t i = 0; i < n; ++i) {
      s.params.push_back(ValueFor(id, f, i, false));
      s.momentum.push_back(ValueFor(id, f, i, true));
    }
    c.fragments.push_back(std::move(s));
  }
  for (int w = 0; w < dedup_entries; ++w) {
    DedupEntry d;
    d.worker_id = static_cast<uint32_t>(w / 2 + 1);
    d.fragment_id = static_cast<uint32_t>(w % 2);
    d.generation = id + static_cast<uint64_t>(w);
    d.last_seq = id * 3 + static_cast<uint64_t>(w);
    c.dedup.push_back(d);
  }
  return c;
}

inline absl::Status WriteContents(CheckpointStore& store, const Contents& c, bool sync = false) {
  const std::vector<FragmentView> views = c.Views();
  return store.Write(c.id, c.rounds, c.optimizer, views, c.dedup, sync);
}

// Field-by-field equality with readable failures; dedup order is the store's key order.
inline void ExpectEqual(const Checkpoint& got, const Contents& want) {
  EXPECT_EQ(got.id, want.id);
  EXPECT_EQ(got.rounds, want.rounds);
  EXPECT_EQ(got.optimizer.outer_lr, want.optimizer.outer_lr);
  EXPECT_EQ(got.optimizer.outer_momentum, want.optimizer.outer_momentum);
  ASSERT_EQ(got.fragments.size(), want.fragments.size());
  for (size_t i = 0; i < got.fragments.size(); ++i) {
    EXPECT_EQ(got.fragments[i].id, want.fragments[i].id);
    EXPECT_EQ(got.fragments[i].version, want.fragments[i].version);
    EXPECT_EQ(got.fragments[i].params, want.fragments[i].params) << "fragment " << i;
    EXPECT_EQ(got.fragments[i].momentum, want.fragments[i].momentum) << "fragment " << i;
  }
  EXPECT_EQ(got.dedup, want.dedup);
}

}  // namespace diloco::storage::testutil
