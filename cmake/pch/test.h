// The precompiled header of the gtest executables (cmake/Pch.cmake): the libraries' header and
// gtest, which every test file parses.
#pragma once

#include <gtest/gtest.h>

#include "cmake/pch/library.h"
