// What this build is, for --version on every binary: the release (CMake's project VERSION, the
// one number the Python package's version is read from too), the wire protocol it speaks
// (schema/wire.h's kProtocolVersion, passed in by each program: common/ sits below schema/;
// peers of another protocol refuse each other) and the git
// commit it was built from, captured at build time ("unknown" outside a git checkout), so a
// fleet's processes can be matched against a release and a source tree.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace diloco {

// "diloco-server 0.1.0 (protocol 3, commit 1a2b3c4d5e6f)".
std::string VersionLine(absl::string_view program, uint32_t protocol);

// Makes Abseil's --version print VersionLine(program, protocol) and exit 0. Call before the
// command line is parsed (ParseFlags keeps it), with wire::kProtocolVersion.
void SetVersionFlag(absl::string_view program, uint32_t protocol);

}  // namespace diloco
