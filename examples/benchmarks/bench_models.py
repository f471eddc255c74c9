"""The models of real_models.py, written here from their published shapes (no torchvision or
transformers needed), each with synthetic data and its loss.

    python3 examples/benchmarks/bench_models.py          # every model's parameter and tensor count
    python3 examples/benchmarks/bench_models.py --time   # and one rank's forward + backward, one thread

Every MODELS entry is a function (torch, **options) -> (model, make_batch, loss_fn):
  make_batch(batch, generator) -> (inputs, targets), inputs a tuple: the step is
      loss_fn(model(*inputs), targets).backward()
  resnet50, resnet101  ImageNet ResNets v1.5 (the stride on the 3x3 convolution of a bottleneck,
                       BatchNorm, fc 2048 -> 1000), the parameter shapes and order of torchvision's
                       resnet50/resnet101: 25,557,032 parameters in 161 tensors and 44,549,160 in
                       314. Images 3 x image_size x image_size (224 by default), 1000 classes.
  bert-base            BERT-Base pre-training (BertForPreTraining's shapes): vocabulary 30522, hidden
                       768, 12 layers of 12 heads, intermediate 3072, 512 positions, 2 token types,
                       LayerNorm eps 1e-12, GELU, dropout 0.1; separate query, key, value and output
                       Linear layers in every layer; the pooler; the masked-LM head (dense + GELU +
                       LayerNorm, a decoder tied to the word embedding, with its own bias) and the
                       next-sentence head: 110,106,428 parameters in 206 tensors. Synthetic tokens,
                       seq_len 128 by default; the loss is the masked-LM cross entropy on 15% of the
                       positions (logits over every position, the others ignored, as the reference
                       computes them) plus the next-sentence cross entropy.
  many-tensor          80 x (Linear(256, 256) + ReLU), then Linear(256, 10): 5.3M parameters in 162
                       tensors, input dimension 256.
  comm                 peers.py's comm MLP (4 x 1536, input 256, 10 classes).
"""
import os
import sys

DEFAULT_BATCH = {"resnet50": 2, "resnet101": 2, "bert-base": 2, "many-tensor": 32, "comm": 64}
RESNET_COUNTS = {"resnet50": (25_557_032, 161), "resnet101": (44_549_160, 314)}
BERT_COUNT = (110_106_428, 206)
MANY_TENSOR_COUNT = (80 * (256 * 256 + 256) + 256 * 10 + 10, 162)


# ----------------------------------------------------------------------------------------------
# ResNet v1.5
# ----------------------------------------------------------------------------------------------
def _resnet(torch, blocks, image_size=224, num_classes=1000):
    nn = torch.nn

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, inplanes, planes, stride, downsample):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)  # v1.5
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + (x if self.downsample is None else self.downsample(x)))

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.inplanes = 64
            self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
            self.layer1 = self._layer(64, blocks[0], 1)
            self.layer2 = self._layer(128, blocks[1], 2)
            self.layer3 = self._layer(256, blocks[2], 2)
            self.layer4 = self._layer(512, blocks[3], 2)
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(512 * 4, num_classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                elif isinstance(m, nn.BatchNorm2d):
                    nn.init.ones_(m.weight)
                    nn.init.zeros_(m.bias)

        def _layer(self, planes, count, stride):
            downsample = None
            if stride != 1 or self.inplanes != planes * 4:
                downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes * 4, 1, stride=stride, bias=False),
                                           nn.BatchNorm2d(planes * 4))
            layers = [Bottleneck(self.inplanes, planes, stride, downsample)]
            self.inplanes = planes * 4
            layers += [Bottleneck(self.inplanes, planes, 1, None) for _ in range(1, count)]
            return nn.Sequential(*layers)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    model = ResNet()

    def make_batch(batch, generator):
        x = torch.randn(batch, 3, image_size, image_size, generator=generator)
        y = torch.randint(0, num_classes, (batch,), generator=generator)
        return (x,), y

    return model, make_batch, torch.nn.functional.cross_entropy


def resnet50(torch, image_size=224, **_):
    return _resnet(torch, (3, 4, 6, 3), image_size)


def resnet101(torch, image_size=224, **_):
    return _resnet(torch, (3, 4, 23, 3), image_size)


# ----------------------------------------------------------------------------------------------
# BERT-Base pre-training
# ----------------------------------------------------------------------------------------------
def bert_base(torch, seq_len=128, vocab=30522, hidden=768, layers=12, heads=12, intermediate=3072,
              positions=512, token_types=2, eps=1e-12, dropout=0.1, mask_fraction=0.15, **_):
    nn = torch.nn
    F = torch.nn.functional
    if seq_len > positions:
        raise ValueError("bert-base: --seq-len %d is longer than its %d positions" % (seq_len, positions))

    class Embeddings(nn.Module):
        def __init__(self):
            super().__init__()
            self.word_embeddings = nn.Embedding(vocab, hidden)
            self.position_embeddings = nn.Embedding(positions, hidden)
            self.token_type_embeddings = nn.Embedding(token_types, hidden)
            self.LayerNorm = nn.LayerNorm(hidden, eps=eps)
            self.dropout = nn.Dropout(dropout)

        def forward(self, ids, types):
            pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
            x = self.word_embeddings(ids) + self.position_embeddings(pos) + self.token_type_embeddings(types)
            return self.dropout(self.LayerNorm(x))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.query = nn.Linear(hidden, hidden)
            self.key = nn.Linear(hidden, hidden)
            self.value = nn.Linear(hidden, hidden)
            self.attention_output = nn.Linear(hidden, hidden)
            self.attention_LayerNorm = nn.LayerNorm(hidden, eps=eps)
            self.intermediate = nn.Linear(hidden, intermediate)
            self.output = nn.Linear(intermediate, hidden)
            self.output_LayerNorm = nn.LayerNorm(hidden, eps=eps)
            self.dropout = nn.Dropout(dropout)

        def _heads(self, t):
            b, s, _ = t.shape
            return t.view(b, s, heads, hidden // heads).transpose(1, 2)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self._heads(self.query(x)), self._heads(self.key(x)), self._heads(self.value(x))
            ctx = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout if self.training else 0.0)
            ctx = ctx.transpose(1, 2).reshape(b, s, hidden)
            x = self.attention_LayerNorm(x + self.dropout(self.attention_output(ctx)))
            h = self.output(F.gelu(self.intermediate(x)))
            return self.output_LayerNorm(x + self.dropout(h))

    class BertForPreTraining(nn.Module):
        def __init__(self):
            super().__init__()
            self.embeddings = Embeddings()
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.pooler = nn.Linear(hidden, hidden)
            # masked-LM head: transform, then the decoder tied to the word embedding, with a bias
            self.transform = nn.Linear(hidden, hidden)
            self.transform_LayerNorm = nn.LayerNorm(hidden, eps=eps)
            self.decoder = nn.Linear(hidden, vocab)
            self.decoder.weight = self.embeddings.word_embeddings.weight
            self.seq_relationship = nn.Linear(hidden, 2)
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)) and m is not self.decoder:
                    nn.init.normal_(m.weight, std=0.02)
                if isinstance(m, nn.Linear):
                    nn.init.zeros_(m.bias)

        def forward(self, ids, types):
            x = self.embeddings(ids, types)
            for layer in self.layers:
                x = layer(x)
            pooled = torch.tanh(self.pooler(x[:, 0]))
            mlm = self.decoder(self.transform_LayerNorm(F.gelu(self.transform(x))))
            return mlm, self.seq_relationship(pooled)

    model = BertForPreTraining()
    masked = max(1, int(round(mask_fraction * seq_len)))

    def make_batch(batch, generator):
        ids = torch.randint(0, vocab, (batch, seq_len), generator=generator)
        types = (torch.arange(seq_len) >= seq_len // 2).long().expand(batch, seq_len).contiguous()
        labels = torch.full((batch, seq_len), -100, dtype=torch.long)
        for row in range(batch):  # 15% of the positions of every sequence carry a label
            where = torch.randperm(seq_len, generator=generator)[:masked]
            labels[row, where] = torch.randint(0, vocab, (masked,), generator=generator)
        nsp = torch.randint(0, 2, (batch,), generator=generator)
        return (ids, types), (labels, nsp)

    def loss_fn(outputs, targets):
        mlm, nsp_logits = outputs
        labels, nsp = targets
        return (F.cross_entropy(mlm.reshape(-1, vocab), labels.reshape(-1), ignore_index=-100)
                + F.cross_entropy(nsp_logits, nsp))

    return model, make_batch, loss_fn


# ----------------------------------------------------------------------------------------------
# MLPs
# ----------------------------------------------------------------------------------------------
def _mlp_data(torch, model, input_dim=256, classes=10):
    def make_batch(batch, generator):
        x = torch.randn(batch, input_dim, generator=generator)
        return (x,), torch.randint(0, classes, (batch,), generator=generator)

    return model, make_batch, torch.nn.functional.cross_entropy


def many_tensor(torch, layers=80, width=256, **_):
    nn = torch.nn
    mods = []
    for _ in range(layers):
        mods += [nn.Linear(width, width), nn.ReLU()]
    return _mlp_data(torch, nn.Sequential(*mods, nn.Linear(width, 10)), width)


def comm(torch, **_):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import peers
    model, _batch = peers.build(torch, "comm")
    return _mlp_data(torch, model, peers.INPUT_DIM)


MODELS = {"resnet50": resnet50, "resnet101": resnet101, "bert-base": bert_base, "many-tensor": many_tensor,
          "comm": comm}


def build(torch, name, seed=1234, **options):
    """(model, make_batch, loss_fn) of MODELS[name], the same weights on every rank for a seed."""
    torch.manual_seed(seed)
    return MODELS[name](torch, **options)


def counts(model):
    """(parameters, parameter tensors): each shared (tied) tensor once, as model.parameters()."""
    params = list(model.parameters())
    return sum(p.numel() for p in params), len(params)


def main():
    import time
    import torch
    torch.set_num_threads(1)
    expected = dict(RESNET_COUNTS, **{"bert-base": BERT_COUNT, "many-tensor": MANY_TENSOR_COUNT})
    for name in MODELS:
        model, _, _ = build(torch, name)
        n, t = counts(model)
        print("%-12s %12s parameters in %3d tensors (%.1f MB of fp32 gradients)"
              % (name, "{:,}".format(n), t, n * 4 / 1e6), flush=True)
        if name in expected:
            assert (n, t) == expected[name], (name, (n, t), expected[name])
        del model
    if "--time" in sys.argv:  # one rank's forward + backward at the default batch, one thread
        for name in MODELS:
            model, make_batch, loss_fn = build(torch, name)
            inputs, targets = make_batch(DEFAULT_BATCH[name], torch.Generator().manual_seed(0))
            walls = []
            for _ in range(4):
                model.zero_grad()
                t0 = time.perf_counter()
                loss_fn(model(*inputs), targets).backward()
                walls.append(time.perf_counter() - t0)
            print("%-12s batch %3d: forward + backward %.0f ms (median of 3 after a warm-up)"
                  % (name, DEFAULT_BATCH[name], 1e3 * sorted(walls[1:])[1]), flush=True)
            del model


if __name__ == "__main__":
    main()
