#pragma once
// Files written whole or not at all: results, reports, chaos state. The contents go to a fresh temporary
// file beside the target (created exclusively: never a planted file or a symlink, which matters as root),
// then rename(2) replaces the target, so a reader, or a run killed at any instant, sees the old file or the
// new one, never a part.

#include <sys/types.h>

#include <string>
#include <string_view>

#include "transports/base/status.h"

namespace chaosbed {

// `sync`: fsync before the rename, so the new contents survive a machine crash too (results); without it
// only a process crash is covered (files rewritten every second, like the chaos agent's lease).
Status writeFileAtomically(const std::string& path, std::string_view contents, mode_t mode = 0644, bool sync = true);

}  // namespace chaosbed
