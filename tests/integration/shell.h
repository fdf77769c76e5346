// A shell command run to its end from a test: its exit status and what it printed (stdout and
// stderr together), for the tests that drive diloco-ctl and the other programs by hand.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <utility>

namespace diloco::testing {

inline  // Runs a command, returns (exit status, stdout+stderr).
    std::pair<int, std::string>
    Shell(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  while (p && std::fgets(buf, sizeof(buf), p)) out += buf;
  const int st = p ? ::pclose(p) : -1;
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

}  // namespace diloco::testing
