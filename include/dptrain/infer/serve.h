// `dptrain serve`'s entry point. Not for: the server itself (serve.cpp).
#pragma once

#include <string>

namespace dptrain {

// argv without "serve". Until SIGTERM/SIGINT, then finishes the requests in flight; returns the
// exit code. Throws UserError. `program`: for --help and errors.
int run_serve(int argc, const char* const* argv, const std::string& program);

} // namespace dptrain
