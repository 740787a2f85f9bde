#pragma once
// MemoryStore: the bootstrap Store (transports/bootstrap/store.h) in memory, without sockets, for tests
// that play the controller in-process (publish memberships, the start time and the stop flag; read the
// events the nodes append). Thread-safe; get() blocks on a condition variable until the key or the deadline.

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "transports/bootstrap/store.h"

namespace chaosbed::testing {

class MemoryStore : public Store {
 public:
  Status set(const std::string& key, const std::string& value) override;
  Result<std::string> get(const std::string& key, Deadline deadline) override;
  Result<int64_t> add(const std::string& key, int64_t delta) override;
  Result<bool> contains(const std::string& key) override;
  Result<int64_t> append(const std::string& key, const std::string& value) override;
  Result<std::vector<std::string>> readList(const std::string& key, int64_t from, int max_entries) override;

  // Every event the nodes appended under prefix (the list <prefix>/events of core/runtime/control.h), as JSON.
  std::vector<nlohmann::json> events(const std::string& prefix);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> map_;  // guarded by mu_
  std::map<std::string, std::vector<std::string>> lists_;  // guarded by mu_
};

}  // namespace chaosbed::testing
