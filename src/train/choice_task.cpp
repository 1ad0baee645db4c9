// Multiple-choice scoring (choice_task.h): each ending's tokens decoded after its context, their
// log-probabilities summed; the accuracies from the sums every rank holds alike.
#include "dptrain/train/choice_task.h"

#include "dptrain/core/error.h"
#include "dptrain/core/json.h"
#include "dptrain/io/reliability.h"

#include <algorithm>
#include <fstream>

namespace dptrain {

namespace {

// A label as HellaSwag writes it (a number, or a string of one); -1 when it is neither.
long label_of(const Json& l) {
    if (l.is_number_integer()) return l.get<long>();
    if (!l.is_string() || l.get<std::string>().empty()) return -1;
    char* end = nullptr;
    const long v = std::strtol(l.get<std::string>().c_str(), &end, 10);
    return *end == '\0' ? v : -1;  // "B" is no index
}

// One line: HellaSwag's released form (ctx, endings, label) or {context, choices, answer}. Throws
// the refusal with `where` (OPTION FILE:LINE) before it.
ChoiceItem parse_item(const std::string& line, const std::string& where) {
    const auto bad = [&](const std::string& what) { return UserError(where + ": " + what); };
    Json j;
    try {
        j = parse_json(line);
    } catch (const JsonError& e) {
        throw bad(std::string("not JSON (") + e.what() + ")");
    }
    const bool hs = j.is_object() && j.contains("ctx");
    const char *ctx = hs ? "ctx" : "context", *ends = hs ? "endings" : "choices", *lab = hs ? "label" : "answer";
    if (!j.is_object() || !j.contains(ctx) || !j[ctx].is_string() || !j.contains(ends) || !j[ends].is_array() ||
        j[ends].size() < 2 || !j.contains(lab))
        throw bad("want {\"ctx\", \"endings\", \"label\"} (HellaSwag) or {\"context\", \"choices\", \"answer\"}");
    ChoiceItem it;
    it.context = j[ctx].get<std::string>();
    if (it.context.empty()) throw bad(std::string(ctx) + " is empty");
    for (const Json& e : j[ends]) {
        if (!e.is_string() || e.get<std::string>().empty()) throw bad(std::string(ends) + ": non-empty strings");
        it.endings.push_back((hs ? " " : "") + e.get<std::string>());
    }
    const long label = label_of(j[lab]);
    if (label < 0 || label >= (long)it.endings.size())
        throw bad(strfmt("%s must be an index into %s (0..%zu)", lab, ends, it.endings.size() - 1));
    it.label = (int)label;
    return it;
}

// Code points, as lm-evaluation-harness's len() of the continuation.
long chars_of(const std::string& s) {
    return (long)std::count_if(s.begin(), s.end(), [](char c) { return ((unsigned char)c & 0xC0) != 0x80; });
}

// The three choices of one item from its endings' sums.
std::array<int, 3> choose(const ChoiceItem& it, const double* ll, const double* tokens) {
    std::array<int, 3> best = {0, 0, 0};
    for (int e = 1; e < (int)it.endings.size(); ++e) {
        if (ll[e] > ll[best[0]]) best[0] = e;
        if (ll[e] / chars_of(it.endings[e]) > ll[best[1]] / chars_of(it.endings[best[1]])) best[1] = e;
        if (ll[e] / tokens[e] > ll[best[2]] / tokens[best[2]]) best[2] = e;
    }
    return best;
}

} // namespace

std::vector<ChoiceItem> read_choice_items(const std::string& path, const std::string& option) {
    std::ifstream in(path);
    if (!in) throw UserError(strfmt("%s %s: cannot read it", option.c_str(), path.c_str()));
    std::vector<ChoiceItem> items;
    std::string line;
    for (int n = 1; std::getline(in, line); ++n)
        if (line.find_first_not_of(" \t\r") != std::string::npos)
            items.push_back(parse_item(line, strfmt("%s %s:%d", option.c_str(), path.c_str(), n)));
    if (items.empty()) throw UserError(strfmt("%s %s: no items", option.c_str(), path.c_str()));
    return items;
}

ChoiceScorer::ChoiceScorer(const GptConfig& cfg, TokenizerPtr tok, std::unique_ptr<Decoder> dec)
    : cfg_(cfg), tok_(std::move(tok)), dec_(std::move(dec)) {
    dec_->reserve(1, cfg.block_size);
    logits_.resize((size_t)cfg.block_size * cfg.vocab_size);
}

void ChoiceScorer::check(const std::vector<ChoiceItem>& items, const std::string& where) const {
    for (size_t i = 0; i < items.size(); ++i) {
        if (tok_->encode(items[i].context).empty())
            throw UserError(strfmt("%s, item %zu: the context encodes to no tokens", where.c_str(), i + 1));
        for (const std::string& e : items[i].endings)
            if (const size_t n = tok_->encode(e).size(); n == 0 || (int)n >= cfg_.block_size)
                throw UserError(strfmt("%s, item %zu: an ending of %zu tokens; it must fit the block size %d with a "
                                       "token of context",
                                       where.c_str(), i + 1, n, cfg_.block_size));
    }
}

// The sum of the ending's tokens' log-probabilities given the context (cut from the left where
// both exceed the block size), and its token count.
std::pair<double, int> ChoiceScorer::loglikelihood(const std::string& context, const std::string& ending) {
    const int T = cfg_.block_size, V = cfg_.vocab_size;
    std::vector<int> ctx = tok_->encode(context), cont = tok_->encode(ending);
    const size_t keep = std::min(ctx.size(), (size_t)(T - cont.size()));
    std::vector<int> ids(ctx.end() - (long)keep, ctx.end());
    const int first = (int)ids.size();
    ids.insert(ids.end(), cont.begin(), cont.end());
    const int n = (int)ids.size(), outs = (int)cont.size();
    std::vector<int> slot(n, 0), pos(n), rows(outs);
    for (int i = 0; i < n; ++i) pos[i] = i;
    for (int k = 0; k < outs; ++k) rows[k] = first - 1 + k;
    dec_->decode(ids.data(), slot.data(), pos.data(), n, logits_.data(), rows.data(), outs);
    double ll = 0;
    for (int k = 0; k < outs; ++k) ll += token_logprob(logits_.data() + (size_t)k * V, V, V, ids[first + k], 0).logprob;
    return {ll, outs};
}

int ChoiceScorer::score(const std::vector<ChoiceItem>& items, const float* params, MpiCommunicator& world,
                        ChoiceScores* out) {
    ChoiceScores& s = *out;
    s = ChoiceScores{};
    size_t total = 0;
    for (const ChoiceItem& it : items) s.at.push_back(total), total += it.endings.size();
    s.ll.assign(total, 0.0);
    s.tokens.assign(total, 0.0);
    dec_->set_params(params);
    const size_t W = (size_t)world.size();
    for (size_t round = 0; round < items.size(); round += W) {
        int sig = preemption_signal();
        world.allreduce(&sig, 1, ReduceOp::max);
        if (sig != 0) return sig;
        const size_t i = round + (size_t)world.rank();
        if (i >= items.size()) continue;
        for (size_t e = 0; e < items[i].endings.size(); ++e) {
            const auto [ll, n] = loglikelihood(items[i].context, items[i].endings[e]);
            s.ll[s.at[i] + e] = ll;
            s.tokens[s.at[i] + e] = n;
        }
    }
    world.allreduce_sum(s.ll.data(), total);
    world.allreduce_sum(s.tokens.data(), total);
    double right[3] = {0, 0, 0};
    for (size_t i = 0; i < items.size(); ++i) {
        s.pred.push_back(choose(items[i], s.ll.data() + s.at[i], s.tokens.data() + s.at[i]));
        for (int k = 0; k < 3; ++k) right[k] += s.pred.back()[k] == items[i].label;
    }
    const double n = (double)items.size();
    s.acc = right[0] / n, s.acc_norm = right[1] / n, s.acc_tokens = right[2] / n;
    return 0;
}

} // namespace dptrain
