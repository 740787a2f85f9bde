#pragma once
// The asynchronous parameter-server strategy (TensorFlow ParameterServerStrategy, Downpour SGD) and its
// bounded-staleness variant (SSP): parameters sharded over the servers, workers pull, compute, push;
// servers apply each push at once. The protocol: ps_protocol.h; the sides: ps_server.cc and ps_worker.cc.

#include <cstddef>
#include <vector>

#include "core/strategies/strategy.h"

namespace chaosbed {

// A server shard's slice of the flat parameter buffer.
struct ShardRange {
  size_t offset = 0;
  size_t count = 0;
};
// Contiguous, balanced slices of a buffer of `params` floats over `shards` servers.
std::vector<ShardRange> shardRanges(size_t params, int shards);

Status runPsWorker(NodeContext& ctx);
Status runPsServer(NodeContext& ctx);

}  // namespace chaosbed
