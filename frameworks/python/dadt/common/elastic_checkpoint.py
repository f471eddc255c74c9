"""The elastic checkpoint: the last commit kept in a file the user names, so that a job whose every
original worker was replaced still resumes from it (docs/elastic.md, "When every host is
replaced").

``dadtrun --elastic-checkpoint PATH`` exports ``DADT_ELASTIC_CHECKPOINT=PATH`` to the workers. Then:

1. On ``commit()``, rank 0 writes the committed state with the commit's sequence number (1, 2, ...
   counted since the job began) to PATH atomically: a temporary file in PATH's directory, fsync,
   rename over PATH, fsync of the directory. A reader sees the old commit or the new one, never a
   torn file.
2. On the sync after each init(), every rank tells the others (one allgather) its in-memory commit
   sequence (0 for a process that never committed nor synced), whether it may skip the sync, and
   the checkpoint path it was given. ``choose_source`` turns that into one plan, the same on every
   rank: skip; sync from the rank holding the newest commit; or, when no live rank holds any,
   load the checkpoint on rank 0 (if it exists) and sync from rank 0.

The file is a pickle (the state's saved values, e.g. torch state_dicts): name only a path you
trust, on a filesystem every host of the job sees.
"""

import os
import pickle
import tempfile
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

CHECKPOINT_ENV = "DADT_ELASTIC_CHECKPOINT"
_FORMAT = "dadt.elastic.checkpoint/1"


class ElasticCheckpointError(RuntimeError):
    """The elastic checkpoint cannot be written, read or used (the message names the path)."""


def checkpoint_path_from_env() -> Optional[str]:
    """DADT_ELASTIC_CHECKPOINT, or None when unset or empty."""
    return os.environ.get(CHECKPOINT_ENV) or None


def write_checkpoint(path: str, seq: int, snapshot: Dict[str, Any]) -> None:
    """Writes commit ``seq`` of ``snapshot`` (a dict of picklable saved values) to ``path``
    atomically. Raises ElasticCheckpointError naming the path."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".")
        with os.fdopen(fd, "wb") as f:
            pickle.dump({"format": _FORMAT, "seq": int(seq), "state": snapshot}, f,
                        protocol=pickle.HIGHEST_PROTOCOL)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself survives a crash of this host
        finally:
            os.close(dir_fd)
    except (OSError, pickle.PicklingError, TypeError, AttributeError) as e:
        raise ElasticCheckpointError("cannot write the elastic checkpoint %s: %s" % (path, e)) from e
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def read_checkpoint(path: str, expected_names: Sequence[str]) -> Tuple[int, Dict[str, Any]]:
    """Returns (seq, snapshot) from ``path``. Raises ElasticCheckpointError naming the path when the
    file cannot be read, is not a dadt elastic checkpoint, or holds other parts than
    ``expected_names`` (the state's)."""
    try:
        with open(path, "rb") as f:
            data = pickle.load(f)
    except Exception as e:  # noqa: BLE001 - any unpickling failure is an unreadable checkpoint
        raise ElasticCheckpointError("cannot read the elastic checkpoint %s: %s: %s"
                                     % (path, type(e).__name__, e)) from e
    if not isinstance(data, dict) or data.get("format") != _FORMAT or \
            not isinstance(data.get("seq"), int) or not isinstance(data.get("state"), dict):
        raise ElasticCheckpointError("%s is not a dadt elastic checkpoint (no %s header)"
                                     % (path, _FORMAT))
    names = sorted(data["state"])
    if names != sorted(expected_names):
        raise ElasticCheckpointError(
            "the elastic checkpoint %s does not match this job's state: it holds %s, the state "
            "has %s (a checkpoint of another program? remove it to start afresh)"
            % (path, names, sorted(expected_names)))
    return data["seq"], data["state"]


class RankView(NamedTuple):
    """What one rank contributes to the agreement after an init()."""
    may_skip_sync: bool
    commit_seq: int
    checkpoint_path: Optional[str]


class SyncPlan(NamedTuple):
    """The agreed source of the state: ``kind`` is "skip", "rank" (sync from ``root_rank``, whose
    commit is ``commit_seq``) or "checkpoint" (rank 0 loads ``checkpoint_path`` if it exists, then
    syncs from rank 0)."""
    kind: str
    root_rank: int = 0
    commit_seq: int = 0
    checkpoint_path: Optional[str] = None


def choose_source(views: List[RankView]) -> SyncPlan:
    """The plan every rank computes alike from the allgathered views (index = rank). Raises
    ElasticCheckpointError when the ranks were given different checkpoint paths."""
    paths = sorted({str(v.checkpoint_path) for v in views})
    if len(paths) > 1:
        raise ElasticCheckpointError(
            "the ranks were given different elastic checkpoints (%s): every worker needs the same "
            "DADT_ELASTIC_CHECKPOINT" % ", ".join(paths))
    if views and all(v.may_skip_sync for v in views):
        return SyncPlan("skip")
    newest = max((v.commit_seq for v in views), default=0)
    if newest > 0:
        root = next(r for r, v in enumerate(views) if v.commit_seq == newest)
        return SyncPlan("rank", root_rank=root, commit_seq=newest)
    path = views[0].checkpoint_path if views else None
    if path:
        return SyncPlan("checkpoint", checkpoint_path=path)
    return SyncPlan("rank", root_rank=0, commit_seq=0)
