#include "runtime/backends/mpi/mpi_error.h"

#include <mpi.h>

#include <string>

namespace dadt {
namespace backends {
namespace mpi {
namespace internal {

Status StatusFromMpiError(int code, const char* what, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  int error_class = MPI_ERR_OTHER;
  if (MPI_Error_class(code, &error_class) != MPI_SUCCESS) error_class = MPI_ERR_OTHER;
  const std::string message = std::string("MPI ") + what + " failed at " + file + ":" +
                              std::to_string(line) + ": " +
                              (len > 0 ? std::string(text, len) : "error " + std::to_string(code));
  switch (error_class) {
    case MPI_ERR_ARG:
    case MPI_ERR_COUNT:
    case MPI_ERR_TYPE:
    case MPI_ERR_OP:
    case MPI_ERR_ROOT:
    case MPI_ERR_RANK:
    case MPI_ERR_BUFFER:
      return InvalidArgument(message);
    case MPI_ERR_UNSUPPORTED_OPERATION:
      return Unimplemented(message);
    default:
      return Aborted(message + " (a peer has probably exited or the MPI transport failed)");
  }
}

}  // namespace internal
}  // namespace mpi
}  // namespace backends
}  // namespace dadt
