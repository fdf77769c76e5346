#include "schema/kept_trains.h"

#include <algorithm>
#include <utility>

namespace diloco::wire {

uint64_t PartialTrain::bytes() const {
  uint64_t n = first.payload_bytes();
  for (const auto& f : frames) n += f.size();
  return n;
}

void KeptTrains::Drop(absl::flat_hash_map<Id, PartialTrain>::iterator it) {
  bytes_ -= it->second.bytes();
  trains_.erase(it);
}

bool KeptTrains::Put(PartialTrain t, absl::Time now) {
  const Id id = Id::Of(t.first.header());
  Erase(id);
  if (limits_.bytes == 0) return false;
  t.last = now;
  bytes_ += t.bytes();
  trains_.emplace(id, std::move(t));
  ++kept_;
  while (bytes_ > limits_.bytes) {  // the oldest first: its sender had the longest to come back
    auto oldest = std::min_element(
        trains_.begin(), trains_.end(),
        [](const auto& a, const auto& b) { return a.second.last < b.second.last; });
    ++evicted_;
    Drop(oldest);
  }
  return trains_.contains(id);
}

const PartialTrain* KeptTrains::Find(const Id& id) const {
  auto it = trains_.find(id);
  return it == trains_.end() ? nullptr : &it->second;
}

std::optional<PartialTrain> KeptTrains::Take(const Id& id) {
  auto it = trains_.find(id);
  if (it == trains_.end()) return std::nullopt;
  bytes_ -= it->second.bytes();
  std::optional<PartialTrain> t(std::move(it->second));
  trains_.erase(it);
  ++taken_;
  return t;
}

void KeptTrains::Erase(const Id& id) {
  if (auto it = trains_.find(id); it != trains_.end()) Drop(it);
}

size_t KeptTrains::Expire(absl::Time now) {
  size_t n = 0;
  for (auto it = trains_.begin(); it != trains_.end();) {
    auto next = std::next(it);
    if (now - it->second.last > limits_.time) {
      Drop(it);
      ++n;
    }
    it = next;
  }
  expired_ += n;
  return n;
}

std::vector<HeldTrain> KeptTrains::Held(uint32_t worker, uint64_t generation) const {
  std::vector<HeldTrain> held;
  for (const auto& [id, t] : trains_)
    if (id.worker == worker && id.generation == generation)
      held.emplace_back(id.fragment, t.chunks(), t.first.header().seq(),
                        t.first.header().train_checksum());
  std::sort(held.begin(), held.end(), [](const HeldTrain& a, const HeldTrain& b) {
    return a.fragment_id() < b.fragment_id();
  });
  return held;
}

}  // namespace diloco::wire
