"""What every framework front end re-exports, so that dadt.tensorflow, dadt.keras and dadt.jax
offer the same basics, exceptions and reduce ops as dadt.torch under the same names."""

from typing import Any, Dict, List

from dadt.common import basics, exceptions, process_sets, util

BASICS = ("init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
          "cross_rank", "cross_size", "mpi_threads_supported", "mpi_enabled", "mpi_built",
          "gloo_enabled", "gloo_built", "nccl_built", "cuda_built", "rocm_built", "ddl_built",
          "ccl_built", "sycl_built", "start_timeline", "stop_timeline")
EXCEPTIONS = ("DadtInternalError", "DeviceMismatchError", "HorovodInternalError", "TensorMismatchError")
REDUCE_OPS = ("Average", "Sum", "Adasum", "Min", "Max", "Product")
PROCESS_SETS = ("ProcessSet", "global_process_set", "add_process_set", "remove_process_set")


def export_common(namespace: Dict[str, Any]) -> List[str]:
    """Puts the basics, exception types, reduce ops and process sets into a front end's module namespace and
    returns their names (for its ``__all__``)."""
    for names, source in ((BASICS, basics), (EXCEPTIONS, exceptions), (REDUCE_OPS, util),
                          (PROCESS_SETS, process_sets)):
        for name in names:
            namespace[name] = getattr(source, name)
    return list(BASICS + EXCEPTIONS + REDUCE_OPS + PROCESS_SETS)
