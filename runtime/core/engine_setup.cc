#include "runtime/core/engine_setup.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "runtime/backends/device.h"
#include "runtime/backends/engine_builder.h"
#include "runtime/common/env.h"
#include "runtime/common/logging.h"
#include "runtime/common/rendezvous/client.h"
#include "runtime/common/rendezvous/in_memory_store.h"
#include "runtime/common/rendezvous/scoped_store.h"
#include "runtime/common/net/socket.h"
#include "runtime/backends/tcp/tcp_control_transport.h"

namespace dadt {
namespace core {

StatusOr<std::string> BindAddress(const RuntimeOptions& o) {
  if (!o.iface.empty()) return net::InterfaceAddress(o.iface);
  if (o.local_size == o.size) return std::string("127.0.0.1");
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  if (getaddrinfo(host, nullptr, &hints, &res) != 0 || !res) {
    return InvalidArgument(std::string("cannot resolve this host's name '") + host +
                           "'; pass --network-interface");
  }
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, buf, sizeof(buf));
  freeaddrinfo(res);
  return std::string(buf);
}

namespace {

// The transport of options.engines.control_plane; MPI's also fills in the geometry it finds.
StatusOr<std::unique_ptr<backends::ControlTransport>> CreateTransport(RuntimeOptions* options,
                                                                      KeyValueStore* store) {
  if (options->engines.control_plane == backends::ControlPlane::kTcpStar) {
    auto bind = BindAddress(*options);
    if (!bind.ok()) return bind.status();
    auto channel = backends::tcp::TcpControlTransport::Create(
        options->rank, options->size, store, *bind, options->secret, options->start_timeout);
    if (!channel.ok()) return channel.status();
    return std::unique_ptr<backends::ControlTransport>(std::move(*channel));
  }
  backends::ControlTransportOptions to;
  to.native_comm = options->native_comm;
  to.timeout = options->start_timeout;
  auto transport = backends::ControlTransportRegistry::Create(backends::kMpiControlTransport, to);
  if (!transport.ok()) return transport.status();
  static_cast<JobGeometry&>(*options) = (*transport)->geometry();
  // Hosts as the environment describes them take precedence over MPI's shared-memory view (a
  // scheduler that knows the topology, or pretend hosts in tests); rank and size stay MPI's.
  const char* names[] = {env::kLocalRank, env::kLocalSize, env::kCrossRank, env::kCrossSize};
  if (std::all_of(std::begin(names), std::end(names), [](const char* n) { return env::IsSet(n); })) {
    int* fields[] = {&options->local_rank, &options->local_size, &options->cross_rank,
                     &options->cross_size};
    for (int i = 0; i < 4; ++i) DADT_ASSIGN_OR_RETURN(*fields[i], env::GetInt(names[i], 0));
    if (options->local_rank < 0 || options->local_rank >= options->local_size ||
        options->cross_rank < 0 || options->cross_rank >= options->cross_size) {
      return InvalidArgument("DADT_LOCAL_RANK/LOCAL_SIZE/CROSS_RANK/CROSS_SIZE describe no valid "
                             "place in the job");
    }
  }
  return transport;
}

// Step 2, when no store was given and none was made for an MPI job.
StatusOr<std::unique_ptr<KeyValueStore>> StoreFromEnvironment(const RuntimeOptions& options) {
  if (env::IsSet(env::kRendezvousAddr)) {
    auto client = rendezvous::ConnectFromEnv(options.start_timeout);
    if (!client.ok()) return client.status();
    // An elastic worker outlives stuck launchers no longer than its start timeout per request
    // (as its ElasticMembership does), also when it records a peer's death there on the way out.
    if (options.elastic) (*client)->set_io_timeout(options.start_timeout);
    return std::unique_ptr<KeyValueStore>(std::move(*client));
  }
  if (options.size == 1) return std::unique_ptr<KeyValueStore>(new rendezvous::InMemoryStore());
  return PreconditionFailed("this process is rank " + std::to_string(options.rank) + " of " +
                            std::to_string(options.size) +
                            " but no rendezvous server is set (DADT_RENDEZVOUS_ADDR); start the "
                            "job with dadtrun");
}

backends::BackendOptions DataPlaneOptions(const RuntimeOptions& options, KeyValueStore* store) {
  backends::BackendOptions bo;
  static_cast<JobGeometry&>(bo) = options;
  bo.iface = options.iface;
  bo.timeout = options.op_timeout;
  bo.connect_timeout = options.start_timeout;
  bo.segment_bytes = options.segment_bytes;
  bo.shm_allreduce = options.shm_allreduce;
  bo.realtime_threads = options.UsesRealtimeThreads();
  bo.store = store;
  bo.secret = options.secret;
  bo.store_prefix = options.engines.host_data_plane + "/";
  bo.native_comm = options.native_comm;
  return bo;
}

}  // namespace

StatusOr<backends::EngineChoice> ChooseJobEngines(const RuntimeOptions& options, int local_ranks) {
  backends::DeviceFacts devices;
  devices.local_ranks = local_ranks;
  // The GPUs matter only to the nccl executor and, once the ranks per host are known, to staging;
  // otherwise CUDA is left alone (before MPI_Init, and in the Python front end's check).
  if (options.engine_request.executor == "nccl" || local_ranks > 0) {
    devices.visible_gpus = backends::DeviceRegistry::VisibleDevices(&devices.why_none);
  }
  return backends::ChooseEngines(options.engine_request, options.engine_environment,
                                 backends::BackendRegistry::Names(), devices);
}

StatusOr<Engines> ConnectEngines(const RuntimeOptions& requested,
                                 std::unique_ptr<KeyValueStore> store) {
  Engines e;
  e.options = requested;
  RuntimeOptions& options = e.options;
  // Step 1 before connecting: the ranks per host are known only from the environment, and only
  // for the TCP star (an MPI control plane finds them when it connects).
  DADT_ASSIGN_OR_RETURN(options.engines, ChooseJobEngines(options, /*local_ranks=*/0));
  const std::string host = options.engines.host_data_plane;
  if (options.engines.control_plane == backends::ControlPlane::kMpi) {
    auto created = CreateTransport(&options, nullptr);
    if (!created.ok()) return created.status();
    e.transport = std::move(*created);
    if (!store && !env::IsSet(env::kRendezvousAddr)) {
      if (host != "mpi" && options.size > 1) {
        return PreconditionFailed("the " + host + " executor needs dadtrun's rendezvous, which "
                                  "plain mpirun does not provide: launch with `dadtrun --" + host +
                                  "`, or use the mpi executor");
      }
      store = std::make_unique<rendezvous::InMemoryStore>();
    }
  }
  // Step 1 again, with the geometry: fewer GPUs than ranks on this host stage GPU tensors.
  DADT_ASSIGN_OR_RETURN(options.engines, ChooseJobEngines(options, options.local_size));
  if (!options.engines.staged_because.empty()) {
    DADT_LOG(INFO) << options.engines.staged_because;
  }
  SetLogRank(options.rank);
  if (!store) {
    auto from_env = StoreFromEnvironment(options);
    if (!from_env.ok()) return from_env.status();
    store = std::move(*from_env);
  }
  e.store = std::move(store);
  e.scoped_store = std::make_unique<rendezvous::ScopedStore>(
      e.store.get(), options.store_scope.empty() ? rendezvous::IncarnationScope(options.incarnation)
                                                 : options.store_scope);
  e.backend_options = DataPlaneOptions(options, e.scoped_store.get());
  auto backend = backends::CreateDataPlane(host, e.backend_options,
                                           options.hierarchical_allreduce);
  if (!backend.ok()) return backend.status();
  e.backend = std::move(*backend);
  // Every rank measured the same rate (the slowest link), so every rank picks the same cycle.
  const double link = e.backend->LinkBytesPerSecond();
  if (!options.cycle_time_given && link > 0) {
    options.cycle_time_ms = RuntimeOptions::CycleTimeMsForLink(link);
    if (options.rank == 0) {
      DADT_LOG(INFO) << "cycle time " << options.cycle_time_ms << " ms for the measured link "
                     << "(DADT_CYCLE_TIME sets it)";
    }
  }
  if (!e.transport) {
    auto created = CreateTransport(&options, e.scoped_store.get());
    if (!created.ok()) return created.status();
    e.transport = std::move(*created);
  }
  return e;
}

}  // namespace core
}  // namespace dadt
