#include "worker/data/source.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/data/token_file.h"

namespace diloco::data {
namespace {

absl::StatusOr<std::vector<uint16_t>> ReadAny(DataKind kind, const std::string& path, int vocab) {
  if (kind == DataKind::kTokenFile) return ReadTokenFile(path, vocab);
  if (vocab < 256)
    return absl::InvalidArgumentError(
        absl::StrCat("text data needs a vocabulary of at least 256 (bytes), model has ", vocab));
  return ReadTextAsBytes(path);
}

}  // namespace

absl::StatusOr<DataStreams> LoadData(const DataOptions& o, int vocab) {
  if (o.num_workers < 1 || o.worker_index < 0 || o.worker_index >= o.num_workers)
    return absl::InvalidArgumentError(
        absl::StrCat("data: worker index ", o.worker_index, " not in [0, ", o.num_workers, ")"));
  DataStreams d;
  if (o.kind == DataKind::kSynthetic) {
    MarkovMixtureOptions mo = o.synthetic;
    if (mo.vocab > vocab)
      return absl::InvalidArgumentError(
          absl::StrCat("synthetic data vocabulary ", mo.vocab, " exceeds the model's ", vocab));
    absl::StatusOr<MarkovMixture> m = MarkovMixture::Create(mo);
    if (!m.ok()) return m.status();
    // One worker alone sees every component equally; several split them non-IID.
    const std::vector<double> w =
        o.num_workers == 1 ? m->UniformWeights()
                           : m->ShardWeights(o.worker_index, o.num_workers, o.own_fraction);
    const std::vector<double> u = m->UniformWeights();
    const uint64_t base = mo.seed * 1000003ull;
    d.train = m->Generate(w, o.train_tokens, base + 1 + o.worker_index).tokens;
    // Held out: chain s % K for segment s, the same on every worker.
    d.heldout_stream = m->GenerateRoundRobin(o.heldout_tokens, base);
    d.heldout = d.heldout_stream.tokens;
    d.train_entropy_rate = m->MixtureEntropyRate(w);
    d.heldout_entropy_rate = m->MixtureEntropyRate(u);
    d.description = absl::StrFormat(
        "synthetic Markov mixture K=%d successors=%d seed=%d worker %d/%d: train entropy %.4f "
        "nats/token, held-out %.4f",
        mo.components, mo.successors, mo.seed, o.worker_index, o.num_workers, d.train_entropy_rate,
        d.heldout_entropy_rate);
    d.mixture = *std::move(m);
    return d;
  }
  absl::StatusOr<std::vector<uint16_t>> all = ReadAny(o.kind, o.path, vocab);
  if (!all.ok()) return all.status();
  size_t train_end = all->size();
  if (!o.heldout_path.empty()) {
    absl::StatusOr<std::vector<uint16_t>> h = ReadAny(o.kind, o.heldout_path, vocab);
    if (!h.ok()) return h.status();
    d.heldout = *std::move(h);
  } else {
    train_end = static_cast<size_t>(all->size() * (1.0 - o.heldout_fraction));
    d.heldout.assign(all->begin() + train_end, all->end());
  }
  const size_t per = train_end / o.num_workers;
  d.train.assign(all->begin() + per * o.worker_index, all->begin() + per * (o.worker_index + 1));
  d.description =
      absl::StrCat(o.path, ": worker ", o.worker_index, "/", o.num_workers, " trains on ",
                   d.train.size(), " tokens, held-out ", d.heldout.size());
  return d;
}

}  // namespace diloco::data
