#include "gpu/tier/tier_medium.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

namespace illm::gpu {

namespace {

std::string errno_text(int e) { return std::strerror(e); }

/// Host memory as a medium.
class memory_medium final : public tier_medium {
 public:
  explicit memory_medium(uint64_t bytes) : buffer_(size_t(bytes)) {}
  status read_at(uint64_t offset, std::span<std::byte> out) override {
    if (offset > buffer_.bytes || out.size() > buffer_.bytes - offset)
      return {status_code::invalid_argument, "a read past the end of the host tier"};
    std::memcpy(out.data(), buffer_.data.get() + offset, out.size());
    return status::ok();
  }
  status write_at(uint64_t offset, std::span<const std::byte> in) override {
    if (offset > buffer_.bytes || in.size() > buffer_.bytes - offset)
      return {status_code::invalid_argument, "a write past the end of the host tier"};
    std::memcpy(buffer_.data.get() + offset, in.data(), in.size());
    return status::ok();
  }
  uint64_t size() const override { return buffer_.bytes; }
  bool persistent() const override { return false; }
  std::string describe() const override { return "host memory"; }

 private:
  aligned_buffer buffer_;
};

/// A file as a medium (its descriptor closed with it).
class file_medium final : public tier_medium {
 public:
  file_medium(int fd, std::string path, uint64_t bytes, bool direct)
      : fd_(fd), path_(std::move(path)), bytes_(bytes), direct_(direct) {}
  ~file_medium() override { ::close(fd_); }
  status read_at(uint64_t offset, std::span<std::byte> out) override {
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::pread(fd_, out.data() + done, out.size() - done, off_t(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return {status_code::io_error, path_ + ": read at " + std::to_string(offset) + ": " + errno_text(errno)};
      if (n == 0)
        return {status_code::io_error, path_ + ": the file ends before byte " + std::to_string(offset + out.size()) +
                                           " (cut shorter while in use)"};
      done += size_t(n);
    }
    return status::ok();
  }
  status write_at(uint64_t offset, std::span<const std::byte> in) override {
    size_t done = 0;
    while (done < in.size()) {
      const ssize_t n = ::pwrite(fd_, in.data() + done, in.size() - done, off_t(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        return {status_code::io_error,
                path_ + ": write at " + std::to_string(offset) + ": " + errno_text(n < 0 ? errno : ENOSPC)};
      done += size_t(n);
    }
    return status::ok();
  }
  uint64_t size() const override { return bytes_; }
  bool persistent() const override { return true; }
  std::string describe() const override { return "file " + path_ + (direct_ ? " (O_DIRECT)" : " (page cache)"); }

 private:
  int fd_;
  std::string path_;
  uint64_t bytes_;
  bool direct_;
};

}  // namespace

aligned_buffer::aligned_buffer(size_t n) : bytes(n) {
  void* p = nullptr;
  if (posix_memalign(&p, tier_io_align, std::max(n, tier_io_align)) != 0) throw std::bad_alloc();
  std::memset(p, 0, n);
  data.reset(static_cast<std::byte*>(p));
}

void aligned_buffer::free_aligned::operator()(std::byte* p) const { std::free(p); }

result<std::unique_ptr<tier_medium>> open_memory_medium(uint64_t bytes) {
  try {
    return std::unique_ptr<tier_medium>(std::make_unique<memory_medium>(bytes));
  } catch (const std::bad_alloc&) {
    return status{status_code::out_of_memory, "the host tier's " + std::to_string(bytes) + " bytes"};
  }
}

result<std::unique_ptr<tier_medium>> open_file_medium(const std::string& path, uint64_t bytes, bool* existed) {
  struct stat before {};
  *existed = ::stat(path.c_str(), &before) == 0;
  bool direct = true;
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_DIRECT, 0600);
  if (fd < 0 && errno == EINVAL) {  // the filesystem has no O_DIRECT (tmpfs): through the page cache
    direct = false;
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  }
  if (fd < 0) return status{status_code::io_error, path + ": " + errno_text(errno)};
  struct stat now {};
  if (::fstat(fd, &now) != 0 || !S_ISREG(now.st_mode)) {
    ::close(fd);
    return status{status_code::io_error, path + ": not a regular file"};
  }
  if (uint64_t(now.st_size) > bytes && ::ftruncate(fd, off_t(bytes)) != 0) {
    const int e = errno;
    ::close(fd);
    return status{status_code::io_error, path + ": cannot cut the file to " + std::to_string(bytes) + " bytes: " +
                                             errno_text(e)};
  }
  if (const int e = ::posix_fallocate(fd, 0, off_t(bytes)); e != 0) {
    ::close(fd);
    return status{status_code::io_error, path + ": cannot preallocate " + std::to_string(bytes) + " bytes: " +
                                             errno_text(e)};
  }
  return std::unique_ptr<tier_medium>(std::make_unique<file_medium>(fd, path, bytes, direct));
}

}  // namespace illm::gpu
