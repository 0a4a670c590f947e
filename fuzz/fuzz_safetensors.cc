// libFuzzer target: a safetensors file (header length, JSON header, data spans) through
// SafetensorsFile::open, via a memfd so that no disk is touched.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "moe/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = ::memfd_create("fuzz.safetensors", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (size > 0 && ::write(fd, data, size) != static_cast<ssize_t>(size)) {
    ::close(fd);
    return 0;
  }
  auto f = moe::SafetensorsFile::open("/proc/self/fd/" + std::to_string(fd));
  if (f.ok()) {
    for (const auto& [name, t] : f.value().tensors()) {
      volatile uint8_t sink = t.nbytes > 0 ? t.data[t.nbytes - 1] : 0;  // spans must be inside the file
      (void)sink;
    }
  }
  ::close(fd);
  return 0;
}
