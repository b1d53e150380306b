#pragma once
// A model file mapped read-only into memory: its bytes are read where they lie, and the kernel pages them in
// (and may drop them again) as they are used, so a loader keeps no second copy of a file's tensors.

#include <cstdint>
#include <memory>
#include <string>

#include "gpu/status.hpp"

namespace illm::gpu {

/// A read-only mapping of a whole file; shared by whatever points into it.
class mapped_file {
 public:
  /// Maps `path`; io_error naming the file when it cannot be opened or mapped.
  static result<std::shared_ptr<const mapped_file>> open(const std::string& path);
  ~mapped_file();
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;

  /// Lets the kernel drop the pages wholly inside [p, p + bytes) from memory (they are read again from the file
  /// if touched): a loader that converted them keeps no copy resident.
  void drop(const uint8_t* p, uint64_t bytes) const;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  mapped_file(std::string path, const uint8_t* data, uint64_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace illm::gpu
