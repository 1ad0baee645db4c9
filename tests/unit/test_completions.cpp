// The completion engine: requests decoded together give the tokens each gives alone (greedy),
// stop strings and max_tokens end an answer as the API says, a full queue and a draining engine
// refuse, a cancelled request is dropped, a long answer slides its window, and an offered model
// serves the requests that start after the running ones finished on the old one; while its
// parameters are installed (a GPU's copy) requests and stats are still answered.
#include "helpers.h"
#include "../scratch_dir.h"

#include "dptrain/infer/completions.h"
#include "dptrain/infer/chat_api.h"
#include "dptrain/infer/serve_api.h"
#include "dptrain/core/error.h"
#include "dptrain/core/json.h"
#include "dptrain/backend/cpu/ops.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

using namespace dptrain;

namespace {

const char* kChars = "abcdefghijklmnopqrstuvwxyz .,";

InferenceModel tiny_model(uint64_t seed, long step, int T = 16) {
    InferenceModel m;
    m.path = "model-" + std::to_string(step);
    m.step = step;
    m.tok = make_char_tokenizer(kChars);
    m.cfg.vocab_size = m.tok->vocab_size();
    m.cfg.block_size = T;
    m.cfg.n_layer = 2;
    m.cfg.n_head = 2;
    m.cfg.n_embd = 16;
    Gpt g(m.cfg, 0);
    m.params.resize(g.num_params());
    g.init(m.params.data(), seed);
    auto noise = testing::randn(m.params.size(), seed + 7, 0.3f);
    for (size_t i = 0; i < noise.size(); ++i) m.params[i] += noise[i];
    return m;
}

std::shared_ptr<Completion> request(const CompletionEngine& e, const std::string& prompt, int max_tokens) {
    auto c = std::make_shared<Completion>();
    c->prompt = e.tokenizer().encode(prompt);
    c->max_tokens = max_tokens;
    c->temperature = 0;
    return c;
}

std::string answer(Completion& c) {
    std::string text, piece;
    while (c.next(&piece)) text += piece;
    return text;
}

// A CPU decoder whose set_params, after the first, waits until the test opens its gate: a GPU
// decoder's copy of the parameters made as slow as the test needs.
class GatedDecoder : public Decoder {
  public:
    explicit GatedDecoder(const GptConfig& cfg) : cpu_(make_cpu_decoder(cfg)) {}
    void reserve(int slots, int max_rows) override { cpu_->reserve(slots, max_rows); }
    void set_params(const float* params) override {
        std::unique_lock<std::mutex> lk(mu_);
        if (calls_++ > 0) {
            cv_.notify_all();
            cv_.wait(lk, [&] { return open_; });
        }
        cpu_->set_params(params);
    }
    void decode(const int* tok, const int* slot, const int* pos, int n, float* logits, const int* out_rows,
                int n_out) override {
        cpu_->decode(tok, slot, pos, n, logits, out_rows, n_out);
    }
    std::string where() const override { return "the CPU, gated"; }
    int vocab_size() const override { return cpu_->vocab_size(); }
    // True once a second set_params is waiting at the gate (within the time given).
    bool installing(std::chrono::seconds within) {
        std::unique_lock<std::mutex> lk(mu_);
        return cv_.wait_for(lk, within, [&] { return calls_ > 1; });
    }
    void open() {
        std::lock_guard<std::mutex> lk(mu_);
        open_ = true;
        cv_.notify_all();
    }

  private:
    std::unique_ptr<Decoder> cpu_;
    std::mutex mu_;
    std::condition_variable cv_;
    int calls_ = 0;
    bool open_ = false;
};

} // namespace

TEST_CASE("completions: a batch of requests gives each the tokens it gets alone", "[serve]") {
    const std::vector<std::string> prompts = {"the ", "a", "quick brown", "z", "hello, world", "mn", "x y"};
    std::vector<std::string> alone;
    {
        CompletionEngine one(tiny_model(3, 10), 1, 16);
        for (const auto& p : prompts) {
            auto c = request(one, p, 12);
            REQUIRE(one.submit(c) == CompletionEngine::Submitted::ok);
            alone.push_back(answer(*c));
            CHECK(c->finish_reason == "length");
            CHECK(c->completion_tokens == 12);
            CHECK(c->model_step == 10);
        }
    }
    CompletionEngine many(tiny_model(3, 10), 4, 16);
    std::vector<std::shared_ptr<Completion>> cs;
    for (const auto& p : prompts) {
        cs.push_back(request(many, p, 12));
        REQUIRE(many.submit(cs.back()) == CompletionEngine::Submitted::ok);
    }
    for (size_t i = 0; i < cs.size(); ++i) {
        INFO("prompt '" << prompts[i] << "'");
        CHECK(answer(*cs[i]) == alone[i]);
    }
    const EngineStats s = many.stats();
    CHECK(s.requests == 7);
    CHECK(s.generated_tokens == 7 * 12);
    // Decoded together: fewer model calls than tokens.
    CHECK(s.steps < s.generated_tokens);
}

TEST_CASE("completions: stop strings end the answer before them; a long answer slides its window", "[serve]") {
    CompletionEngine e(tiny_model(5, 1), 2, 4);
    auto full = request(e, "the ", 40);  // past the block size of 16
    e.submit(full);
    const std::string text = answer(*full);
    REQUIRE(text.size() == 40);  // one character a token
    // A stop string taken from the middle of the answer.
    const std::string stop = text.substr(7, 2);
    auto c = request(e, "the ", 40);
    c->stop = {"\x01never", stop};
    e.submit(c);
    const std::string cut = answer(*c);
    CHECK(c->finish_reason == "stop");
    CHECK(cut == text.substr(0, text.find(stop)));
    CHECK(cut.find(stop) == std::string::npos);
}

TEST_CASE("completions: the decoding thread computes on the engine's thread count, not its maker's", "[serve]") {
    // A new thread starts from OpenMP's default (every core, or OMP_NUM_THREADS), which no count
    // below equals for both engines; this thread's own setting must not reach the engine either.
    const int mine = cpu::get_threads();
    cpu::set_threads(4);
    for (int threads : {1, 3}) {
        CompletionEngine e(tiny_model(5, 1), 2, 4, nullptr, threads);
        auto c = request(e, "the ", 4);
        e.submit(c);
        CHECK(answer(*c).size() == 4);
        CHECK(e.stats().threads == threads);
    }
    cpu::set_threads(mine);
}

TEST_CASE("completions: a full queue and a draining engine refuse; a cancelled request is dropped", "[serve]") {
    CompletionEngine e(tiny_model(9, 1), 1, 1);
    auto a = request(e, "a", 100000), b = request(e, "b", 3), c = request(e, "c", 3);
    REQUIRE(e.submit(a) == CompletionEngine::Submitted::ok);
    // a runs (or is about to): one more may wait, the third is refused.
    CompletionEngine::Submitted rb = e.submit(b), rc = e.submit(c);
    CHECK(rb == CompletionEngine::Submitted::ok);
    CHECK(rc == CompletionEngine::Submitted::queue_full);
    std::string piece;
    REQUIRE(a->next(&piece));  // a is decoding
    a->cancelled = true;
    CHECK(answer(*b) != "");
    CHECK(b->finish_reason == "length");
    std::thread drainer([&] { e.drain(); });
    drainer.join();
    CHECK(e.submit(request(e, "d", 1)) == CompletionEngine::Submitted::draining);
    CHECK(e.stats().cancelled >= 1);
}

TEST_CASE("completions: an offered model serves the requests after the running ones", "[serve]") {
    CompletionEngine e(tiny_model(11, 100), 2, 8);
    auto before = request(e, "the ", 200);
    e.submit(before);
    std::string piece;
    REQUIRE(before->next(&piece));
    e.offer_model(tiny_model(12, 200));
    auto after = request(e, "the ", 5);
    e.submit(after);
    answer(*before);
    answer(*after);
    CHECK(before->model_step == 100);
    CHECK(after->model_step == 200);
    CHECK(after->started_at >= before->finished_at);
    const EngineStats s = e.stats();
    CHECK(s.swaps == 1);
    CHECK(s.model_step == 200);
    // The new parameters are in use: the same request alone on the new model answers alike.
    CompletionEngine fresh(tiny_model(12, 200), 1, 1);
    auto again = request(fresh, "the ", 5), twice = request(e, "the ", 5);
    fresh.submit(again);
    e.submit(twice);
    CHECK(answer(*again) == answer(*twice));
}

TEST_CASE("completions: installing a new model's parameters blocks neither submit nor stats", "[serve]") {
    InferenceModel first = tiny_model(11, 100);
    auto gated = std::make_unique<GatedDecoder>(first.cfg);
    GatedDecoder* gate = gated.get();
    CompletionEngine e(std::move(first), 2, 8, std::move(gated));
    e.offer_model(tiny_model(12, 200));
    REQUIRE(gate->installing(std::chrono::seconds(30)));
    // The decoding thread is inside set_params now. Under the engine's lock these two would wait
    // for the gate; each gets 10 s before the test calls it blocked (and opens the gate, to end).
    auto c = request(e, "the ", 5);
    auto stats = std::async(std::launch::async, [&] { return e.stats(); });
    auto submitted = std::async(std::launch::async, [&] { return e.submit(c); });
    const bool answered = stats.wait_for(std::chrono::seconds(10)) == std::future_status::ready &&
                          submitted.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
    CHECK(answered);
    if (answered) {
        CHECK(stats.get().model_step == 100);  // the old model until the new one is in
        CHECK(submitted.get() == CompletionEngine::Submitted::ok);
        std::lock_guard<std::mutex> lk(c->mu);
        CHECK(c->completion_tokens == 0);  // and nothing decodes meanwhile
    }
    gate->open();
    answer(*c);
    CHECK(c->model_step == 200);
    CHECK(e.stats().swaps == 1);
}

// The field a request names in its refusal, or "accepted".
static std::string refused_field(const std::string& body, const CompletionEngine& e) {
    try {
        parse_completion_request(body, e, ApiLimits{100, "dptrain"}, 1);
    } catch (const ApiError& err) {
        return strfmt("%d %s", err.status, err.param.c_str());
    }
    return "accepted";
}

// OpenAI's API answers 400 for a field it does not have; an answer that ignored "max_token" (16
// tokens instead of 200) would look right to its client.
TEST_CASE("completions API: an unknown or misspelled field is refused by name; the API's own are taken", "[serve]") {
    CompletionEngine e(tiny_model(3, 10), 1, 4);
    CHECK(refused_field("{\"prompt\": \"ab\", \"max_token\": 200}", e) == "400 max_token");
    CHECK(refused_field("{\"prompt\": \"ab\", \"temprature\": 0.5}", e) == "400 temprature");
    CHECK(refused_field("{\"prompt\": \"ab\", \"frobnicate\": true}", e) == "400 frobnicate");
    CHECK(refused_field("{\"prompt\": \"ab\", \"max_tokens\": 2, \"user\": \"u1\", \"stream_options\": "
                        "{\"include_usage\": true}, \"seed\": 3, \"top_k\": 2}",
                        e) == "accepted");
    try {
        parse_completion_request("{\"prompt\": \"ab\", \"max_token\": 200}", e, ApiLimits{100, "dptrain"}, 1);
        FAIL("max_token accepted");
    } catch (const ApiError& err) {
        CHECK(err.message.find("did you mean max_tokens?") != std::string::npos);
    }
}

TEST_CASE("completions API: deeply nested values in any field are refused by name, not recursed into", "[serve]") {
    CompletionEngine e(tiny_model(3, 10), 1, 4);
    // Nested 300,000 deep (600 KB, under the default --max-body): parsing keeps its own stack, but
    // writing such a value back out (the wrong model's message once did) recursed and ended the
    // server on its thread's stack.
    const std::string deep = std::string(300000, '[') + std::string(300000, ']');
    CHECK(refused_field("{\"prompt\": \"ab\", \"model\": " + deep + "}", e) == "400 model");
    CHECK(refused_field("{\"prompt\": " + deep + "}", e) == "400 prompt");
    CHECK(refused_field("{\"prompt\": \"ab\", \"stop\": " + deep + "}", e) == "400 stop");
    CHECK(refused_field("{\"prompt\": \"ab\", \"max_tokens\": " + deep + "}", e) == "400 max_tokens");
    CHECK(refused_field("{\"prompt\": \"ab\", \"logit_bias\": {\"1\": " + deep + "}}", e) == "400 logit_bias");
    CHECK(refused_field(deep, e) == "400 ");
    // Refused as it is parsed, at 256 levels, before the tree grows (300,000 levels made 30 MB of
    // values first), and still named by its field.
    CHECK_THROWS_MATCHES(parse_completion_request("{\"prompt\": \"ab\", \"stop\": " + deep + "}", e,
                                                  ApiLimits{100, "dptrain"}, 1),
                         ApiError, Catch::Predicate<ApiError>([](const ApiError& err) {
                             return err.param == "stop" &&
                                    err.message.find("nested deeper than 256 (in \"stop\")") != std::string::npos;
                         }));
    CHECK(refused_field("{\"prompt\": \"ab\", \"model\": \"gpt-4\"}", e) == "404 model");
    // A prompt longer in bytes than the context could hold in any tokenizer's tokens (256 bytes
    // each) is refused before it is tokenized.
    const std::string long_prompt = "{\"prompt\": \"" + std::string(16 * 256 + 1, 'a') + "\"}";
    CHECK_THROWS_MATCHES(parse_completion_request(long_prompt, e, ApiLimits{100, "dptrain"}, 1), ApiError,
                         Catch::Predicate<ApiError>([](const ApiError& err) {
                             return err.param == "prompt" && err.message.find("4097 bytes") != std::string::npos;
                         }));
    CHECK(refused_field("{\"prompt\": \"ab\", \"model\": \"dptrain\", \"max_tokens\": 3}", e) == "accepted");
}

TEST_CASE("completions: the tokens/s gauge is the last 10 whole seconds', whoever reads it", "[serve]") {
    RecentRate r(1000.2);
    CHECK(r.per_second(1000.9) == 0);  // no whole second yet
    r.add(1000.5, 30);
    r.add(1001.1, 10);
    CHECK(r.per_second(1001.5) == 30);  // second 1000 over: 30 in 1 s
    CHECK(r.per_second(1001.5) == 30);  // a second read sees the same (a per-scrape rate saw 0)
    CHECK(r.per_second(1002.0) == 20);  // (30 + 10) / 2 s
    for (int s = 1002; s < 1020; ++s) r.add(s + 0.5, 5);
    CHECK(r.per_second(1020.3) == 5);  // seconds 1010..1019: the early ones have left the window
    CHECK(r.per_second(1035.0) == 0);  // nothing for over 10 s: stale bins are not counted
    r.add(1035.5, 7);
    CHECK(r.per_second(1036.0) == Approx(0.7));
}

TEST_CASE("token_logprob: the softmax's log at temperature 1, the top ids among the drawable", "[serve]") {
    const float logits[6] = {1.0f, 3.0f, -2.0f, 2.5f, 0.0f, 9.0f};
    double z = 0;
    for (float v : logits) z += std::exp((double)v);
    const TokenLogprob t = token_logprob(logits, 6, 5, 3, 2);  // id 5 is padding: never listed
    CHECK(t.token == 3);
    CHECK(t.logprob == Approx(2.5 - std::log(z)).epsilon(1e-6));
    REQUIRE(t.top.size() == 2);
    CHECK(t.top[0].first == 1);
    CHECK(t.top[1].first == 3);
    CHECK(t.top[0].second == Approx(3.0 - std::log(z)).epsilon(1e-6));
    CHECK(token_logprob(logits, 6, 5, 0, 0).top.empty());
}

// echo + logprobs + max_tokens 0, as lm-evaluation-harness scores a continuation: each prompt
// token's log-probability given the ones before equals a whole-prompt forward's, for a prompt
// longer than one scored piece (64 rows), beside a request decoding in another slot.
TEST_CASE("completions: echo with logprobs scores the prompt in pieces, as one forward does", "[serve]") {
    InferenceModel m = tiny_model(5, 10, 96);
    const GptConfig cfg = m.cfg;
    const std::vector<float> params = m.params;
    CompletionEngine e(std::move(m), 2, 4);
    std::string text;
    for (int i = 0; i < 90; ++i) text += kChars[(i * 7) % 29];
    auto other = request(e, "the cat", 30);
    auto c = request(e, text, 0);
    c->echo = true;
    c->logprobs = 3;
    REQUIRE(e.submit(other) == CompletionEngine::Submitted::ok);
    REQUIRE(e.submit(c) == CompletionEngine::Submitted::ok);
    CHECK(answer(*c).empty());
    answer(*other);
    CHECK(c->finish_reason == "length");
    CHECK(c->completion_tokens == 0);
    const int P = (int)c->prompt.size(), V = cfg.vocab_size;
    REQUIRE((int)c->prompt_logprobs.size() == P - 1);
    // The reference: one decode of the whole prompt, every row's logits.
    auto d = make_cpu_decoder(cfg);
    d->reserve(1, P);
    d->set_params(params.data());
    std::vector<int> slot(P, 0), pos(P);
    for (int i = 0; i < P; ++i) pos[i] = i;
    std::vector<float> logits((size_t)P * V);
    d->decode(c->prompt.data(), slot.data(), pos.data(), P, logits.data());
    for (int i = 0; i + 1 < P; ++i) {
        const TokenLogprob want = token_logprob(logits.data() + (size_t)i * V, V, V, c->prompt[i + 1], 3);
        CHECK(c->prompt_logprobs[i].token == c->prompt[i + 1]);
        CHECK(c->prompt_logprobs[i].logprob == Approx(want.logprob).margin(1e-5));
        REQUIRE(c->prompt_logprobs[i].top.size() == 3);
        CHECK(c->prompt_logprobs[i].top[0].first == want.top[0].first);
    }
    // With tokens to generate, each one's logprob too, and the greedy pick is the top one.
    auto g = request(e, text, 4);
    g->echo = true;
    g->logprobs = 1;
    REQUIRE(e.submit(g) == CompletionEngine::Submitted::ok);
    answer(*g);
    CHECK((int)g->prompt_logprobs.size() == P - 1);
    REQUIRE(g->token_logprobs.size() == 4);
    for (const TokenLogprob& t : g->token_logprobs) CHECK(t.top.at(0).first == t.token);
}

TEST_CASE("completions API: arrays of prompts, echo, logprobs and max_tokens 0 parsed; bad ones named", "[serve]") {
    CompletionEngine e(tiny_model(3, 10), 1, 4);
    const ApiLimits lim{100, "dptrain"};
    CompletionRequest r = parse_completion_request(
        "{\"prompt\": [\"ab\", [1, 2, 3]], \"echo\": true, \"logprobs\": 2, \"max_tokens\": 0, \"seed\": 7}", e, lim, 1);
    REQUIRE(r.choices.size() == 2);
    CHECK(r.choices[0]->prompt == e.tokenizer().encode("ab"));
    CHECK(r.choices[1]->prompt == std::vector<int>{1, 2, 3});
    CHECK(r.choices[1]->seed == 8);
    CHECK((r.choices[0]->echo && r.choices[0]->logprobs == 2 && r.choices[0]->max_tokens == 0));
    CHECK(parse_completion_request("{\"prompt\": [4, 5]}", e, lim, 1).choices.size() == 1);
    CHECK(refused_field("{\"prompt\": \"ab\", \"max_tokens\": 0}", e) == "400 max_tokens");
    CHECK(refused_field("{\"prompt\": \"ab\", \"logprobs\": 6}", e) == "400 logprobs");
    CHECK(refused_field("{\"prompt\": \"ab\", \"logprobs\": true}", e) == "400 logprobs");
    CHECK(refused_field("{\"prompt\": \"ab\", \"echo\": 1}", e) == "400 echo");
    CHECK(refused_field("{\"prompt\": \"ab\", \"echo\": true, \"stream\": true}", e) == "400 stream");
    CHECK(refused_field("{\"prompt\": [\"ab\", \"cd\"], \"stream\": true}", e) == "400 stream");
    CHECK(refused_field("{\"prompt\": []}", e) == "400 prompt");
    CHECK(refused_field("{\"prompt\": [\"ab\", 3]}", e) == "400 prompt");
    CHECK(refused_field("{\"prompt\": [[[1]]]}", e) == "400 prompt");
    CHECK(refused_field("{\"prompt\": [\"\"]}", e) == "400 prompt");
    std::string many = "{\"prompt\": [";
    for (int i = 0; i <= kMaxPrompts; ++i) many += std::string(i ? "," : "") + "\"a\"";
    CHECK(refused_field(many + "]}", e) == "400 prompt");
    // More prompts than the server holds at once could only ever get 429: refused as a bad request.
    CHECK_THROWS_MATCHES(parse_completion_request("{\"prompt\": [\"a\", \"b\", \"c\"]}", e, ApiLimits{100, "dptrain", 2}, 1),
                         ApiError, Catch::Predicate<ApiError>([](const ApiError& err) {
                             return err.status == 400 && err.param == "prompt" &&
                                    err.message.find("more than this server holds at once (2") != std::string::npos;
                         }));
}

TEST_CASE("completions API: the legacy logprobs object of an echoed, scored prompt", "[serve]") {
    CompletionEngine e(tiny_model(3, 10), 1, 4);
    CompletionRequest r =
        parse_completion_request("{\"prompt\": \"abc\", \"echo\": true, \"logprobs\": 1, \"max_tokens\": 1, "
                                 "\"temperature\": 0}",
                                 e, ApiLimits{100, "dptrain"}, 1);
    REQUIRE(e.submit(r.choices[0]) == CompletionEngine::Submitted::ok);
    const std::string gen = answer(*r.choices[0]);
    const Json j = parse_json(completions_body("id", 1, "dptrain", r.choices, {gen}, e.tokenizer()));
    const Json& c = j["choices"][0];
    CHECK(c["text"].get<std::string>() == "abc" + gen);
    const Json& lp = c["logprobs"];
    REQUIRE(lp["tokens"].size() == 4);
    CHECK(lp["tokens"][0] == "a");
    CHECK(lp["token_logprobs"][0].is_null());
    CHECK(lp["top_logprobs"][0].is_null());
    CHECK(lp["token_logprobs"][1].get<double>() < 0);
    CHECK(lp["top_logprobs"][3].size() >= 1);  // the token itself, and the most likely one
    CHECK(lp["top_logprobs"][3].contains(lp["tokens"][3].get<std::string>()));
    CHECK(lp["text_offset"] == Json::array({0, 1, 2, 3}));
    CHECK(j["usage"]["prompt_tokens"] == 3);
    CHECK(j["usage"]["completion_tokens"] == 1);
    // Without echo the offsets still count from the prompt's start, as OpenAI's do.
    r.choices[0]->echo = false;
    const Json k = parse_json(completions_body("id", 1, "dptrain", r.choices, {gen}, e.tokenizer()));
    CHECK(k["choices"][0]["text"].get<std::string>() == gen);
    CHECK(k["choices"][0]["logprobs"]["text_offset"] == Json::array({3}));
}

TEST_CASE("chat API: messages through the template, its stop strings, refusals by field", "[serve]") {
    CompletionEngine e(tiny_model(3, 10, 64), 1, 4);
    const ApiLimits lim{100, "dptrain"};
    ChatTemplate t;
    t.system = "{content}. ";
    t.user = "q {content}, ";
    t.assistant = "a {content}. ";
    t.generation = "a";
    t.stop = {"q "};
    CHECK(t.render({{"system", "be"}, {"user", "hi"}, {"assistant", "yo"}, {"user", "so"}}) == "be. q hi, a yo. q so, a");
    CompletionRequest r = parse_chat_request(
        "{\"messages\": [{\"role\": \"developer\", \"content\": \"be\"}, {\"role\": \"user\", \"content\": "
        "[{\"type\": \"text\", \"text\": \"h\"}, {\"type\": \"text\", \"text\": \"i\"}]}], \"max_completion_tokens\": 5, "
        "\"stop\": \"zz\"}",
        e, lim, t, 1);
    REQUIRE(r.choices.size() == 1);
    CHECK(r.choices[0]->prompt == e.tokenizer().encode("be. q hi, a"));
    CHECK(r.choices[0]->max_tokens == 5);
    CHECK(r.choices[0]->stop == std::vector<std::string>{"zz", "q "});
    const auto refused = [&](const std::string& body) {
        try {
            parse_chat_request(body, e, lim, t, 1);
        } catch (const ApiError& err) {
            return strfmt("%d %s", err.status, err.param.c_str());
        }
        return std::string("accepted");
    };
    const std::string hi = "\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]";
    CHECK(refused("{" + hi + "}") == "accepted");
    CHECK(refused("{}") == "400 messages");
    CHECK(refused("{\"messages\": []}") == "400 messages");
    CHECK(refused("{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}") == "400 messages");
    CHECK(refused("{\"messages\": [{\"role\": \"user\"}]}") == "400 messages");
    CHECK(refused("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}") == "400 messages");
    CHECK(refused("{" + hi + ", \"tools\": [{}]}") == "400 tools");
    CHECK(refused("{" + hi + ", \"tools\": [], \"tool_choice\": \"none\"}") == "accepted");
    CHECK(refused("{" + hi + ", \"tool_choice\": \"required\"}") == "400 tool_choice");
    CHECK(refused("{" + hi + ", \"logprobs\": true}") == "400 logprobs");
    CHECK(refused("{" + hi + ", \"response_format\": {\"type\": \"json_object\"}}") == "400 response_format");
    CHECK(refused("{" + hi + ", \"response_format\": {\"type\": \"text\"}}") == "accepted");
    CHECK(refused("{" + hi + ", \"max_tokens\": 0}") == "400 max_tokens");
    CHECK(refused("{" + hi + ", \"prompt\": \"x\"}") == "400 prompt");
    CHECK(refused("{" + hi + ", \"model\": \"gpt-4\"}") == "404 model");
    std::string big = "{\"messages\": [{\"role\": \"user\", \"content\": \"" + std::string(100, 'a') + "\"}]}";
    CHECK(refused(big) == "400 messages");  // over the context of 64
}

TEST_CASE("chat API: the answer and its chunks in OpenAI's chat shapes", "[serve]") {
    Completion c;
    c.prompt = {1, 2, 3};
    c.completion_tokens = 2;
    c.finish_reason = "stop";
    c.model_step = 7;
    const Json whole = parse_json(chat_body("chatcmpl-1", 5, "dptrain", c, "hi"));
    CHECK(whole["object"] == "chat.completion");
    CHECK(whole["choices"][0]["message"]["role"] == "assistant");
    CHECK(whole["choices"][0]["message"]["content"] == "hi");
    CHECK(whole["choices"][0]["finish_reason"] == "stop");
    CHECK(whole["usage"]["total_tokens"] == 5);
    const Json first = parse_json(chat_chunk("chatcmpl-1", 5, "dptrain", c, "h", true, false));
    CHECK(first["object"] == "chat.completion.chunk");
    CHECK(first["choices"][0]["delta"]["role"] == "assistant");
    CHECK(first["choices"][0]["delta"]["content"] == "h");
    CHECK(first["choices"][0]["finish_reason"].is_null());
    CHECK(!first.contains("usage"));
    const Json last = parse_json(chat_chunk("chatcmpl-1", 5, "dptrain", c, "", false, true));
    CHECK(last["choices"][0]["delta"].empty());
    CHECK(last["choices"][0]["finish_reason"] == "stop");
    CHECK(last["usage"]["completion_tokens"] == 2);
}

TEST_CASE("chat template file: keys replace the defaults; a bad key or file is named", "[serve]") {
    const std::string path = dptrain_test::scratch_dir("chat-template") + "/t.json";
    {
        std::ofstream(path) << "{\"user\": \"<u>{content}</u>\", \"stop\": [\"<u>\"]}";
    }
    const ChatTemplate t = ChatTemplate::read(path);
    CHECK(t.user == "<u>{content}</u>");
    CHECK(t.stop == std::vector<std::string>{"<u>"});
    CHECK(t.generation == ChatTemplate().generation);
    {
        std::ofstream(path) << "{\"usr\": \"x\"}";
    }
    CHECK_THROWS_WITH(ChatTemplate::read(path), Catch::Contains("\"usr\" must be one of"));
    CHECK_THROWS_WITH(ChatTemplate::read(path + ".none"), Catch::Contains("cannot read it"));
    // A run directory's own template, found from the run or any of its checkpoints.
    const std::string run = dptrain_test::scratch_dir("chat-run");
    std::filesystem::create_directories(run + "/checkpoints");
    CHECK(ChatTemplate::beside(run).empty());
    std::ofstream(run + "/chat_template.json") << "{}";
    CHECK(ChatTemplate::beside(run) == run + "/chat_template.json");
    CHECK(ChatTemplate::beside(run + "/checkpoints/ckpt-00000010.h5") == run + "/chat_template.json");
}
