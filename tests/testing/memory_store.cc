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

Result<int64_t> MemoryStore::append(const std::string& key, const std::string& value) {
  std::lock_guard lock(mu_);
  auto& list = lists_[key];
  list.push_back(value);
  return int64_t(list.size()) - 1;
}

Result<std::vector<std::string>> MemoryStore::readList(const std::string& key, int64_t from, int max_entries) {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  if (auto it = lists_.find(key); it != lists_.end())
    for (int64_t i = std::max<int64_t>(from, 0); i < int64_t(it->second.size()) && int(out.size()) < max_entries; ++i)
      out.push_back(it->second[size_t(i)]);
  return out;
}

std::vector<nlohmann::json> MemoryStore::events(const std::string& prefix) {
  std::lock_guard lock(mu_);
  std::vector<nlohmann::json> out;
  if (auto it = lists_.find(prefix + "/events"); it != lists_.end())
    for (const std::string& e : it->second) out.push_back(nlohmann::json::parse(e));
  return out;
}

}  // namespace chaosbed::testing
