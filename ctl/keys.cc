// diloco-ctl keys: a cluster's CURVE keys in one directory, in the layout the shards and the
// learners read (docs/security.md, "Setting it up"):
//   DIR/server.secret, DIR/server.public      the shards' key pair (all shards may share it)
//   DIR/worker-ID.secret, DIR/worker-ID.public one key pair per learner
//   DIR/authorized_keys                        "ID public-key" lines (--curve_authorized_keys)
// Secret keys are written mode 0600 (schema/curve.h, WriteKeyPair). Keys already there are never
// replaced unless --overwrite is given (which replaces the whole set); --add=ID adds one learner
// to an existing directory without touching the others.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/plan_flags.h"
#include "ctl/commands.h"
#include "schema/curve.h"

ABSL_DECLARE_FLAG(int, workers);  // gen-data's; keys: the number of learners (ids 0..N-1)

ABSL_FLAG(std::string, worker_ids, "", "keys: the learners' worker ids, e.g. 0,1,2");
ABSL_FLAG(int64_t, add, -1, "keys: add a key pair for this worker id to an existing --out=DIR");
ABSL_FLAG(bool, overwrite, false, "keys: replace the keys already in --out=DIR (a new set)");

namespace diloco::ctl {
namespace {

namespace fs = std::filesystem;

std::string WorkerPrefix(const fs::path& dir, uint32_t id) {
  return (dir / absl::StrCat("worker-", id)).string();
}

// The ids of --worker_ids or --workers, sorted; an error names the flag.
absl::StatusOr<std::vector<uint32_t>> WorkerIds() {
  const std::string list = absl::GetFlag(FLAGS_worker_ids);
  if (!list.empty() && FlagGiven("workers"))
    return absl::InvalidArgumentError("keys takes --workers=N or --worker_ids=LIST, not both");
  std::set<uint32_t> ids;
  if (!list.empty()) {
    for (absl::string_view f : absl::StrSplit(list, ',')) {
      uint32_t id = 0;
      if (!absl::SimpleAtoi(f, &id))
        return absl::InvalidArgumentError(
            absl::StrCat("--worker_ids=", list, ": '", f, "' is not a worker id"));
      if (!ids.insert(id).second)
        return absl::InvalidArgumentError(
            absl::StrCat("--worker_ids=", list, ": worker ", id, " listed twice"));
    }
  } else if (FlagGiven("workers")) {
    const int n = absl::GetFlag(FLAGS_workers);
    if (n < 1) return absl::InvalidArgumentError(absl::StrCat("--workers=", n, ": must be >= 1"));
    for (int i = 0; i < n; ++i) ids.insert(static_cast<uint32_t>(i));
  } else {
    return absl::InvalidArgumentError("keys needs --workers=N, --worker_ids=LIST or --add=ID");
  }
  return std::vector<uint32_t>(ids.begin(), ids.end());
}

// The key files of a set that `dir` already holds.
std::vector<std::string> KeyFilesIn(const fs::path& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name == "authorized_keys" || name.ends_with(".secret") || name.ends_with(".public"))
      found.push_back(e.path().string());
  }
  std::sort(found.begin(), found.end());
  return found;
}

absl::Status WriteText(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out.flush()) return absl::UnavailableError(absl::StrCat("cannot write ", tmp.string()));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot write ", path.string()));
  return absl::OkStatus();
}

absl::Status MakeDir(const fs::path& dir) {
  std::error_code ec;
  if (fs::create_directories(dir, ec); ec)
    return absl::UnavailableError(absl::StrCat("cannot create ", dir.string(), ": ", ec.message()));
  if (!fs::is_directory(dir))
    return absl::InvalidArgumentError(absl::StrCat("--out=", dir.string(), ": not a directory"));
  return absl::OkStatus();
}

int NewSet(const fs::path& dir, const std::vector<uint32_t>& ids) {
  if (auto s = MakeDir(dir); !s.ok()) return Fail(s);
  const std::vector<std::string> old = KeyFilesIn(dir);
  if (!old.empty() && !absl::GetFlag(FLAGS_overwrite))
    return Fail(absl::AlreadyExistsError(absl::StrCat(
        dir.string(), " already holds keys (", absl::StrJoin(old, ", "),
        "): refusing to replace them; --overwrite makes a new set, --add=ID adds one learner")));
  for (const std::string& f : old) {
    std::error_code ec;
    if (fs::remove(f, ec); ec)
      return Fail(absl::UnavailableError(absl::StrCat("cannot remove ", f, ": ", ec.message())));
  }
  ::chmod(dir.c_str(), 0700);
  auto server = wire::NewCurveKeyPair();
  if (!server.ok()) return Fail(server.status());
  if (auto s = wire::WriteKeyPair((dir / "server").string(), *server); !s.ok()) return Fail(s);
  std::string authorized = "# worker_id z85-public-key (diloco-server --curve_authorized_keys)\n";
  for (uint32_t id : ids) {
    auto pair = wire::NewCurveKeyPair();
    if (!pair.ok()) return Fail(pair.status());
    if (auto s = wire::WriteKeyPair(WorkerPrefix(dir, id), *pair); !s.ok()) return Fail(s);
    absl::StrAppend(&authorized, id, " ", pair->public_key, "\n");
  }
  if (auto s = WriteText(dir / "authorized_keys", authorized); !s.ok()) return Fail(s);
  std::printf(
      "wrote %s: server.secret, server.public, authorized_keys and worker-ID.secret, "
      "worker-ID.public for workers %s\n",
      dir.c_str(), absl::StrJoin(ids, ",").c_str());
  return 0;
}

int AddOne(const fs::path& dir, int64_t add) {
  if (add < 0 || add > UINT32_MAX) return Usage(absl::StrCat("--add=", add, ": not a worker id"));
  const uint32_t id = static_cast<uint32_t>(add);
  const fs::path authorized = dir / "authorized_keys";
  std::ifstream in(authorized);
  if (!fs::exists(dir / "server.public") || !in)
    return Fail(
        absl::NotFoundError(absl::StrCat(dir.string(),
                                         " holds no key set (server.public and authorized_keys): "
                                         "make one with --workers=N or --worker_ids=LIST first")));
  std::stringstream text;
  text << in.rdbuf();
  auto keys = wire::AuthorizedKeys::Read(authorized.string());
  if (!keys.ok()) return Fail(keys.status());
  for (absl::string_view line : absl::StrSplit(text.str(), '\n')) {
    std::vector<absl::string_view> f =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    uint32_t listed = 0;
    if (f.size() == 2 && absl::SimpleAtoi(f[0], &listed) && listed == id)
      return Fail(absl::AlreadyExistsError(
          absl::StrCat(authorized.string(), " already lists a key for worker ", id)));
  }
  const std::string prefix = WorkerPrefix(dir, id);
  if (fs::exists(prefix + ".secret") || fs::exists(prefix + ".public"))
    return Fail(absl::AlreadyExistsError(
        absl::StrCat(prefix, ".secret or .public exists: refusing to replace it")));
  auto pair = wire::NewCurveKeyPair();
  if (!pair.ok()) return Fail(pair.status());
  if (auto s = wire::WriteKeyPair(prefix, *pair); !s.ok()) return Fail(s);
  std::string all = text.str();
  if (!all.empty() && all.back() != '\n') all += '\n';
  absl::StrAppend(&all, id, " ", pair->public_key, "\n");
  if (auto s = WriteText(authorized, all); !s.ok()) return Fail(s);
  std::printf(
      "wrote %s.secret and %s.public and listed worker %u in %s (restart the shards to "
      "admit it)\n",
      prefix.c_str(), prefix.c_str(), id, authorized.c_str());
  return 0;
}

}  // namespace

int Keys(const Args& args) {
  if (!args.empty()) return Usage("keys takes no arguments, only flags");
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return Usage("keys needs --out=DIR");
  const int64_t add = absl::GetFlag(FLAGS_add);
  if (FlagGiven("add")) {
    if (FlagGiven("workers") || FlagGiven("worker_ids") || absl::GetFlag(FLAGS_overwrite))
      return Usage("--add=ID takes no --workers, --worker_ids or --overwrite");
    return AddOne(out, add);
  }
  auto ids = WorkerIds();
  if (!ids.ok()) return Usage(std::string(ids.status().message()));
  return NewSet(out, *ids);
}

}  // namespace diloco::ctl
