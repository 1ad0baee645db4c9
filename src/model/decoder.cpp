// What every device's decoder shares: the prompt runs that keep a row's bits the same alone or
// batched, and the CPU's factory.
#include "dptrain/model/decoder.h"

#include "dptrain/model/gpt_decoder.h"

namespace dptrain {

void decode_prompt_runs(const int* slot, int n, std::vector<std::pair<int, int>>& runs) {
    runs.clear();
    for (int begin = 0, end; begin < n; begin = end) {
        for (end = begin + 1; end < n && slot[end] == slot[begin];) ++end;
        if (end - begin >= kDecodePromptRows) runs.emplace_back(begin, end);
    }
}

std::unique_ptr<Decoder> make_cpu_decoder(const GptConfig& cfg, Precision weights) {
    return std::make_unique<GptDecoder>(cfg, weights);
}

} // namespace dptrain
