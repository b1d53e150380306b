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

mapped_file::~mapped_file() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace illm::gpu
