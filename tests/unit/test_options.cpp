// Options: defaults, INI + command line precedence, and one clear message per bad input.
#include "helpers.h"

#include "dptrain/core/error.h"
#include "dptrain/config/option_checks.h"
#include "dptrain/config/options.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

using namespace dptrain;

static ParseResult parse(std::vector<std::string> args) {
    args.insert(args.begin(), "dptrain");
    std::vector<const char*> argv;
    for (auto& a : args) argv.push_back(a.c_str());
    return parse_options((int)argv.size(), argv.data());
}

static std::string error_of(std::vector<std::string> args) {
    try {
        parse(args);
    } catch (const UserError& e) {
        return e.what();
    }
    return "";
}

static std::string write_tmp(const std::string& name, const std::string& text) {
    static std::string dir = testing::temp_dir("options");
    std::string path = dir + "/" + name;
    std::ofstream(path) << text;
    return path;
}

TEST_CASE("defaults are valid and derived paths follow --run-dir", "[options]") {
    Options o = parse({}).opts;
    CHECK(o.model == ModelKind::mlp);
    CHECK(o.hidden_sizes == std::vector<int>{256, 256});
    CHECK(o.checkpoint_dir == "runs/local/checkpoints");
    CHECK(o.metrics == "runs/local/metrics.jsonl");
    Options p = parse({"--run-dir", "/x/y", "--hidden", "8,4,2"}).opts;
    CHECK(p.checkpoint_dir == "/x/y/checkpoints");
    CHECK(p.hidden_sizes == std::vector<int>{8, 4, 2});
}

TEST_CASE("INI file values apply and the command line wins", "[options]") {
    std::string cfg = write_tmp("a.ini", "# comment\nbatch-size = 7\nlr = 0.5\noptimizer = sgd\n");
    Options o = parse({"--config", cfg, "--lr", "0.25"}).opts;
    CHECK(o.batch_size == 7);
    CHECK(o.lr == 0.25);
    CHECK(o.optimizer == Optimizer::Kind::sgd);
}

TEST_CASE("to_ini round-trips every option", "[options]") {
    Options a = parse({"--batch-size", "3", "--hidden", "5,6", "--activation", "gelu", "--lr", "0.0123",
                       "--seed", "99", "--resume", "auto"}).opts;
    std::string cfg = write_tmp("round.ini", a.to_ini());
    Options b = parse({"--config", cfg}).opts;
    CHECK(b.to_ini() == a.to_ini());
    CHECK(b.hidden_sizes == std::vector<int>{5, 6});
    CHECK(b.lr == 0.0123);
}

TEST_CASE("bad options give one line naming the option and the fix", "[options]") {
    std::string e = error_of({"--bach-size", "4"});
    CHECK(e.find("bach-size") != std::string::npos);
    CHECK(e.find("--help") != std::string::npos);
    CHECK(e.find('\n') == std::string::npos);

    e = error_of({"--batch-size", "four"});
    CHECK(e.find("batch-size") != std::string::npos);
    CHECK(e.find("four") != std::string::npos);

    e = error_of({"--batch-size", "0"});
    CHECK(e.find("--batch-size 0") != std::string::npos);

    e = error_of({"--activation", "tanh"});
    CHECK(e.find("--activation 'tanh'") != std::string::npos);
    CHECK(e.find("relu or gelu") != std::string::npos);

    e = error_of({"--gpu-state", "pinned"});
    CHECK(e.find("--gpu-state 'pinned' is unknown; use auto, device or host") != std::string::npos);

    e = error_of({"--precision", "fp16"});
    CHECK(e.find("--precision 'fp16' is unknown; use fp32 or bf16") != std::string::npos);

    e = error_of({"--attention", "sdpa"});
    CHECK(e.find("--attention 'sdpa' is unknown; use matmul or flash") != std::string::npos);
    e = error_of({"--model", "gpt", "--attention", "flash"});
    CHECK(e.find("--attention flash takes bf16 operands; use it with --precision bf16") != std::string::npos);
    e = error_of({"--model", "mlp", "--attention", "flash", "--precision", "bf16"});
    CHECK(e.find("--attention flash is for --model gpt") != std::string::npos);
    CHECK(parse({"--model", "gpt", "--attention", "flash", "--precision", "bf16"}).opts.attention == AttentionKind::flash);

    e = error_of({"--shuffle-block", "0"});
    CHECK(e.find("--shuffle-block 0 must be in 1..") != std::string::npos);

    e = error_of({"--steps", "20", "--profile-ops", "21"});
    CHECK(e.find("--profile-ops 21 must be a step of the run, 1 to --steps 20") != std::string::npos);

    // Boost alone reads -1 into the unsigned seed as 2^64-1.
    e = error_of({"--seed", "-1"});
    CHECK(e == "--seed '-1' must be a whole number from 0 to 18446744073709551615");
    CHECK_FALSE(error_of({"--seed", "18446744073709551616"}).empty());
    CHECK(parse({"--seed", "18446744073709551615"}).opts.seed == 18446744073709551615ull);

    // Valid as doubles, not as the floats the optimizer computes in: each ended in a non-finite
    // loss at step 2 with advice to lower --lr.
    CHECK(error_of({"--beta2", "0.99999999"}).find("--beta2 0.99999999 must be in [0, 1) as a float") != std::string::npos);
    CHECK(error_of({"--beta1", "0.99999999"}).find("--beta1 0.99999999 must be in [0, 1) as a float") != std::string::npos);
    CHECK(error_of({"--momentum", "0.99999999"}).find("--momentum 0.99999999 must be") != std::string::npos);
    CHECK(error_of({"--beta2", "0.99999994"}).empty());
    CHECK(error_of({"--eps", "1e-39"}).find("--eps 1e-39 must be a normal float") != std::string::npos);
    CHECK(error_of({"--eps", "1e-30"}).empty());
    CHECK(error_of({"--lr", "1e39"}).find("--lr 1e+39 must be positive and finite (as a float") != std::string::npos);
    // AdamW's decay factor 1 - lr x wd at or below 0 flips the weights; SGD's L2 has no such factor.
    CHECK(error_of({"--lr", "0.01", "--weight-decay", "300"}).find("--lr 0.01 x --weight-decay 300 = 3: AdamW") !=
          std::string::npos);
    CHECK(error_of({"--lr", "0.01", "--weight-decay", "99"}).empty());
    CHECK(error_of({"--optimizer", "sgd", "--lr", "0.01", "--weight-decay", "300"}).empty());

    e = error_of({"--hidden", "8,x"});
    CHECK(e.find("--hidden") != std::string::npos);

    e = error_of({"--config", "/nonexistent/dptrain.ini"});
    CHECK(e.find("/nonexistent/dptrain.ini") != std::string::npos);
    CHECK(e.find("cannot open") != std::string::npos);
}

TEST_CASE("bad INI contents name the file and the key", "[options]") {
    std::string cfg = write_tmp("bad.ini", "batchsize = 4\n");
    std::string e = error_of({"--config", cfg});
    CHECK(e.find(cfg) != std::string::npos);
    CHECK(e.find("batchsize") != std::string::npos);
    cfg = write_tmp("bad2.ini", "steps = many\n");
    e = error_of({"--config", cfg});
    CHECK(e.find("steps") != std::string::npos);
    CHECK(e.find("many") != std::string::npos);
}

TEST_CASE("--help returns the help text listing every option", "[options]") {
    ParseResult r = parse({"--help"});
    CHECK(r.help);
    for (const char* name : {"--batch-size", "--config", "--resume", "--ranks-per-node", "--checkpoint-every"})
        CHECK(r.help_text.find(name) != std::string::npos);
}

TEST_CASE("a repeated option: the last one wins", "[options]") {
    Options o = parse({"--steps", "5", "--lr", "0.1", "--steps", "7", "--steps", "9"}).opts;
    CHECK(o.steps == 9);
    CHECK(o.lr == 0.1);
}

TEST_CASE("a value containing a Boost message placeholder is refused, not looped on", "[options]") {
    // Found by fuzz_options: Boost's error formatting never ended on this input.
    CHECK(error_of({"--batch-size", "-argument ('%value%')"}).find("cannot handle") != std::string::npos);
    std::string cfg = write_tmp("placeholder.ini", "lr = %option%\n");
    CHECK(error_of({"--config", cfg}).find("cannot handle") != std::string::npos);
    // Also found by it: an INI line Boost cannot parse is quoted into its message as
    // %invalid_line%, so a line holding that placeholder looped the same way.
    cfg = write_tmp("invalid-line.ini", "%pr\n%invalid_line%\n");
    CHECK(error_of({"--config", cfg}).find("cannot handle") != std::string::npos);
}

TEST_CASE("--global-batch: the largest micro-batch up to --batch-size that divides each rank's share", "[options]") {
    struct Case {
        long global;
        int batch, ranks, want_batch, want_accum;
    };
    for (const Case& c : {Case{48, 8, 6, 8, 1}, Case{48, 8, 4, 6, 2}, Case{48, 8, 1, 8, 6}, Case{40, 8, 4, 5, 2},
                          Case{40, 8, 8, 5, 1}, Case{7, 64, 7, 1, 1}, Case{1024, 64, 1, 64, 16}}) {
        Options o = parse({"--global-batch", std::to_string(c.global), "--batch-size", std::to_string(c.batch)}).opts;
        resolve_grad_accum(o, c.ranks);
        INFO(c.global << " on " << c.ranks << " ranks, --batch-size " << c.batch);
        CHECK(o.batch_size == c.want_batch);
        CHECK(o.grad_accum == c.want_accum);
        CHECK((long)o.batch_size * o.grad_accum * c.ranks == c.global);
    }
    Options o = parse({"--global-batch", "40"}).opts;
    std::string e;
    try {
        resolve_grad_accum(o, 3);
    } catch (const UserError& err) {
        e = err.what();
    }
    CHECK(e == "--global-batch 40 does not split over 3 ranks; run on a rank count that divides it (up to 4096: 1 2 "
               "4 5 8 10 20 40)");
    CHECK(global_batch_rank_counts(12, 5) == std::vector<int>{1, 2, 3, 4});
    o = parse({"--global-batch", "40", "--grad-accum", "2"}).opts;
    CHECK_THROWS_AS(resolve_grad_accum(o, 2), UserError);
}

TEST_CASE("--promote-if: the task scores need --eval-task, and the MLP takes none", "[options]") {
    CHECK(error_of({"--model", "gpt", "--promote-if", "val_loss<=2,acc_norm>=0.3"})
              .find("asks for acc_norm, a score of multiple-choice items: give them with --eval-task") !=
          std::string::npos);
    CHECK(error_of({"--eval-task", "items.jsonl"}).find("it needs --model gpt") != std::string::npos);
    const Options o = parse({"--model", "gpt", "--eval-task", "items.jsonl", "--promote-if", "acc>=0.5,acc_tokens>0.1"}).opts;
    const std::vector<PromoteCondition> c = parse_promote_if(o.promote_if);
    REQUIRE(c.size() == 2);
    CHECK((c[0].metric == "acc" && c[0].op == ">=" && c[0].value == 0.5));
    CHECK((c[1].metric == "acc_tokens" && c[1].holds(0.2) && !c[1].holds(0.1)));
    CHECK(error_of({"--promote-if", "acc_nrm>=0.3"}).find("is not a condition") != std::string::npos);
}

// --batch-size auto: kept as the sentinel until the run chooses (the micro-batches a step wait
// for it), written back as "auto"; other words and signs refused naming the option.
TEST_CASE("--batch-size auto parses, prints back and leaves the micro-batches to the choice", "[options]") {
    Options a = parse({"--batch-size", "auto", "--global-batch", "512"}).opts;
    CHECK(a.batch_size == kBatchAuto);
    CHECK(a.to_ini().find("\nbatch-size = auto\n") != std::string::npos);
    const std::string cfg = write_tmp("auto.ini", a.to_ini());
    CHECK(parse({"--config", cfg}).opts.batch_size == kBatchAuto);
    resolve_grad_accum(a, 4);
    CHECK(a.batch_size == kBatchAuto);
    CHECK(a.grad_accum == 1);
    a.batch_size = 48;  // as the run chooses it: 128 a rank in micro-batches of the largest size up to 48 dividing it
    resolve_grad_accum(a, 4);
    CHECK(a.batch_size == 32);
    CHECK(a.grad_accum == 4);
    for (const char* bad : {"-1", "autom", "1.5", "9999999999"}) {
        INFO(bad);
        CHECK(error_of({"--batch-size", bad}).find(std::string("--batch-size '") + bad +
                                                   "' must be a positive whole number or auto") != std::string::npos);
    }
}
