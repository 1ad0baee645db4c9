// TensorBoard event files (--tensorboard): scalar summaries as TensorBoard reads them, one
// events.out.tfevents.TIME.HOST file per run in the run directory, so that `tensorboard --logdir`
// over a folder of run directories shows each run. The format: TFRecords (a little-endian uint64
// length, its masked CRC-32C, the bytes, their masked CRC-32C), each an Event protocol buffer
// (wall_time, step, and a file_version, a Summary of tagged simple values, or a SessionLog),
// encoded here field by field: the handful of fields these need, tested against protoc's decoder.
// Not for: images, histograms or graphs; or choosing what is recorded (the reporter does).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace dptrain {

// CRC-32C (Castagnoli), as TFRecords use it, and the masking TFRecords apply to it.
uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

// The protocol-buffer bytes of the Events written (for tests of the encoding).
std::string tb_file_version_event(double wall_time);
std::string tb_scalars_event(double wall_time, long step, const std::vector<std::pair<std::string, float>>& values);
std::string tb_session_start_event(double wall_time, long step);
// One TFRecord around `data`.
std::string tfrecord(const std::string& data);

class TensorBoardWriter {
  public:
    TensorBoardWriter() = default;
    ~TensorBoardWriter();
    TensorBoardWriter(const TensorBoardWriter&) = delete;
    TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

    // Creates DIR/events.out.tfevents.TIME.HOST.PID, never over another file, named to sort after
    // every event file already there (TensorBoard reads a directory's files in name order), and
    // writes the file-version event and SessionLog START at start_step + 1: TensorBoard then drops
    // whatever an earlier run in the directory logged from that step on (a stopped run past its
    // checkpoint; a run started again from step 0), as metrics.jsonl is cut back. Throws UserError
    // naming the path.
    void open(const std::string& dir, const std::string& host, long start_step);
    bool is_open() const { return f_ != nullptr; }
    const std::string& path() const { return path_; }
    // One event of scalars at `step`, flushed (a crashed run keeps what it logged).
    void scalars(long step, const std::vector<std::pair<std::string, float>>& values);

  private:
    void put(const std::string& event);
    FILE* f_ = nullptr;
    std::string path_;
};

} // namespace dptrain
