// `dptrain generate`: sample text from a GPT checkpoint (argv without the "generate" word).
#pragma once

namespace dptrain {

// Returns the exit code; throws UserError for a bad option or checkpoint.
int run_generate(int argc, const char* const* argv);

} // namespace dptrain
