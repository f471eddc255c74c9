// StoreAdapter: dadt's KeyValueStore seen as a gloo::rendezvous::Store.
//
// Gloo's connectFullMesh publishes each rank's listening addresses under a key and reads every
// peer's. This adapter routes those calls to the job's KeyValueStore (dadtrun's rendezvous server,
// or an in-memory map), with every key prefixed by BackendOptions::store_prefix so that several
// backends or several jobs can share one store.
//
//   StoreAdapter store(options.store, options.store_prefix, options.connect_timeout);
//   context->connectFullMesh(store, device);
//
// Values are hex-encoded: Gloo's addresses are raw sockaddr bytes (with NULs), and the store's
// wire protocol is not required to be binary-safe. A few hundred bytes per rank, once per job.
// get() and wait() block until the keys exist or the adapter's timeout passes (the start timeout:
// a wait() that Gloo gives a shorter timeout still waits that long); failures are thrown as StoreError
// (see gloo_error.h) because Gloo's Store interface has no other way to report them.
//
// Thread safety: as safe as the underlying KeyValueStore (which must allow concurrent calls);
// key_never_appeared() is read after connecting, on the thread that connected.
// Lifetime: used only while the backend connects; it does not own the KeyValueStore.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "runtime/common/kv_store.h"

namespace dadt {
namespace backends {
namespace gloo {

class StoreAdapter : public ::gloo::rendezvous::Store {
 public:
  StoreAdapter(KeyValueStore* store, std::string prefix, std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  // Whether a get() or wait() ran out of time because a key never appeared: a peer that had not
  // published its address within the timeout (it never reached the meeting), as opposed to a
  // store that failed or a pair that could not connect.
  bool key_never_appeared() const { return key_never_appeared_; }

  // Exposed for tests.
  static std::string HexEncode(const std::vector<char>& data);
  static bool HexDecode(const std::string& text, std::vector<char>* out);

 private:
  std::string FullKey(const std::string& key) const { return prefix_ + key; }
  // Throws `status` as a StoreError, noting a key that never appeared.
  [[noreturn]] void Fail(const Status& status);

  KeyValueStore* store_;
  const std::string prefix_;
  const std::chrono::milliseconds timeout_;
  bool key_never_appeared_ = false;
};

}  // namespace gloo
}  // namespace backends
}  // namespace dadt
