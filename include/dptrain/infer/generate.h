// `dptrain generate`'s entry point. Not for: sampling itself (generate.cpp, inference.h).
#pragma once

#include <string>

namespace dptrain {

// argv without "generate". Returns the exit code; throws UserError.
int run_generate(int argc, const char* const* argv, const std::string& program);

} // namespace dptrain
