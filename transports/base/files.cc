#include "transports/base/files.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace chaosbed {

Status writeFileAtomically(const std::string& path, std::string_view contents, mode_t mode, bool sync) {
  std::string tmp = path + ".tmp-XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);  // mode 0600 until fchmod
  if (fd < 0) return Status::fromErrno("cannot create a temporary file beside " + path);
  auto fail = [&](const std::string& what, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return Status::fromErrno(what, err);
  };
  if (::fchmod(fd, mode) != 0) return fail("cannot chmod " + tmp, errno);
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("cannot write " + tmp, errno);
    }
    done += size_t(n);
  }
  if (sync && ::fsync(fd) != 0) return fail("cannot flush " + tmp, errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Status::fromErrno("cannot close " + tmp, err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Status::fromErrno("cannot rename " + tmp + " to " + path, err);
  }
  return Status::ok();
}

}  // namespace chaosbed
