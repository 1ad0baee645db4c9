// Checkpoints: exact round trip (whole, and written in pieces), corruption caught by checksum,
// fallback, and keep-K.
#include "helpers.h"

#include "dptrain/core/checksum.h"
#include "dptrain/io/checkpoint.h"
#include "dptrain/io/promotion.h"
#include "dptrain/core/error.h"
#include "dptrain/data/h5.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace dptrain;

static CheckpointState sample_state(long step) {
    CheckpointState s;
    s.step = step;
    s.epoch = 2;
    s.epoch_offset = 640;
    s.global_batch = 64;
    s.seed = 0xFEEDFACEull;
    s.world_size = 4;
    s.model = "mlp in=3 hidden=4 classes=2 act=relu";
    s.optimizer = "adamw";
    s.options = "lr = 0.001\nsteps = 10\n";
    for (int i = 0; i < 1000; ++i) {
        s.params.push_back(0.001f * i - 0.3f + step);
        s.opt_m.push_back(1e-5f * i);
        s.opt_v.push_back(1e-9f * i * i);
    }
    return s;
}

TEST_CASE("checkpoint round trip is exact", "[checkpoint]") {
    std::string dir = testing::temp_dir("ckpt") + "/nested/dir";
    CheckpointState a = sample_state(20);
    std::string path = save_checkpoint(dir, a, 3);
    CHECK(path == dir + "/ckpt-00000020.h5");
    CheckpointState b = load_checkpoint(path);
    CHECK(b.step == 20);
    CHECK(b.epoch == 2);
    CHECK(b.epoch_offset == 640);
    CHECK(b.global_batch == 64);
    CHECK(b.seed == 0xFEEDFACEull);
    CHECK(b.world_size == 4);
    CHECK(b.model == a.model);
    CHECK(b.optimizer == "adamw");
    CHECK(b.options == a.options);
    CHECK(b.params == a.params);
    CHECK(b.opt_m == a.opt_m);
    CHECK(b.opt_v == a.opt_v);
    // No temporary file is left behind.
    CHECK(access((dir + "/.ckpt-00000020.h5.tmp").c_str(), F_OK) != 0);

    SECTION("an empty optimizer tensor (SGD has no second moment) round-trips") {
        CheckpointState s = sample_state(21);
        s.opt_v.clear();
        CHECK(load_checkpoint(save_checkpoint(dir, s, 3)).opt_v.empty());
    }
}

// Pieces of the sizes a sharded state arrives in (multiples of 16 floats, a short last one): the
// file is the one the whole vectors make, checksums included; a piece that breaks the checksum's
// words, or pieces that do not add up, are refused and leave no checkpoint.
TEST_CASE("a checkpoint written in pieces equals the whole one", "[checkpoint]") {
    const std::string dir = testing::temp_dir("ckpt-pieces");
    const CheckpointState a = sample_state(30);
    auto pieces = [](const std::vector<float>& v, std::vector<size_t> sizes) {
        TensorPieces t;
        t.size = v.size();
        size_t at = 0, k = 0;
        t.next = [&v, sizes, at, k](size_t* n) mutable -> const float* {
            if (k == sizes.size()) return nullptr;
            *n = sizes[k++];
            at += *n;
            return v.data() + at - *n;
        };
        return t;
    };
    CheckpointState meta = a;
    meta.params.clear();
    meta.opt_m.clear();
    meta.opt_v.clear();
    const std::string path = save_checkpoint(dir, meta, 3, pieces(a.params, {1000}), pieces(a.opt_m, {336, 0, 336, 328}),
                                             pieces(a.opt_v, {512, 480, 8}));
    const CheckpointState b = load_checkpoint(path);
    CHECK(b.params == a.params);
    CHECK(b.opt_m == a.opt_m);
    CHECK(b.opt_v == a.opt_v);
    meta.step = 31;
    CHECK_THROWS_WITH(save_checkpoint(dir, meta, 3, pieces(a.params, {1000}), pieces(a.opt_m, {333, 667}),
                                      pieces(a.opt_v, {1000})),
                      Catch::Contains("/opt_m") && Catch::Contains("previous checkpoints are intact"));
    CHECK_THROWS_WITH(save_checkpoint(dir, meta, 3, pieces(a.params, {1000}), pieces(a.opt_m, {1000}),
                                      pieces(a.opt_v, {500})),
                      Catch::Contains("/opt_v: 500 of 1000 floats"));
    CHECK(list_checkpoints(dir).size() == 1);
}

TEST_CASE("a corrupted checkpoint fails its checksum and the previous one is used", "[checkpoint]") {
    std::string dir = testing::temp_dir("ckpt-bad");
    save_checkpoint(dir, sample_state(10), 5);
    std::string newest = save_checkpoint(dir, sample_state(20), 5);
    // Flip bytes inside the parameter data: find the first parameter's bytes in the file.
    std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    float first = sample_state(20).params[5];
    std::string needle(reinterpret_cast<const char*>(&first), 4);
    size_t at = bytes.find(needle);
    REQUIRE(at != std::string::npos);
    f.seekp((std::streamoff)at);
    f.put((char)(bytes[at] ^ 0x40));
    f.close();
    CHECK_THROWS_WITH(load_checkpoint(newest), Catch::Contains("checksum") && Catch::Contains(newest));

    CheckpointState got;
    std::string path;
    std::vector<std::string> warnings;
    REQUIRE(load_latest(dir, &got, &path, &warnings));
    CHECK(got.step == 10);
    CHECK(path == dir + "/ckpt-00000010.h5");
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find(newest) != std::string::npos);
}

TEST_CASE("a truncated newest checkpoint falls back; an empty directory has none", "[checkpoint]") {
    std::string dir = testing::temp_dir("ckpt-trunc");
    CheckpointState got;
    std::string path;
    std::vector<std::string> warnings;
    CHECK_FALSE(load_latest(dir, &got, &path, &warnings));
    save_checkpoint(dir, sample_state(1), 5);
    std::string newest = save_checkpoint(dir, sample_state(2), 5);
    struct stat st;
    REQUIRE(stat(newest.c_str(), &st) == 0);
    REQUIRE(truncate(newest.c_str(), st.st_size - 100) == 0);
    REQUIRE(load_latest(dir, &got, &path, &warnings));
    CHECK(got.step == 1);
}

TEST_CASE("a damaged checkpoint is set aside under a name of its own, never over another", "[checkpoint]") {
    std::string dir = testing::temp_dir("ckpt-aside");
    save_checkpoint(dir, sample_state(1), 5);
    const std::string second = save_checkpoint(dir, sample_state(2), 5);
    CHECK(set_aside(second) == second + ".damaged");
    std::ofstream(second) << "damaged again";  // a later checkpoint of that step, damaged too
    CHECK(set_aside(second) == second + ".damaged.2");
    struct stat st;
    CHECK(stat((second + ".damaged").c_str(), &st) == 0);
    CHECK(stat(second.c_str(), &st) != 0);
    // Out of the checkpoints' names: neither listed, nor rotated, nor resumed from.
    REQUIRE(list_checkpoints(dir).size() == 1);
    CHECK(list_checkpoints(dir)[0] == dir + "/ckpt-00000001.h5");
    CHECK_THROWS_WITH(set_aside(dir + "/ckpt-00000009.h5"), Catch::Contains("cannot be moved aside"));
}

TEST_CASE("a checkpoint without a valid header is refused before HDF5 parses it", "[checkpoint]") {
    std::string dir = testing::temp_dir("ckpt-header");
    std::string path = save_checkpoint(dir, sample_state(3), 5);
    {
        std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(0);
        f.put('X');
    }
    CHECK_THROWS_WITH(load_checkpoint(path), Catch::Contains("not a dptrain checkpoint"));
    std::ofstream(dir + "/ckpt-00000004.h5") << "not even HDF5";
    CHECK_THROWS_WITH(load_checkpoint(dir + "/ckpt-00000004.h5"), Catch::Contains("not a dptrain checkpoint"));
}

TEST_CASE("a checkpoint of another format is refused, never skipped or moved aside as damaged", "[checkpoint]") {
    std::string dir = testing::temp_dir("ckpt-format");
    save_checkpoint(dir, sample_state(3), 5);
    const std::string newest = save_checkpoint(dir, sample_state(4), 5);
    {
        std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(sizeof "DPTRAIN-CHECKPOINT " - 1);
        f.put('2');  // "DPTRAIN-CHECKPOINT 2 size=...": a later dptrain's
    }
    CHECK_THROWS_AS(load_checkpoint(newest), CheckpointFormatError);
    CHECK_THROWS_WITH(load_checkpoint(newest), Catch::Contains("a checkpoint of format 2, written by a later dptrain"));
    CheckpointState got;
    std::string path;
    std::vector<std::string> damaged;
    CHECK_THROWS_AS(load_latest(dir, &got, &path, &damaged), CheckpointFormatError);  // not step 3's
    CHECK(damaged.empty());
    std::string p = dir;
    CHECK_THROWS_WITH(load_checkpoint_or_newest(&p, "--checkpoint"), Catch::Contains("format 2"));
    // A format no dptrain writes (a damaged digit), or a later one whose file does not verify: damage,
    // and the newest good one before it is used.
    for (const char* damage : {"0", "2 body"}) {
        {
            std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
            f.seekp(sizeof "DPTRAIN-CHECKPOINT " - 1);
            f.put(damage[0]);
            if (damage[1]) {
                f.seekp(5000);
                f.put('X');
            }
        }
        CHECK_THROWS_AS(load_checkpoint(newest), UserError);
        try {
            load_checkpoint(newest);
        } catch (const CheckpointFormatError&) {
            FAIL("header format " << damage << ": taken for a later dptrain's checkpoint");
        } catch (const UserError&) {
        }
        damaged.clear();
        REQUIRE(load_latest(dir, &got, &path, &damaged));
        CHECK(got.step == 3);
        CHECK(damaged.size() == 1);
    }
}

TEST_CASE("a directory whose every checkpoint is damaged is refused with each one's reason", "[checkpoint]") {
    std::string dir = testing::temp_dir("ckpt-alldamaged");
    std::ofstream(dir + "/ckpt-00000004.h5") << "not even HDF5";
    std::ofstream(dir + "/ckpt-00000005.h5");
    std::string p = dir;
    CHECK_THROWS_WITH(load_checkpoint_or_newest(&p, "--checkpoint"),
                      Catch::Matches("--checkpoint .*: no complete checkpoint in .* \\(.*ckpt-00000005.h5: not a dptrain "
                                     "checkpoint .*; .*ckpt-00000004.h5: not a dptrain checkpoint .*\\); train there first.*"));
}

TEST_CASE("only the newest K checkpoints are kept", "[checkpoint]") {
    std::string dir = testing::temp_dir("ckpt-keep");
    for (long s = 1; s <= 5; ++s) save_checkpoint(dir, sample_state(s * 100), 2);
    auto all = list_checkpoints(dir);
    REQUIRE(all.size() == 2);
    CHECK(all[0] == dir + "/ckpt-00000500.h5");
    CHECK(all[1] == dir + "/ckpt-00000400.h5");
}

TEST_CASE("only the names checkpoints are written under count, ordered by step", "[checkpoint]") {
    CHECK(checkpoint_step("d/ckpt-00000042.h5") == 42);
    CHECK(checkpoint_step("ckpt-123456789.h5") == 123456789);  // past 8 digits, as %08ld writes it
    for (const char* other : {"ckpt-42.h5", "ckpt-0000042.h5", "ckpt-000000042.h5", "ckpt-+0000042.h5",
                              "ckpt- 0000042.h5", "ckpt-00000042.h5.damaged", "ckpt-0000004x.h5", "ckpt-.h5"})
        CHECK(checkpoint_step(other) == -1);
    std::string dir = testing::temp_dir("ckpt-names");
    for (long s : {15L, 20L}) save_checkpoint(dir, sample_state(s), 3);
    // A hand copy under a short name is no checkpoint: neither the newest, nor kept over real ones.
    std::filesystem::copy_file(dir + "/ckpt-00000015.h5", dir + "/ckpt-10.h5");
    save_checkpoint(dir, sample_state(100000000), 3);  // a 9-digit name, newest though first in text order
    save_checkpoint(dir, sample_state(30), 3);
    auto all = list_checkpoints(dir);
    REQUIRE(all.size() == 3);
    CHECK(all[0] == dir + "/ckpt-100000000.h5");
    CHECK(all[1] == dir + "/ckpt-00000030.h5");
    CHECK(all[2] == dir + "/ckpt-00000020.h5");
    CHECK(std::filesystem::exists(dir + "/ckpt-10.h5"));
}

TEST_CASE("checksum64 sees every byte and its position", "[checkpoint]") {
    std::vector<unsigned char> a(37, 1), b = a;
    CHECK(checksum64(a.data(), a.size()) == checksum64(b.data(), b.size()));
    b[36] = 2;
    CHECK(checksum64(a.data(), a.size()) != checksum64(b.data(), b.size()));
    b = a;
    b[3] = 0, b[11] = 2;  // same byte sum, different bytes
    CHECK(checksum64(a.data(), a.size()) != checksum64(b.data(), b.size()));
    CHECK(checksum64(a.data(), 36) != checksum64(a.data(), 37));
}

TEST_CASE("the optimizer's update count round-trips under a checksum of its own", "[checkpoint]") {
    const std::string dir = testing::temp_dir("ckpt-updates");
    CheckpointState s = sample_state(30);
    s.updates = 28;  // two steps skipped as non-finite
    const std::string path = save_checkpoint(dir, s, 3);
    CHECK(load_checkpoint(path).updates == 28);
    // A checkpoint from before the count was kept (none written): -1, read as its step.
    CHECK(load_checkpoint(save_checkpoint(dir, sample_state(31), 3)).updates == -1);
    // A count changed after the write is refused as corruption (the file's checksum sees it first;
    // the count's own checksum, outside the other attributes', lets an older dptrain, which knows no
    // such attribute, verify the file).
    {
        hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
        REQUIRE(f >= 0);
        REQUIRE(H5Adelete(f, "updates") >= 0);
        h5::write_attr_i64(f, "updates", 30);
        H5Fclose(f);
    }
    CHECK_THROWS_WITH(load_checkpoint(path), Catch::Contains("corrupt file"));
}

// The promotion log: promotions in force after withdrawals, a cut last line left out, any other
// bad line named; the rotation keeps promoted checkpoints.
TEST_CASE("promotions: replayed with withdrawals; the rotation keeps the promoted", "[checkpoint]") {
    const std::string dir = testing::temp_dir("promote");
    bool has_log = true;
    CHECK(read_promotions(dir, &has_log).empty());
    CHECK(!has_log);
    const auto promo = [](long step) {
        Promotion p;
        p.step = step;
        p.file = checkpoint_path("", step).substr(1);
        p.time = 1000 + step;
        return p;
    };
    for (long s : {10, 20, 30}) append_promotion(dir, "promote", promo(s));
    append_promotion(dir, "withdraw", promo(30));
    append_promotion(dir, "withdraw", promo(99));  // nothing of that step: nothing changes
    std::vector<Promotion> a = read_promotions(dir, &has_log);
    REQUIRE(a.size() == 2);
    CHECK(has_log);
    CHECK((a[0].step == 10 && a[1].step == 20 && a[1].file == "ckpt-00000020.h5" && a[1].time == 1020));
    // Checkpoints 10..50 with --keep-checkpoints 1: the newest and the promoted 10 and 20 stay.
    for (long s : {10, 20, 30, 40, 50}) save_checkpoint(dir, sample_state(s), 1);
    std::vector<long> kept;
    for (const std::string& p : list_checkpoints(dir)) kept.push_back(checkpoint_step(p));
    CHECK(kept == std::vector<long>{50, 20, 10});
    {
        std::ofstream(dir + "/" + kPromotionLog, std::ios::app) << "{\"action\": \"promote\", \"st";  // cut short
    }
    CHECK(read_promotions(dir).size() == 2);
    append_promotion(dir, "promote", promo(40));  // drops the cut record first
    CHECK(read_promotions(dir).size() == 3);
    {
        std::ofstream(dir + "/" + kPromotionLog, std::ios::app) << "not a record\n{}\n";
    }
    CHECK_THROWS_WITH(read_promotions(dir), Catch::Contains("not JSON"));
    const std::string other = testing::temp_dir("promote-bad");
    {
        std::ofstream(other + "/" + kPromotionLog) << "{\"action\": \"demote\", \"step\": 1, \"file\": \"x\"}\n{}\n";
    }
    CHECK_THROWS_WITH(read_promotions(other), Catch::Contains("action must be promote or withdraw"));
}
