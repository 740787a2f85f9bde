#pragma once
// MemoryStore: the bootstrap Store (transports/bootstrap/store.h) in memory, without sockets, for tests
// that play the controller in-process (publish memberships, the start time and the stop flag; read the
// events the nodes append). Thread-safe; get() blocks on a condition variable until the key or the deadline.
// session() shares the data; its interruptGets() ends only the gets made through it, as with the TcpStore.

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "transports/bootstrap/store.h"

namespace chaosbed::testing {

class MemoryStore : public Store {
 public:
  MemoryStore();
  Status set(const std::string& key, const std::string& value) override;
  Result<std::string> get(const std::string& key, Deadline deadline) override;
  Result<int64_t> add(const std::string& key, int64_t delta) override;
  Result<bool> contains(const std::string& key) override;
  Result<std::vector<std::optional<std::string>>> peek(const std::vector<std::string>& keys) override;
  Result<int64_t> append(const std::string& key, const std::string& value) override;
  Result<std::vector<std::string>> readList(const std::string& key, int64_t from, int max_entries) override;
  void interruptGets() override;
  std::unique_ptr<Store> session() override;

  // Every event the nodes appended under prefix (the list <prefix>/events of core/runtime/control.h), as JSON.
  std::vector<nlohmann::json> events(const std::string& prefix);

 private:
  struct Data {
    std::mutex mu;
    std::condition_variable cv;
    std::map<std::string, std::string> map;                 // guarded by mu
    std::map<std::string, std::vector<std::string>> lists;  // guarded by mu
  };
  explicit MemoryStore(std::shared_ptr<Data> data) : data_(std::move(data)) {}

  std::shared_ptr<Data> data_;  // shared with the sessions
  uint64_t interrupts_ = 0;     // guarded by data_->mu; a get of this client blocked across an increment ends Cancelled
};

}  // namespace chaosbed::testing
