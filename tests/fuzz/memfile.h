// Shared by the fuzz targets of readers that take a path: the input as an in-memory file
// (memfd), named by its /proc/self/fd path, closed when the object goes.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

class MemFile {
  public:
    MemFile(const uint8_t* data, size_t size) : fd_(memfd_create("fuzz", 0)) {
        if (fd_ >= 0 && (size == 0 || write(fd_, data, size) == (ssize_t)size)) ok_ = true;
    }
    ~MemFile() {
        if (fd_ >= 0) close(fd_);
    }
    bool ok() const { return ok_; }
    std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

  private:
    int fd_;
    bool ok_ = false;
};
