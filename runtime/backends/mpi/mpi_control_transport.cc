#include "runtime/backends/mpi/mpi_control_transport.h"

#include <algorithm>
#include <climits>
#include <thread>

#include "runtime/backends/mpi/mpi_env.h"
#include "runtime/backends/mpi/mpi_error.h"

namespace dadt {
namespace backends {
namespace mpi {
namespace {

constexpr int kControlTag = 7001;
constexpr int kByeTag = 7002;  // Close: the last message a rank sends a peer
// Probe every few microseconds for a short while after this rank starts awaiting a response (or
// a worker's request) or gets a message, since the answer usually follows at once when every rank
// is ready; then every 100 us while traffic flows (a step's tensors arrive in bursts); then slowly,
// so that an idle runtime, or one awaiting a late rank, does not burn a core.
constexpr std::chrono::microseconds kAwaitPoll(5);
constexpr std::chrono::microseconds kAwaitWindow(200);
constexpr std::chrono::microseconds kBusyPoll(100);
constexpr std::chrono::microseconds kIdlePoll(1000);
constexpr std::chrono::milliseconds kBusyWindow(20);

[[maybe_unused]] const bool kRegistered =
    ControlTransportRegistry::Register("mpi", &MpiControlTransport::Create);

}  // namespace

StatusOr<std::unique_ptr<ControlTransport>> MpiControlTransport::Create(
    const ControlTransportOptions& options) {
  auto level = EnsureInitialized();
  if (!level.ok()) return level.status();
  // The job's controller communicator and geometry, kept from the first incarnation on.
  auto comm = JobComm(options.native_comm, "controller");
  if (!comm.ok()) return comm.status();
  auto geometry = JobGeometryOf(options.native_comm);
  if (!geometry.ok()) return geometry.status();
  return std::unique_ptr<ControlTransport>(
      new MpiControlTransport(*comm, *geometry, *level, options.timeout));
}

MpiControlTransport::~MpiControlTransport() { Close(); }

void MpiControlTransport::Close() {
  if (closed_ || !IsInitialized()) return;
  closed_ = true;
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  // Byes behind everything this rank sent; then read (and drop) until each peer's bye is in.
  std::vector<int> peers;
  if (geometry_.rank == 0) {
    for (int r = 1; r < geometry_.size; ++r) peers.push_back(r);
  } else {
    peers.push_back(0);
  }
  static const char kNothing = 0;
  std::vector<MPI_Request> byes(peers.size(), MPI_REQUEST_NULL);
  for (size_t i = 0; i < peers.size(); ++i) {
    MPI_Isend(&kNothing, 0, MPI_BYTE, peers[i], kByeTag, comm_, &byes[i]);
  }
  // Each peer is read only up to its bye: what it sends after that is its next incarnation's (it
  // may already have started it), which stays queued for the next transport on this communicator.
  std::vector<bool> said(peers.size(), false);
  size_t said_bye = 0;
  while (said_bye < peers.size() && std::chrono::steady_clock::now() < deadline) {
    bool got_any = false;
    for (size_t i = 0; i < peers.size(); ++i) {
      if (said[i]) continue;
      int flag = 0;
      MPI_Status status;
      if (MPI_Iprobe(peers[i], MPI_ANY_TAG, comm_, &flag, &status) != MPI_SUCCESS) {
        said_bye = peers.size();  // a broken communicator: give up draining
        break;
      }
      if (!flag) continue;
      got_any = true;
      int bytes = 0;
      MPI_Get_count(&status, MPI_BYTE, &bytes);
      std::string dropped(static_cast<size_t>(bytes), '\0');
      MPI_Recv(&dropped[0], bytes, MPI_BYTE, peers[i], status.MPI_TAG, comm_, MPI_STATUS_IGNORE);
      if (status.MPI_TAG == kByeTag) {
        said[i] = true;
        ++said_bye;
      }
    }
    if (!got_any && said_bye < peers.size()) {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  // Our own sends: every peer that said bye has taken them (it read up to our bye); one that did
  // not within the timeout gets them cancelled rather than a hang at exit.
  for (size_t i = 0; i < peers.size(); ++i) pending_.push_back(Pending{nullptr, byes[i]});
  while (!pending_.empty() && std::chrono::steady_clock::now() < deadline) {
    if (!Reap().ok()) break;
    if (!pending_.empty()) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  for (Pending& p : pending_) {
    MPI_Cancel(&p.request);
    MPI_Request_free(&p.request);
  }
  pending_.clear();
  // comm_ is the job's (JobComm): kept for the next incarnation, freed with the job communicator.
}

Status MpiControlTransport::Send(int dest, std::shared_ptr<const std::string> payload) {
  if (payload->size() > static_cast<size_t>(INT_MAX)) {
    return InvalidArgument("negotiation message of " + std::to_string(payload->size()) +
                           " bytes is too large for one MPI message");
  }
  Pending p;
  p.payload = std::move(payload);
  DADT_MPI_CHECK("isend", MPI_Isend(p.payload->data(), static_cast<int>(p.payload->size()),
                                    MPI_BYTE, dest, kControlTag, comm_, &p.request));
  pending_.push_back(std::move(p));
  last_message_ = std::chrono::steady_clock::now();
  return Reap();
}

Status MpiControlTransport::SendToCoordinator(const std::string& payload) {
  return Send(0, std::make_shared<const std::string>(payload));
}

Status MpiControlTransport::Broadcast(const std::string& payload) {
  auto shared = std::make_shared<const std::string>(payload);
  for (int r = 1; r < geometry_.size; ++r) DADT_RETURN_IF_ERROR(Send(r, shared));
  return Status::OK();
}

Status MpiControlTransport::Reap() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    int done = 0;
    DADT_MPI_CHECK("test", MPI_Test(&it->request, &done, MPI_STATUS_IGNORE));
    it = done ? pending_.erase(it) : std::next(it);
  }
  return Status::OK();
}

std::chrono::microseconds MpiControlTransport::poll_interval(bool awaiting) {
  const auto now = std::chrono::steady_clock::now();
  if (awaiting && !awaiting_) await_start_ = now;
  awaiting_ = awaiting;
  const auto since = now - (awaiting ? std::max(last_message_, await_start_) : last_message_);
  if (awaiting && since < kAwaitWindow) return kAwaitPoll;
  return since < kBusyWindow ? kBusyPoll : kIdlePoll;
}

Status MpiControlTransport::ReadAvailable(std::vector<std::pair<int, std::string>>* out) {
  DADT_RETURN_IF_ERROR(Reap());
  while (true) {
    int flag = 0;
    MPI_Status status;
    DADT_MPI_CHECK("iprobe", MPI_Iprobe(MPI_ANY_SOURCE, kControlTag, comm_, &flag, &status));
    if (!flag) return Status::OK();
    int bytes = 0;
    DADT_MPI_CHECK("get_count", MPI_Get_count(&status, MPI_BYTE, &bytes));
    std::string payload(static_cast<size_t>(bytes), '\0');
    DADT_MPI_CHECK("recv", MPI_Recv(&payload[0], bytes, MPI_BYTE, status.MPI_SOURCE, kControlTag,
                                    comm_, MPI_STATUS_IGNORE));
    out->emplace_back(status.MPI_SOURCE, std::move(payload));
    last_message_ = std::chrono::steady_clock::now();
  }
}

}  // namespace mpi
}  // namespace backends
}  // namespace dadt
