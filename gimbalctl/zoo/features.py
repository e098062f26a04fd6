"""Model characteristics for the similarity policy (seed 002 §4.1: "the model similarity is
based on DL characteristics, such as the number of layers and model parameters").

For each model in :data:`gimbalctl.zoo.nets.MODELS` this builds the torch module and
measures, for ONE sample of its usual input:

* layers by kind (leaf modules): conv, linear, norm, activation, pool, recurrent (LSTM
  layers), attention, embedding;
* parameters (millions);
* forward FLOPs per sample (GFLOP, ``torch.utils.flop_counter.FlopCounterMode``, plus the
  recurrent layers' matrix products counted analytically: the counter does not see
  inside fused LSTM/GRU kernels);
* activation memory per sample (MiB: fp32 outputs of every leaf module in one forward).

Regenerate the shipped table with ``python -m gimbalctl.zoo.features --out
gimbalctl/data/model_features.csv`` (CPU, about a minute).
"""
from __future__ import annotations

import argparse
import csv
import sys

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from policies.similarity import FEATURES

from .nets import MODELS

_KIND = (
    ("conv", (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose2d)),
    ("linear", (nn.Linear,)),
    ("norm", (nn.BatchNorm1d, nn.BatchNorm2d, nn.InstanceNorm2d, nn.LayerNorm, nn.GroupNorm)),
    ("activation", (nn.ReLU, nn.ReLU6, nn.ELU, nn.SELU, nn.LeakyReLU, nn.Tanh, nn.GELU, nn.Sigmoid,
                    nn.Hardtanh, nn.SiLU)),
    ("pool", (nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d)),
    ("attention", (nn.MultiheadAttention,)),
    ("embedding", (nn.Embedding,)),
)


def _kind(m: nn.Module) -> str | None:
    if isinstance(m, (nn.LSTM, nn.GRU)):
        return "recurrent"
    if isinstance(m, (nn.LSTMCell, nn.GRUCell)):
        return "recurrent"
    for name, types in _KIND:
        if isinstance(m, types):
            return name
    return None


def measure(name: str) -> dict[str, float]:
    """Characteristics of model ``name`` (deterministic: shapes only, seeded inputs)."""
    build, sample, _ = MODELS[name]
    torch.manual_seed(0)
    model = build().eval()
    counts = dict.fromkeys(FEATURES[:8], 0)
    act_bytes = 0

    def hook(_m, _inp, out):
        nonlocal act_bytes
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, torch.Tensor):
                act_bytes += t.numel() * 4
            elif isinstance(t, (tuple, list)):  # LSTM's (h, c)
                act_bytes += sum(x.numel() * 4 for x in t if isinstance(x, torch.Tensor))

    rnn_flops = 0.0

    def rnn_hook(m, inp, _out):
        # FlopCounterMode does not see inside the fused recurrent kernels on CPU: count
        # their matrix products analytically, 2 FLOPs per multiply-add
        nonlocal rnn_flops
        gates = 4 if isinstance(m, (nn.LSTM, nn.LSTMCell)) else 3
        steps = inp[0].shape[0] if isinstance(m, (nn.LSTM, nn.GRU)) else 1
        dirs = 2 if getattr(m, "bidirectional", False) else 1
        layers = getattr(m, "num_layers", 1)
        h, x = m.hidden_size, m.input_size
        for layer in range(layers):
            cin = x if layer == 0 else h * dirs
            rnn_flops += 2.0 * gates * (cin * h + h * h) * steps * dirs

    handles = []
    for m in model.modules():
        k = _kind(m)
        if k == "recurrent" and isinstance(m, (nn.LSTM, nn.GRU)):
            counts[k] += m.num_layers
        elif k is not None:
            counts[k] += 1
        if k == "recurrent":
            handles.append(m.register_forward_hook(rnn_hook))
        if k == "attention" or not any(True for _ in m.children()):
            handles.append(m.register_forward_hook(hook))
    x = sample()
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        model(x)
    for h in handles:
        h.remove()
    out = {k: float(v) for k, v in counts.items()}
    out["params_m"] = sum(p.numel() for p in model.parameters()) / 1e6
    out["gflops"] = (fc.get_total_flops() + rnn_flops) / 1e9
    out["act_mb"] = act_bytes / 2 ** 20
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="-", help="CSV path (default: stdout)")
    ap.add_argument("models", nargs="*", help="subset of models (default: all)")
    a = ap.parse_args(argv)
    names = a.models or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; known: {', '.join(MODELS)}")
    f = sys.stdout if a.out == "-" else open(a.out, "w", newline="")
    w = csv.writer(f)
    w.writerow(("model", *FEATURES, "input"))
    for n in names:
        feats = measure(n)
        w.writerow((n, *(f"{feats[k]:.6g}" for k in FEATURES), MODELS[n][2]))
    if f is not sys.stdout:
        f.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
