// The request fields OpenAI's completions and chat APIs share, and their checks: every refusal is
// an ApiError naming its field. Not for: either API's own fields or bodies (serve_api.cpp,
// chat_api.cpp).
#pragma once

#include "dptrain/core/json.h"
#include "dptrain/infer/completions.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dptrain {

struct ApiError {
    int status = 400;
    std::string param, message;  // param "": the body as a whole
};

struct ApiLimits {
    int max_tokens = 512;
    std::string model;  // a request may name it or no model
    int capacity = 1 << 30;  // requests the server holds at once (--max-batch + --max-queue)
};

namespace api {

[[noreturn]] void refuse(const std::string& param, const std::string& message, int status = 400);
// A number field within [lo, hi] (absent or null: def); range says so in the refusal.
double number_field(const Json& j, const char* key, double def, double lo, double hi, const char* range);
long integer_field(const Json& j, const char* key, long def, long lo, long hi, const std::string& range);
// A field of neither list: 400 naming it, with the nearest known one ("did you mean").
void unknown_fields(const Json& j, const std::vector<const char*>& known, const char* api);
// The body as a JSON object; a model other than the served one refused (404).
Json request_object(const std::string& body, const ApiLimits& limits);
// max_key (max_tokens, at least min_tokens), temperature, top_p, top_k, seed, stop; n and best_of 1;
// suffix, penalties and logit_bias refused unless neutral. stream: the request's.
void sampling_fields(const Json& j, Completion& c, const char* max_key, int min_tokens, const ApiLimits& limits,
                     uint64_t default_seed, bool* stream);

} // namespace api
} // namespace dptrain
