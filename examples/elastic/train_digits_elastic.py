"""Elastic data-parallel training of a small MLP on scikit-learn's bundled digits data set: the job
goes on when a worker dies (from its last commit, at the new size) and takes new workers as they
come (docs/elastic.md).

    dadtrun --gloo -np 3 --min-np 2 python examples/elastic/train_digits_elastic.py

What it shows: TorchState(model, optimizer, train_sampler=ElasticSampler, epoch=...), a commit
every --batches-per-commit steps and at each epoch's end, a reset callback that scales the learning
rate with the new size(), and lockstep steps over the sampler's (uneven) shards. Rank 0 prints one
line per epoch, then the accuracy over the whole test set:

    epoch 12 size 2 loss 0.0421 accuracy 0.9694
    final test accuracy: 0.9722

With --elastic-checkpoint PATH (a file on a filesystem every host sees), rank 0 also writes each
commit there, and a job whose every original worker was replaced resumes from it:

    dadtrun --gloo -np 3 --min-np 2 --elastic-checkpoint /shared/digits.ckpt \
        python examples/elastic/train_digits_elastic.py

--ids-dir DIR: rank 0 of each round appends, at every commit, the training-sample ids the whole
world committed since the last commit ("<epoch> <id> ..." lines to DIR/ids.txt); tests count them
to check that every sample is trained on exactly once per epoch whatever the resets.

--step-log FILE: every rank appends "<unix time> <worker id> <pid> <rank> <size> <event>" lines, the
event being "step E S" (step S of epoch E completed), "failed" (a collective raised
DadtInternalError), "reset" (init() into the new round done) or "resumed" (state synced, training
goes on); examples/benchmarks/elastic_recovery.py reads them to time a recovery.
"""
import argparse
import hashlib
import os
import time

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import dadt.torch as dadt


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--lr", type=float, default=0.05, help="learning rate of one rank; scaled by size()")
    p.add_argument("--batch-size", type=int, default=16, help="per-rank batch size")
    p.add_argument("--batches-per-commit", type=int, default=5)
    p.add_argument("--mode", choices=("sync",) + dadt.training_modes.PERIODIC_MODES, default="sync",
                   help="DistributedOptimizer training mode (docs/training-modes.md)")
    p.add_argument("--sync-every", type=int, default=4,
                   help="local_sgd, diloco, easgd: steps between two exchanges of the model")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--ids-dir", default=None)
    p.add_argument("--progress-file", default=None, help="each rank appends 'epoch step' per step")
    p.add_argument("--step-delay", type=float, default=0.0, help="seconds to sleep per step (tests)")
    p.add_argument("--state-log", default=None,
                   help="rank 0 appends 'epoch processed_num sha256-of-weights' each time training "
                        "(re)starts from the synced state (tests)")
    p.add_argument("--step-log", default=None, help="each rank appends timestamped events (benchmarks)")
    return p.parse_args(argv)


def load_data(seed):
    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0  # pixels are 0..16
    y = torch.tensor(digits.target, dtype=torch.int64)
    return train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)


def weights_digest(state_dict):
    digest = hashlib.sha256()
    for name, tensor in sorted(state_dict.items()):
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


def main(argv=None):
    """Trains; returns the final test accuracy (examples/ray/train_digits_elastic_ray.py runs this
    in each rank's Ray actor with its own argv)."""
    args = parse_args(argv)
    torch.set_num_threads(1)
    dadt.init()
    x_train, x_test, y_train, y_test = load_data(args.seed)

    torch.manual_seed(args.seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr * dadt.size(), momentum=0.9)
    # The modes that send less keep the last synced weights in the optimizer's state: a reset rolls
    # the model back to them (the steps since are redone), then every rank takes rank 0's.
    knobs = {"sync_every": args.sync_every} if args.mode in dadt.training_modes.PERIODIC_MODES else {}
    opt = dadt.DistributedOptimizer(opt, named_parameters=model.named_parameters(), mode=args.mode, model=model,
                                    **knobs)
    sampler = dadt.elastic.ElasticSampler(range(len(x_train)), shuffle=True, seed=args.seed)
    # What a reset restores and syncs: weights, optimizer momentum, the sampler's progress, the epoch.
    state = dadt.elastic.TorchState(model, opt, train_sampler=sampler, epoch=1)
    pending_ids = []  # this rank's samples since the last commit (only for --ids-dir)

    def log(event):
        if not args.step_log:
            return
        now = time.time()
        try:
            rank, size = dadt.rank(), dadt.size()
        except Exception:  # between worlds
            rank, size = -1, -1
        with open(args.step_log, "a") as f:
            f.write("%.6f %s %d %d %d %s\n" % (now, os.environ.get("DADT_ELASTIC_WORKER_ID", "-"), os.getpid(),
                                              rank, size, event))

    def on_reset():
        log("reset")
        for group in opt.param_groups:
            group["lr"] = args.lr * dadt.size()
        pending_ids.clear()

    state.register_reset_callbacks([on_reset])

    def commit():
        if args.ids_dir:
            ids = dadt.allgather_object(list(pending_ids), name="ids")
            if dadt.rank() == 0:
                with open(os.path.join(args.ids_dir, "ids.txt"), "a") as f:
                    f.write(" ".join(str(i) for i in [state.epoch] + sum(ids, [])) + "\n")
        pending_ids.clear()
        state.commit()

    @dadt.elastic.run
    def train(state):
        log("resumed")
        try:
            train_epochs(state)
        except dadt.DadtInternalError:
            log("failed")
            raise

    def train_epochs(state):
        pending_ids.clear()  # whatever was not committed is redone
        if args.state_log and dadt.rank() == 0:
            with open(args.state_log, "a") as f:
                f.write("%d %d %s\n" % (state.epoch, state.train_sampler.processed_num,
                                        weights_digest(model.state_dict())))
        for state.epoch in range(state.epoch, args.epochs + 1):
            model.train()
            state.train_sampler.set_epoch(state.epoch)
            steps = state.train_sampler.num_steps(args.batch_size)
            loss = torch.zeros(())
            for step in range(steps):
                idx = state.train_sampler.get_indices(step, args.batch_size)
                opt.zero_grad()
                # Summed over the batch, divided by the full batch size: a rank whose last batch
                # is short or empty (the shards are not padded) still takes part, with less weight.
                out = model(x_train[idx])
                loss = F.cross_entropy(out, y_train[idx], reduction="sum") / args.batch_size
                loss.backward()
                opt.step()
                pending_ids.extend(idx)
                state.train_sampler.record_batch(step, args.batch_size)
                log("step %d %d" % (state.epoch, step))
                if args.progress_file:
                    with open(args.progress_file, "a") as f:
                        f.write("%d %d\n" % (state.epoch, step))
                if args.step_delay:
                    time.sleep(args.step_delay)
                if (step + 1) % args.batches_per_commit == 0 and step + 1 < steps:
                    commit()
            model.eval()
            with torch.no_grad():
                accuracy = (model(x_test).argmax(dim=1) == y_test).float().mean().item()
            if dadt.rank() == 0 and steps > 0:  # 0: re-entered an epoch finished before a reset
                print(f"epoch {state.epoch} size {dadt.size()} loss {loss.item():.4f} "
                      f"accuracy {accuracy:.4f}", flush=True)
            commit()  # the epoch is done (the sampler has processed all of it)
        opt.flush()  # the modes that send less: every rank ends on the same weights (sync: a no-op)

    train(state)
    model.eval()
    with torch.no_grad():
        accuracy = (model(x_test).argmax(dim=1) == y_test).float().mean().item()
    if dadt.rank() == 0:
        print(f"final test accuracy: {accuracy:.4f}", flush=True)
    dadt.shutdown()
    return accuracy


if __name__ == "__main__":
    main()
