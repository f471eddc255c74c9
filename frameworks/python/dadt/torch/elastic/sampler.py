"""ElasticSampler: a torch Sampler whose shard follows the elastic world, with no sample lost or
repeated within an epoch across resets (docs/elastic.md).

How: each epoch is one permutation of the dataset's indices (from ``seed`` and the epoch, the same
on every rank). Ranks take strided shards of what remains: rank r of n gets ``remaining[r::n]``.
Ranks step in lockstep with one batch size, so after k steps of batch size B the samples processed
by the whole world are exactly the first k*B*n of ``remaining`` -- a prefix. The state is therefore
one global number, ``processed_num``; ``record_batch`` adds B*n (capped at the dataset's size), a
commit saves it and a reset re-partitions ``indices[processed_num:]`` over the new world.

Unlike Horovod's, the shards are not padded to equal length (padding repeats samples): at the end
of an epoch ranks may hold one sample more or less, so in the last step some ranks may have a
short or even an empty batch. Every rank must still take that step (each step is an allreduce on
every rank): loop ``for step in range(sampler.num_steps(batch_size))`` over
``sampler.get_indices(step, batch_size)`` and let an empty batch contribute a zero loss (sum the
loss and divide by the batch size), as examples/elastic/train_digits_elastic.py does.
"""

import random
from typing import Any, Dict, Iterator, List, Sized

import torch.utils.data

from dadt.common import basics


class ElasticSampler(torch.utils.data.Sampler):
    """Args:
      dataset: anything with ``len()``.
      shuffle: permute the indices each epoch (the same permutation on every rank).
      seed: the permutation's seed (plus the epoch).
    The world sharded over is ``size()`` and ``rank()`` at each reset.
    """

    def __init__(self, dataset: Sized, shuffle: bool = True, seed: int = 0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.num_replicas = 1
        self.rank = 0
        self.remaining_indices: List[int] = []
        self.reset()

    def set_epoch(self, epoch: int) -> None:
        """Starts epoch ``epoch``. Entering the epoch the sampler is already in (the training
        function re-entered after a reset) keeps its progress."""
        if epoch != self.epoch:
            self.epoch = epoch
            self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx: int, batch_size: int) -> None:
        """Records one step of ``batch_size`` samples on every rank (``batch_idx`` is unused and
        kept for Horovod's signature)."""
        del batch_idx
        self.processed_num = min(len(self.dataset),
                                 self.processed_num + batch_size * self.num_replicas)

    def num_steps(self, batch_size: int) -> int:
        """Lockstep steps of ``batch_size`` per rank left in this epoch: the same on every rank
        (the longest shard's batch count)."""
        per_step = batch_size * self.num_replicas
        return (len(self.remaining_indices) + per_step - 1) // per_step

    def get_indices(self, batch_idx: int, batch_size: int) -> List[int]:
        """This rank's indices of batch ``batch_idx`` since the last reset (empty past its shard)."""
        mine = self._shard()
        return mine[batch_idx * batch_size:(batch_idx + 1) * batch_size]

    def state_dict(self) -> Dict[str, Any]:
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def reset(self) -> None:
        """Re-partitions what remains of the epoch over the current world."""
        self.num_replicas = basics.size()
        self.rank = basics.rank()
        indices = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(indices)
        self.remaining_indices = indices[self.processed_num:]

    def _shard(self) -> List[int]:
        return self.remaining_indices[self.rank::self.num_replicas]

    def __iter__(self) -> Iterator[int]:
        return iter(self._shard())

    def __len__(self) -> int:
        return len(self._shard())
