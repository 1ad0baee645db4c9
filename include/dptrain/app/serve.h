// `dptrain serve`: the OpenAI-style completions API over a GPT checkpoint, with health probes,
// Prometheus metrics and rollout of newer checkpoints (argv without the "serve" word).
#pragma once

namespace dptrain {

// Serves until SIGTERM or SIGINT (then finishes the requests in flight); returns the exit code.
// Throws UserError for a bad option or checkpoint, or an address it cannot listen on.
int run_serve(int argc, const char* const* argv);

} // namespace dptrain
