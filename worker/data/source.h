// Where a worker's tokens come from: the built-in synthetic Markov mixture (non-IID shards, known
// entropy), an llm.c .bin file, or a raw text file (bytes). LoadData returns this worker's
// training stream and the held-out stream, which is the same on every worker.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/markov.h"

namespace diloco::data {

enum class DataKind { kSynthetic, kTokenFile, kTextFile };

struct DataOptions {
  DataKind kind = DataKind::kSynthetic;
  // kTokenFile / kTextFile: the training file; worker i of n trains on the i-th contiguous
  // 1/n of it. heldout_path: a separate held-out file; if empty, the last heldout_fraction of
  // `path` is held out (and not trained on).
  std::string path;
  std::string heldout_path;
  double heldout_fraction = 0.05;
  // kSynthetic.
  MarkovMixtureOptions synthetic;
  double own_fraction = 0.8;  // share of this worker's tokens from component worker % K
  int64_t train_tokens = int64_t{1} << 22;
  // The held-out stream: segment s from chain s % K. The default is 260 whole segments of the
  // default length (65 per chain for K = 4; with an odd count per chain, held-out windows spread
  // evenly over the stream (Batcher::FixedStart) meet every chain exactly equally for every
  // window count that is a multiple of K and every seq_len dividing segment_length; 2^18 tokens,
  // 64 per chain, put every window on one chain) plus the one token that makes every token of
  // those segments a target.
  int64_t heldout_tokens = int64_t{260} * 1024 + 1;
  // This worker's place among the workers (shards the data).
  int worker_index = 0;
  int num_workers = 1;
};

struct DataStreams {
  std::vector<uint16_t> train;
  std::vector<uint16_t> heldout;
  // Synthetic only: the mixture and the held-out stream with its chain labels.
  std::optional<MarkovMixture> mixture;
  MarkovStream heldout_stream;
  double train_entropy_rate = -1;    // nats/token, synthetic only (else -1)
  double heldout_entropy_rate = -1;  // nats/token, synthetic only (else -1)
  std::string description;
};

absl::StatusOr<DataStreams> LoadData(const DataOptions& options, int vocab);

}  // namespace diloco::data
