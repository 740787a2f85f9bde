#include "tests/testing/memory_store.h"

namespace chaosbed::testing {

MemoryStore::MemoryStore() : data_(std::make_shared<Data>()) {}

std::unique_ptr<Store> MemoryStore::session() { return std::unique_ptr<Store>(new MemoryStore(data_)); }

Status MemoryStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard lock(data_->mu);
    data_->map[key] = value;
  }
  data_->cv.notify_all();
  return Status::ok();
}

Result<std::string> MemoryStore::get(const std::string& key, Deadline deadline) {
  std::unique_lock lock(data_->mu);
  const uint64_t interrupts = interrupts_;
  if (!data_->cv.wait_until(lock, deadline, [&] { return data_->map.count(key) > 0 || interrupts_ != interrupts; }))
    return Status::timeout("memory store: no key " + key);
  if (!data_->map.count(key)) return Status::cancelled("memory store: get " + key + " interrupted");
  return data_->map[key];
}

void MemoryStore::interruptGets() {
  {
    std::lock_guard lock(data_->mu);
    ++interrupts_;
  }
  data_->cv.notify_all();
}

Result<int64_t> MemoryStore::add(const std::string& key, int64_t delta) {
  int64_t v = 0;
  {
    std::lock_guard lock(data_->mu);
    if (auto it = data_->map.find(key); it != data_->map.end()) v = std::stoll(it->second);
    v += delta;
    data_->map[key] = std::to_string(v);
  }
  data_->cv.notify_all();
  return v;
}

Result<bool> MemoryStore::contains(const std::string& key) {
  std::lock_guard lock(data_->mu);
  return data_->map.count(key) > 0;
}

Result<std::vector<std::optional<std::string>>> MemoryStore::peek(const std::vector<std::string>& keys) {
  std::lock_guard lock(data_->mu);
  std::vector<std::optional<std::string>> values;
  for (const std::string& key : keys) {
    auto it = data_->map.find(key);
    values.push_back(it == data_->map.end() ? std::nullopt : std::optional<std::string>(it->second));
  }
  return values;
}

Result<int64_t> MemoryStore::append(const std::string& key, const std::string& value) {
  std::lock_guard lock(data_->mu);
  auto& list = data_->lists[key];
  list.push_back(value);
  return int64_t(list.size()) - 1;
}

Result<std::vector<std::string>> MemoryStore::readList(const std::string& key, int64_t from, int max_entries) {
  std::lock_guard lock(data_->mu);
  std::vector<std::string> out;
  if (auto it = data_->lists.find(key); it != data_->lists.end())
    for (int64_t i = std::max<int64_t>(from, 0); i < int64_t(it->second.size()) && int(out.size()) < max_entries; ++i)
      out.push_back(it->second[size_t(i)]);
  return out;
}

std::vector<nlohmann::json> MemoryStore::events(const std::string& prefix) {
  std::lock_guard lock(data_->mu);
  std::vector<nlohmann::json> out;
  if (auto it = data_->lists.find(prefix + "/events"); it != data_->lists.end())
    for (const std::string& e : it->second) out.push_back(nlohmann::json::parse(e));
  return out;
}

}  // namespace chaosbed::testing
