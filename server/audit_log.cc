#include "server/audit_log.h"

#include "absl/strings/str_cat.h"
#include "common/checksum.h"

namespace diloco::server {

absl::StatusOr<AuditLog> AuditLog::Open(const std::string& path) {
  auto log = EventLog::Open(path);
  if (!log.ok()) return log.status();
  AuditLog a;
  a.log_ = *std::move(log);
  a.on_ = !path.empty();
  return a;
}

uint64_t AuditLog::Digest(const std::vector<uint64_t>& chunk_checksums) {
  return Checksum64(chunk_checksums.data(), chunk_checksums.size() * sizeof(uint64_t)) &
         ((uint64_t{1} << 48) - 1);
}

void AuditLog::Started(const Shard& shard) {
  if (!on_) return;
  for (uint32_t id : shard.owned()) {
    const auto sums = shard.published_checksums(id);
    JsonObject ev;
    ev.Add("event", "recovered").Add("incarnation", absl::StrCat(shard.incarnation()));
    ev.Add("fragment", id).Add("version", shard.published_version(id));
    ev.Add("digest", sums ? Digest(*sums) : uint64_t{0});
    log_.Write(ev);
  }
}

size_t AuditLog::Answers(const Shard& shard, const std::vector<Outgoing>& out) {
  size_t applied = 0;
  for (const auto& o : out) {
    const auto& h = o.header;
    if (h.type == wire::MsgType::PushAck && h.ack == wire::AckStatus::Initialized && on_) {
      JsonObject ev;
      ev.Add("event", "initialized").Add("incarnation", absl::StrCat(shard.incarnation()));
      ev.Add("fragment", h.fragment_id).Add("worker", h.worker_id);
      log_.Write(ev);
    }
    if (h.type != wire::MsgType::FragmentUpdate || h.ack != wire::AckStatus::Applied) continue;
    ++applied;
    if (!on_) continue;
    JsonObject ev;
    ev.Add("event", "applied").Add("incarnation", absl::StrCat(shard.incarnation()));
    ev.Add("fragment", h.fragment_id).Add("version", h.version);
    ev.Add("digest", o.values_checksums ? Digest(*o.values_checksums) : uint64_t{0});
    ev.Add("worker", h.worker_id).Add("generation", h.generation).Add("seq", h.seq);
    ev.Add("steps", o.push_steps).Add("tokens", o.push_tokens);
    log_.Write(ev);
  }
  return applied;
}

}  // namespace diloco::server
