#include "tests/testing/memory_store.h"

namespace chaosbed::testing {

Status MemoryStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard lock(mu_);
    map_[key] = value;
  }
  cv_.notify_all();
  return Status::ok();
}

Result<std::string> MemoryStore::get(const std::string& key, Deadline deadline) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_until(lock, deadline, [&] { return map_.count(key) > 0; }))
    return Status::timeout("memory store: no key " + key);
  return map_[key];
}

Result<int64_t> MemoryStore::add(const std::string& key, int64_t delta) {
  int64_t v = 0;
  {
    std::lock_guard lock(mu_);
    if (auto it = map_.find(key); it != map_.end()) v = std::stoll(it->second);
    v += delta;
    map_[key] = std::to_string(v);
  }
  cv_.notify_all();
  return v;
}

Result<bool> MemoryStore::contains(const std::string& key) {
  std::lock_guard lock(mu_);
  return map_.count(key) > 0;
}

std::vector<nlohmann::json> MemoryStore::events(const std::string& prefix) {
  std::lock_guard lock(mu_);
  std::vector<nlohmann::json> out;
  auto count = map_.find(prefix + "/events/count");
  const int64_t n = count == map_.end() ? 0 : std::stoll(count->second);
  for (int64_t i = 0; i < n; ++i)
    if (auto it = map_.find(prefix + "/events/" + std::to_string(i)); it != map_.end())
      out.push_back(nlohmann::json::parse(it->second));
  return out;
}

}  // namespace chaosbed::testing
