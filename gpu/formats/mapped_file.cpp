#include "gpu/formats/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "gpu/text.hpp"

namespace illm::gpu {

result<std::shared_ptr<const mapped_file>> mapped_file::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return status{status_code::io_error, text::format("{}: cannot open it: {}", path, std::strerror(errno))};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return status{status_code::io_error, text::format("{}: not a regular file", path)};
  }
  const uint64_t size = uint64_t(st.st_size);
  const void* at = size == 0 ? nullptr : ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int mmap_errno = errno;
  ::close(fd);
  if (at == MAP_FAILED)
    return status{status_code::io_error, text::format("{}: cannot map it: {}", path, std::strerror(mmap_errno))};
  return std::shared_ptr<const mapped_file>(new mapped_file(path, static_cast<const uint8_t*>(at), size));
}

void mapped_file::drop(const uint8_t* p, uint64_t bytes) const {
  const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  const uint64_t begin = (uint64_t(p - data_) + page - 1) / page * page, end = uint64_t(p - data_) + bytes;
  if (p < data_ || end > size_ || end <= begin) return;
  // Advice only: a failure leaves the pages resident, which costs memory, not correctness.
  (void)::madvise(const_cast<uint8_t*>(data_) + begin, (end - begin) / page * page, MADV_DONTNEED);
}

mapped_file::~mapped_file() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace illm::gpu
