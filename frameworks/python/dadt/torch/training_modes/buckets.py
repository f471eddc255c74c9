"""Buckets of the async and dear engines: how parameters are cut into flat buffers, and the
bucket size's default (docs/training-modes.md, "Buckets" and "Knobs")."""

from typing import List, Optional

import torch

from dadt.common.basics import _core, call

# DeAR groups layers into buckets of about 25 MB; dadt uses that when no fusion threshold is set.
DEFAULT_BUCKET_BYTES = 25 * 1024 * 1024


def default_bucket_bytes() -> int:
    """The fusion threshold in bytes (``DADT_FUSION_THRESHOLD``, set by ``dadtrun
    --fusion-threshold-mb``), or DeAR's 25 MiB when none is set. 0 puts every parameter in a
    bucket of its own. The variable is parsed by the runtime's own rule (an integer >= 0; a value
    such as ``1e6`` raises ValueError with the runtime's message)."""
    bytes_, is_set = call(_core.env_fusion_threshold)
    return bytes_ if is_set else DEFAULT_BUCKET_BYTES


# Across hosts, dear's buckets hold at most 1/DEAR_BUCKETS_PER_MODEL of a model's gradient bytes
# (a larger parameter is still one bucket of its own), and no less than the floor.
DEAR_BUCKETS_PER_MODEL = 4
DEAR_MIN_BUCKET_BYTES = 256 * 1024


def dear_bucket_bytes(configured: int, gradient_bytes: int, spans_hosts: bool) -> int:
    """dear's bucket size when bucket_bytes is not given: the configured size (the fusion
    threshold, or 25 MiB), but in a job across hosts at most 1/DEAR_BUCKETS_PER_MODEL of the model's
    gradient bytes and no less than DEAR_MIN_BUCKET_BYTES. Between a step's last all-gather and
    the next step's first reduce-scatter dear computes the last bucket's update, the forward from
    its first layer on and the backward down to the first full bucket; a model in one bucket makes
    that chain the whole step, and the link idles through it. On one host the link is cheap and the
    extra collectives cost more than they hide, so the configured size stands
    (docs/training-modes.md, "dear")."""
    if not spans_hosts or configured == 0:
        return configured
    return min(configured, max(gradient_bytes // DEAR_BUCKETS_PER_MODEL, DEAR_MIN_BUCKET_BYTES))


def shard_rows(rows: int, size: int, rank: int):
    """(first_row, count): ``rank``'s rows of a reducescatter of ``rows`` rows over ``size``
    ranks, by the runtime's rule (lower ranks take one more row when the split is uneven)."""
    return call(_core.scatter_rows, rows, size, rank)


def plan_buckets(params: List[torch.Tensor], bucket_bytes: int,
                 large_alone: bool = False) -> List[List[torch.Tensor]]:
    """Splits params (in layer order) into runs of one dtype; a run is closed as soon as it holds
    bucket_bytes bytes or more (as DDP's buckets), so a large parameter does not leave the small
    ones around it (biases) in buckets of their own.

    large_alone: every parameter of bucket_bytes or more gets a bucket of its own (so its gradient
    can be reduced where autograd left it), and the smaller ones between them form the runs. The
    buckets are then in the layer order of their first parameters."""
    position = {id(p): i for i, p in enumerate(params)}
    alone, runs, current, current_bytes = [], [], [], 0
    for p in params:
        nbytes = p.numel() * p.element_size()
        if large_alone and nbytes >= bucket_bytes:
            alone.append([p])
            continue
        if current and p.dtype != current[0].dtype:
            runs.append(current)
            current, current_bytes = [], 0
        current.append(p)
        current_bytes += nbytes
        if current_bytes >= bucket_bytes:
            runs.append(current)
            current, current_bytes = [], 0
    if current:
        runs.append(current)
    return sorted(alone + runs, key=lambda bucket: position[id(bucket[0])])


def layer_order(opt_params: List[torch.Tensor], model: Optional[torch.nn.Module]):
    """The optimizer's trainable parameters in layer order: the model's parameter order when a
    model is given (optimizer parameters it lacks come last), else the optimizer's own order."""
    trainable = [p for p in opt_params if p.requires_grad]
    if model is None:
        return trainable
    ids = {id(p) for p in trainable}
    ordered, seen = [], set()
    for p in model.parameters():
        if id(p) in ids and id(p) not in seen:
            ordered.append(p)
            seen.add(id(p))
    return ordered + [p for p in trainable if id(p) not in seen]


class Bucket:
    """Parameters reduced as one flat tensor; slots[i] is params[i]'s range in the flat buffer."""

    def __init__(self, index: int, params: List[torch.Tensor], copies: int):
        self.index = index
        self.params = params
        self.slots = []
        offset = 0
        for p in params:
            self.slots.append((offset, p.numel()))
            offset += p.numel()
        self.numel = offset
        self.dtype = params[0].dtype
        self.copies = copies
        self._buffers = [None] * copies  # made on first use (an adopted gradient needs none)
        self.arrived = set()      # ids of the params whose gradient is in the buffer this step
        self.submitted = False
        # The gradient of the bucket's only parameter when the bucket reduces it where autograd
        # left it, instead of a copy of it (BucketEngine._adopt); None otherwise. Reset at step().
        self.adopted = None
        # Per buffer slot, (param, gradient, version counter) of an adopted gradient that the
        # engine still needs (collective in flight or update not applied), else None.
        self.lent = [None] * copies

    def buffer(self, k: int) -> torch.Tensor:
        if self._buffers[k] is None:
            self._buffers[k] = torch.zeros(self.numel, dtype=self.dtype)
        return self._buffers[k]

    def view(self, flat: torch.Tensor, i: int) -> torch.Tensor:
        start, n = self.slots[i]
        return flat.narrow(0, start, n).view_as(self.params[i])

    def views(self, flat: torch.Tensor) -> List[torch.Tensor]:
        """Every parameter's view of `flat`, in order: the gradients an update reads."""
        return [self.view(flat, i) for i in range(len(self.params))]
