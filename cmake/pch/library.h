// The precompiled header of the libraries and programs (cmake/Pch.cmake): the third-party and
// standard headers that most of their files parse, so that a build parses them once instead of
// once per file. Only headers from outside this repository, which change with the system's
// packages, never with an edit here. Each file still includes what it uses. Not nlohmann/json:
// few files use it, and in a precompiled header it made every file's load of the header about
// 0.7 s slower (g++ 12), more than those few files take to parse it.
#pragma once

#include <absl/container/flat_hash_map.h>
#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/string_view.h>
#include <absl/time/time.h>
#include <flatbuffers/flatbuffers.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include <zmq.hpp>
