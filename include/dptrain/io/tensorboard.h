// --tensorboard: scalar event files (TFRecords of Event protobufs, the few fields needed encoded by
// hand and tested against protoc). Not for: images, histograms or graphs, or choosing what is
// recorded (the reporter does).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace dptrain {

uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);  // as TFRecords mask it

// Exposed for the encoding's tests.
std::string tb_file_version_event(double wall_time);
std::string tb_scalars_event(double wall_time, long step, const std::vector<std::pair<std::string, float>>& values);
std::string tb_session_start_event(double wall_time, long step);
std::string tfrecord(const std::string& data);

class TensorBoardWriter {
  public:
    TensorBoardWriter() = default;
    ~TensorBoardWriter();
    TensorBoardWriter(const TensorBoardWriter&) = delete;
    TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

    // Named to sort after every event file there (TensorBoard reads in name order). SessionLog
    // START at start_step + 1 makes TensorBoard drop what earlier runs logged from there, as
    // metrics.jsonl is cut back. Throws UserError naming the path.
    void open(const std::string& dir, const std::string& host, long start_step);
    bool is_open() const { return f_ != nullptr; }
    const std::string& path() const { return path_; }
    // Flushed: a crashed run keeps what it logged.
    void scalars(long step, const std::vector<std::pair<std::string, float>>& values);

  private:
    void put(const std::string& event);
    FILE* f_ = nullptr;
    std::string path_;
};

} // namespace dptrain
