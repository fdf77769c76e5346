// Test helper: a message's frames (header first) built from header fields and payload strings.
#pragma once

#include <string>
#include <vector>
#include <zmq.hpp>

#include "schema/wire.h"

namespace diloco::wire::testing {

inline std::vector<zmq::message_t> Frames(const HeaderFields& h,
                                          const std::vector<std::string>& payloads) {
  std::vector<zmq::message_t> p;
  for (const auto& s : payloads) p.emplace_back(s.data(), s.size());
  std::vector<zmq::message_t> f;
  f.push_back(BuildHeader(h, p));
  for (auto& m : p) f.push_back(std::move(m));
  return f;
}

}  // namespace diloco::wire::testing
