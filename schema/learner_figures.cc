#include "schema/learner_figures.h"

#include <algorithm>

namespace diloco::wire {
namespace {

std::string Cut(const std::string& s) { return s.substr(0, kMaxFigureText); }

std::string Read(const flatbuffers::String* s) {
  return s ? std::string(s->c_str(), std::min<size_t>(s->size(), kMaxFigureText)) : std::string();
}

template <typename T>
std::optional<T> Read(flatbuffers::Optional<T> v) {
  return v.has_value() ? std::optional<T>(*v) : std::nullopt;
}

}  // namespace

flatbuffers::Offset<LearnerFigures> BuildLearnerFigures(flatbuffers::FlatBufferBuilder& fbb,
                                                        const LearnerFiguresFields& f) {
  auto device = f.device.empty() ? 0 : fbb.CreateString(Cut(f.device));
  auto codec = f.codec.empty() ? 0 : fbb.CreateString(Cut(f.codec));
  auto host = f.host.empty() ? 0 : fbb.CreateString(Cut(f.host));
  LearnerFiguresBuilder b(fbb);
  if (f.step) b.add_step(*f.step);
  if (f.loss) b.add_loss(*f.loss);
  if (f.tokens_per_s) b.add_tokens_per_s(*f.tokens_per_s);
  if (f.utilization) b.add_utilization(*f.utilization);
  if (!f.device.empty()) b.add_device(device);
  if (!f.codec.empty()) b.add_codec(codec);
  if (f.inner_steps) b.add_inner_steps(*f.inner_steps);
  if (f.bytes_sent) b.add_bytes_sent(*f.bytes_sent);
  if (f.bytes_received) b.add_bytes_received(*f.bytes_received);
  if (f.mean_staleness) b.add_mean_staleness(*f.mean_staleness);
  if (!f.host.empty()) b.add_host(host);
  return b.Finish();
}

LearnerFiguresFields ReadLearnerFigures(const LearnerFigures& t) {
  LearnerFiguresFields f;
  f.step = Read(t.step());
  f.loss = Read(t.loss());
  f.tokens_per_s = Read(t.tokens_per_s());
  f.utilization = Read(t.utilization());
  f.device = Read(t.device());
  f.codec = Read(t.codec());
  f.inner_steps = Read(t.inner_steps());
  f.bytes_sent = Read(t.bytes_sent());
  f.bytes_received = Read(t.bytes_received());
  f.mean_staleness = Read(t.mean_staleness());
  f.host = Read(t.host());
  return f;
}

}  // namespace diloco::wire
