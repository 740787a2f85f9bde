#pragma once
// The asynchronous parameter-server strategy (TensorFlow ParameterServerStrategy, Downpour SGD) and its
// bounded-staleness variant (SSP): parameters sharded over the servers, workers pull, compute, push;
// servers apply each push at once. See parameter_server.cc for the protocol.

#include "core/strategies/strategy.h"

namespace chaosbed {

Status runPsWorker(NodeContext& ctx);
Status runPsServer(NodeContext& ctx);

}  // namespace chaosbed
