"""An elastic worker for the chaos tier: a tiny model trained with TorchState, committed every
--commit-every steps. After each commit rank 0 prints `COMMITTED <step> <digest of the weights>`, so a
test can compare the elastic checkpoint on disk (--elastic-checkpoint) with the last commit it saw.

    dadtrun --gloo -np 2 --min-np 2 --host-discovery-script "printf 'h3\\nh4\\n'" \\
        --elastic-checkpoint /tmp/c.ckpt python test/chaos/elastic_committer.py --steps 400
"""
import argparse
import hashlib
import time

import torch

import dadt.torch as dadt


def weights_digest(state_dict):
    digest = hashlib.sha256()
    for name, tensor in sorted(state_dict.items()):
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--commit-every", type=int, default=5)
    p.add_argument("--step-delay", type=float, default=0.02)
    args = p.parse_args()
    torch.set_num_threads(1)
    dadt.init()
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    opt = dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                    named_parameters=model.named_parameters())
    state = dadt.elastic.TorchState(model, opt, step=0)

    @dadt.elastic.run
    def train(state):
        gen = torch.Generator().manual_seed(1000 + dadt.rank())
        while state.step < args.steps:
            x = torch.randn(8, 16, generator=gen)
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
            state.step += 1
            if state.step % args.commit_every == 0:
                state.commit()
                if dadt.rank() == 0:
                    print("COMMITTED %d %s" % (state.step, weights_digest(model.state_dict())), flush=True)
            time.sleep(args.step_delay)

    train(state)
    if dadt.rank() == 0:
        print("FINISHED %d" % state.step, flush=True)
    dadt.shutdown()


if __name__ == "__main__":
    main()
