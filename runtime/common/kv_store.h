// KeyValueStore: the small interface through which ranks find each other at start-up.
//
// The runtime gives a backend one of these; the Gloo backend uses it for its full-mesh
// rendezvous and the controller uses it to publish the coordinator's address. In a job started
// by dadtrun it is a RendezvousClient talking to dadtrun's key-value server (every request
// carries the job secret); in a single-process job it is an in-memory map.
//
// Thread safety: implementations must allow concurrent calls from several threads.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "runtime/common/status.h"

namespace dadt {

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  virtual Status Set(const std::string& key, const std::string& value) = 0;
  // Blocks until `key` exists or `timeout` passes (TimeoutError naming the key).
  virtual StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) = 0;
};

}  // namespace dadt
