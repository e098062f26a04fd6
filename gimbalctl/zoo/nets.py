"""Compact torch definitions of the reference and job models (seed 002 §5.1, Table 2).

Built only to measure their characteristics (layers by kind, parameters, FLOPs and
activation memory per sample); never trained here.  Architectures follow the original
papers' standard configurations (ResNet, ResNet V2 and MobileNet as Keras' applications build
them, VGG, MobileNetV2, EfficientNet-B0 to B7, DenseNet), the PyTorch
examples Gavel's workloads use (word-level LSTM language model, Transformer base,
autoencoder recommender, A3C's Atari network), and CycleGAN's ResNet generator.
torchvision is not installed in this project's environment, so the architectures are
written out here; tests/test_similarity_data.py checks their parameter counts against
torchvision's and Keras' published ones.
"""
from __future__ import annotations

import math

import torch
from torch import nn


# ----------------------------------------------------------------- ResNet (He et al.)
class _Basic(nn.Module):
    expansion = 1

    def __init__(self, cin, c, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, c, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(c)
        self.c2 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(c)
        self.act = nn.ReLU()
        self.down = None
        if stride != 1 or cin != c:
            self.down = nn.Sequential(nn.Conv2d(cin, c, 1, stride, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        y = self.act(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return self.act(y + (x if self.down is None else self.down(x)))


class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, c, stride):
        super().__init__()
        out = c * 4
        self.c1 = nn.Conv2d(cin, c, 1, bias=False)
        self.b1 = nn.BatchNorm2d(c)
        self.c2 = nn.Conv2d(c, c, 3, stride, 1, bias=False)
        self.b2 = nn.BatchNorm2d(c)
        self.c3 = nn.Conv2d(c, out, 1, bias=False)
        self.b3 = nn.BatchNorm2d(out)
        self.act = nn.ReLU()
        self.down = None
        if stride != 1 or cin != out:
            self.down = nn.Sequential(nn.Conv2d(cin, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        y = self.act(self.b1(self.c1(x)))
        y = self.act(self.b2(self.c2(y)))
        y = self.b3(self.c3(y))
        return self.act(y + (x if self.down is None else self.down(x)))


def resnet(depth: int, classes: int = 10, cifar: bool = True) -> nn.Module:
    """ResNet; ``cifar``: the 3x3 stride-1 stem without max-pool used for 32x32 inputs."""
    block, layers = {18: (_Basic, (2, 2, 2, 2)), 34: (_Basic, (3, 4, 6, 3)),
                     50: (_Bottleneck, (3, 4, 6, 3)), 101: (_Bottleneck, (3, 4, 23, 3)),
                     152: (_Bottleneck, (3, 8, 36, 3))}[depth]
    if cifar:
        mods: list[nn.Module] = [nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU()]
    else:
        mods = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for i, n in enumerate(layers):
        c = 64 * 2 ** i
        for k in range(n):
            mods.append(block(cin, c, 2 if (k == 0 and i > 0) else 1))
            cin = c * block.expansion
    mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*mods)


# ------------------------------------- ResNet V2 (He et al., ECCV 2016: pre-activation blocks)
class _PreactBottleneck(nn.Module):
    """Keras' ``resnet_v2`` block: BN-ReLU before the convolutions, the shortcut a 1x1
    convolution of the pre-activation (first block of a stack) or the input, max-pooled when
    the block strides (the stride sits in the last block of a stack, as Keras)."""

    def __init__(self, cin, c, stride, conv_shortcut):
        super().__init__()
        self.pre = nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU())
        self.short = (nn.Conv2d(cin, 4 * c, 1, stride) if conv_shortcut else
                      nn.MaxPool2d(1, stride) if stride > 1 else None)
        self.conv_shortcut = conv_shortcut
        self.body = nn.Sequential(
            nn.Conv2d(cin, c, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
            nn.Conv2d(c, c, 3, stride, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
            nn.Conv2d(c, 4 * c, 1))

    def forward(self, x):
        p = self.pre(x)
        s = self.short(p) if self.conv_shortcut else (self.short(x) if self.short else x)
        return s + self.body(p)


def resnet_v2(depth: int, classes: int = 10) -> nn.Module:
    """ResNet-50/101/152 V2 as Keras' ``applications`` builds them (the paper's Table 2 models)."""
    layers = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}[depth]
    mods: list[nn.Module] = [nn.Conv2d(3, 64, 7, 2, 3), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for i, n in enumerate(layers):
        c = 64 * 2 ** i
        for k in range(n):
            last = k == n - 1
            mods.append(_PreactBottleneck(cin, c, 2 if last and i < 3 else 1, k == 0))
            cin = 4 * c
    mods += [nn.BatchNorm2d(cin), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
             nn.Linear(cin, classes)]
    return nn.Sequential(*mods)


# ----------------------------------------------- MobileNet (Howard et al. 2017, Table 1)
def mobilenet_v1(classes: int = 10) -> nn.Module:
    """MobileNet (width 1.0): a 3x3 convolution, then 13 depthwise-separable blocks, as
    Keras' ``applications.MobileNet`` (its 1x1-convolution classifier written as a Linear)."""
    cfg = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1),
           (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1))
    mods: list[nn.Module] = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6()]
    cin = 32
    for c, s in cfg:
        mods += [nn.Conv2d(cin, cin, 3, s, 1, groups=cin, bias=False), nn.BatchNorm2d(cin), nn.ReLU6(),
                 nn.Conv2d(cin, c, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU6()]
        cin = c
    mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(1e-3), nn.Linear(cin, classes)]
    return nn.Sequential(*mods)


# ----------------------------------------------------------------- VGG (Simonyan & Zisserman)
def vgg(depth: int, classes: int = 10) -> nn.Module:
    cfg = {16: (2, 2, 3, 3, 3), 19: (2, 2, 4, 4, 4)}[depth]
    mods: list[nn.Module] = []
    cin = 3
    for i, n in enumerate(cfg):
        c = min(64 * 2 ** i, 512)
        for _ in range(n):
            mods += [nn.Conv2d(cin, c, 3, 1, 1), nn.ReLU()]
            cin = c
        mods.append(nn.MaxPool2d(2))
    mods += [nn.AdaptiveAvgPool2d(7), nn.Flatten(), nn.Linear(512 * 49, 4096), nn.ReLU(),
             nn.Dropout(), nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout(), nn.Linear(4096, classes)]
    return nn.Sequential(*mods)


# ----------------------------------------------------------------- MobileNetV2 (Sandler et al.)
class _Inverted(nn.Module):
    def __init__(self, cin, cout, stride, t):
        super().__init__()
        hid = cin * t
        layers: list[nn.Module] = []
        if t != 1:
            layers += [nn.Conv2d(cin, hid, 1, bias=False), nn.BatchNorm2d(hid), nn.ReLU6()]
        layers += [nn.Conv2d(hid, hid, 3, stride, 1, groups=hid, bias=False), nn.BatchNorm2d(hid),
                   nn.ReLU6(), nn.Conv2d(hid, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.body = nn.Sequential(*layers)
        self.res = stride == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        return x + y if self.res else y


def mobilenet_v2(classes: int = 10) -> nn.Module:
    cfg = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
           (6, 160, 3, 2), (6, 320, 1, 1))
    mods: list[nn.Module] = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6()]
    cin = 32
    for t, c, n, s in cfg:
        for k in range(n):
            mods.append(_Inverted(cin, c, s if k == 0 else 1, t))
            cin = c
    mods += [nn.Conv2d(cin, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.ReLU6(),
             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(1280, classes)]
    return nn.Sequential(*mods)


# ------------------------------------------------- EfficientNet-B0 (Tan & Le, ICML 2019, Table 1)
class _MBConv(nn.Module):
    """Mobile inverted bottleneck with squeeze-and-excitation (ratio 0.25 of the block's
    input channels) and SiLU ("swish"), as EfficientNet-B0."""

    def __init__(self, cin, cout, k, stride, t):
        super().__init__()
        hid = cin * t
        layers: list[nn.Module] = []
        if t != 1:
            layers += [nn.Conv2d(cin, hid, 1, bias=False), nn.BatchNorm2d(hid), nn.SiLU()]
        layers += [nn.Conv2d(hid, hid, k, stride, k // 2, groups=hid, bias=False),
                   nn.BatchNorm2d(hid), nn.SiLU()]
        self.expand = nn.Sequential(*layers)
        sq = max(1, cin // 4)
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(hid, sq, 1), nn.SiLU(),
                                nn.Conv2d(sq, hid, 1), nn.Sigmoid())
        self.project = nn.Sequential(nn.Conv2d(hid, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.res = stride == 1 and cin == cout

    def forward(self, x):
        y = self.expand(x)
        y = self.project(y * self.se(y))
        return x + y if self.res else y


def _divisible(v: float, d: int = 8) -> int:
    """Channels rounded to a multiple of ``d`` (never below ``d`` nor 10 % below ``v``), the
    rounding of the EfficientNet/MobileNet reference code."""
    out = max(d, int(v + d / 2) // d * d)
    return out + d if out < 0.9 * v else out


# (width, depth) coefficients of EfficientNet-B0..B7 (Tan & Le 2019, §3.3 compound scaling;
# the values of the authors' code, as torchvision's efficientnet_b0..b7)
EFFICIENTNET_SCALING = {0: (1.0, 1.0), 1: (1.0, 1.1), 2: (1.1, 1.2), 3: (1.2, 1.4),
                        4: (1.4, 1.8), 5: (1.6, 2.2), 6: (1.8, 2.6), 7: (2.0, 3.1)}


def efficientnet(b: int = 0, classes: int = 10) -> nn.Module:
    """EfficientNet-B``b``: B0 of Table 1 with channels × width (rounded to multiples of 8)
    and each stage's repeats × depth (rounded up)."""
    width, depth = EFFICIENTNET_SCALING[b]
    # (expansion t, kernel k, stride s, channels c, repeats n) of Table 1, stages 2-8
    cfg = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
           (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))
    cin = _divisible(32 * width)
    mods: list[nn.Module] = [nn.Conv2d(3, cin, 3, 2, 1, bias=False), nn.BatchNorm2d(cin), nn.SiLU()]
    for t, k, s, c, n in cfg:
        c = _divisible(c * width)
        for i in range(math.ceil(n * depth)):
            mods.append(_MBConv(cin, c, k, s if i == 0 else 1, t))
            cin = c
    last = 4 * cin  # 1280 for B0
    mods += [nn.Conv2d(cin, last, 1, bias=False), nn.BatchNorm2d(last), nn.SiLU(),
             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(last, classes)]
    return nn.Sequential(*mods)


def efficientnet_b0(classes: int = 10) -> nn.Module:
    return efficientnet(0, classes)


# ----------------------------------------------------------------- DenseNet (Huang et al.)
class _DenseLayer(nn.Module):
    def __init__(self, cin, growth):
        super().__init__()
        self.body = nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, 4 * growth, 1, bias=False),
                                  nn.BatchNorm2d(4 * growth), nn.ReLU(),
                                  nn.Conv2d(4 * growth, growth, 3, 1, 1, bias=False))

    def forward(self, x):
        return torch.cat([x, self.body(x)], 1)


def densenet(depth: int, classes: int = 10, growth: int = 32) -> nn.Module:
    blocks = {121: (6, 12, 24, 16), 169: (6, 12, 32, 32), 201: (6, 12, 48, 32)}[depth]
    c = 2 * growth
    mods: list[nn.Module] = [nn.Conv2d(3, c, 7, 2, 3, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                             nn.MaxPool2d(3, 2, 1)]
    for i, n in enumerate(blocks):
        for _ in range(n):
            mods.append(_DenseLayer(c, growth))
            c += growth
        if i < len(blocks) - 1:
            mods += [nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c // 2, 1, bias=False), nn.AvgPool2d(2)]
            c //= 2
    mods += [nn.BatchNorm2d(c), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, classes)]
    return nn.Sequential(*mods)


# ----------------------------------------------------------------- sequence / other models
class WordLM(nn.Module):
    """Word-level LSTM language model (the PyTorch example Gavel's LM job runs:
    Wikitext-2 vocabulary 33,278, 2 layers; embedding/hidden 200 as its defaults)."""

    def __init__(self, vocab=33278, dim=200, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.rnn = nn.LSTM(dim, dim, layers)
        self.drop = nn.Dropout(0.2)
        self.dec = nn.Linear(dim, vocab)

    def forward(self, x):
        y, _ = self.rnn(self.drop(self.emb(x)))
        return self.dec(self.drop(y))


class Translation(nn.Module):
    """Transformer base (Vaswani et al.): 6+6 layers, d_model 512, 8 heads, FFN 2048;
    shared vocabulary of 32,000 (our estimate for Gavel's Multi30k translation job)."""

    def __init__(self, vocab=32000, d=512):
        super().__init__()
        self.src = nn.Embedding(vocab, d)
        self.tgt = nn.Embedding(vocab, d)
        self.tf = nn.Transformer(d, 8, 6, 6, 2048, dropout=0.1)
        self.out = nn.Linear(d, vocab)

    def forward(self, x):
        s = self.src(x)
        return self.out(self.tf(s, self.tgt(x)))


def recommender(items: int = 26744) -> nn.Module:
    """Autoencoder recommender (Gavel's Recommendation job on ML-20M: 26,744 items;
    hidden layers 512-512-1024 as in the deep autoencoder recommender)."""
    return nn.Sequential(nn.Linear(items, 512), nn.SELU(), nn.Linear(512, 512), nn.SELU(),
                         nn.Linear(512, 1024), nn.SELU(), nn.Dropout(0.8), nn.Linear(1024, 512),
                         nn.SELU(), nn.Linear(512, 512), nn.SELU(), nn.Linear(512, items))


class A3CNet(nn.Module):
    """A3C Atari network (4 conv of 32 channels, LSTM 256, actor and critic heads)."""

    def __init__(self, actions=6):
        super().__init__()
        convs: list[nn.Module] = []
        cin = 1
        for _ in range(4):
            convs += [nn.Conv2d(cin, 32, 3, 2, 1), nn.ELU()]
            cin = 32
        self.conv = nn.Sequential(*convs, nn.Flatten())
        self.lstm = nn.LSTMCell(32 * 3 * 3, 256)
        self.actor = nn.Linear(256, actions)
        self.critic = nn.Linear(256, 1)

    def forward(self, x):
        h, _ = self.lstm(self.conv(x))
        return self.actor(h), self.critic(h)


class _ResBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.body = nn.Sequential(nn.ReflectionPad2d(1), nn.Conv2d(c, c, 3), nn.InstanceNorm2d(c), nn.ReLU(),
                                  nn.ReflectionPad2d(1), nn.Conv2d(c, c, 3), nn.InstanceNorm2d(c))

    def forward(self, x):
        return x + self.body(x)


class CycleGAN(nn.Module):
    """CycleGAN's ResNet generator (9 blocks, 64 filters) and 70x70 PatchGAN
    discriminator; one direction (the other is identical)."""

    def __init__(self):
        super().__init__()
        g: list[nn.Module] = [nn.ReflectionPad2d(3), nn.Conv2d(3, 64, 7), nn.InstanceNorm2d(64), nn.ReLU()]
        c = 64
        for _ in range(2):
            g += [nn.Conv2d(c, 2 * c, 3, 2, 1), nn.InstanceNorm2d(2 * c), nn.ReLU()]
            c *= 2
        g += [_ResBlock(c) for _ in range(9)]
        for _ in range(2):
            g += [nn.ConvTranspose2d(c, c // 2, 3, 2, 1, output_padding=1), nn.InstanceNorm2d(c // 2), nn.ReLU()]
            c //= 2
        g += [nn.ReflectionPad2d(3), nn.Conv2d(64, 3, 7), nn.Tanh()]
        self.gen = nn.Sequential(*g)
        d: list[nn.Module] = [nn.Conv2d(3, 64, 4, 2, 1), nn.LeakyReLU(0.2)]
        c = 64
        for s in (2, 2, 1):
            d += [nn.Conv2d(c, 2 * c, 4, s, 1), nn.InstanceNorm2d(2 * c), nn.LeakyReLU(0.2)]
            c *= 2
        d += [nn.Conv2d(c, 1, 4, 1, 1)]
        self.disc = nn.Sequential(*d)

    def forward(self, x):
        return self.disc(self.gen(x))


class Bert(nn.Module):
    """BERT-base encoder (Devlin et al.): 12 layers, hidden 768, 12 heads, FFN 3072,
    vocabulary 30,522; a classification head (Pollux's bert job fine-tunes on SQuAD)."""

    def __init__(self, vocab=30522, d=768, layers=12):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(512, d)
        self.norm = nn.LayerNorm(d)
        layer = nn.TransformerEncoderLayer(d, 12, 3072, activation="gelu")
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, 2)

    def forward(self, x):
        pos = torch.arange(x.shape[0]).unsqueeze(1)
        return self.head(self.enc(self.norm(self.emb(x) + self.pos(pos))))


class DeepSpeech2(nn.Module):
    """DeepSpeech2 (Amodei et al.) as in the common PyTorch implementation Pollux trains:
    2 conv layers on a 161-bin spectrogram, 5 bidirectional GRU layers of 800 whose two
    directions are summed, a 29-symbol output (about 38 M parameters)."""

    def __init__(self, hidden=800, layers=5):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, 32, (41, 11), (2, 2), (20, 5)), nn.BatchNorm2d(32), nn.Hardtanh(0, 20),
                                  nn.Conv2d(32, 32, (21, 11), (2, 1), (10, 5)), nn.BatchNorm2d(32), nn.Hardtanh(0, 20))
        self.rnns = nn.ModuleList(nn.GRU(32 * 41 if i == 0 else hidden, hidden, bidirectional=True)
                                  for i in range(layers))
        self.hidden = hidden
        self.fc = nn.Linear(hidden, 29)

    def forward(self, x):
        y = self.conv(x)  # (1, 32, 41, T)
        y = y.flatten(1, 2).permute(2, 0, 1)  # (T, 1, 32*41)
        for rnn in self.rnns:
            y, _ = rnn(y)
            y = y[..., :self.hidden] + y[..., self.hidden:]
        return self.fc(y)


def _cbl(cin, cout, k, s=1):
    return [nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout), nn.LeakyReLU(0.1)]


class _DarkRes(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.body = nn.Sequential(*_cbl(c, c // 2, 1), *_cbl(c // 2, c, 3))

    def forward(self, x):
        return x + self.body(x)


class YoloV3(nn.Module):
    """YOLOv3 (Redmon & Farhadi): Darknet-53 backbone and the three detection scales'
    convolution stacks, 80 classes, 416x416 input (Pollux's yolov3 job, PASCAL VOC uses 20
    classes: the head width is the only difference)."""

    def __init__(self, classes=80):
        super().__init__()
        mods = _cbl(3, 32, 3)
        c = 32
        for n in (1, 2, 8, 8, 4):
            mods += _cbl(c, 2 * c, 3, 2)
            c *= 2
            mods += [_DarkRes(c) for _ in range(n)]
        self.backbone = nn.Sequential(*mods)
        out = 3 * (5 + classes)
        head: list[nn.Module] = []
        cin = c
        for width in (512, 256, 128):  # three scales' conv sets (applied here at one scale)
            for _ in range(2):
                head += _cbl(cin, width, 1) + _cbl(width, 2 * width, 3)
                cin = 2 * width
            head += _cbl(cin, width, 1) + _cbl(width, 2 * width, 3) + [nn.Conv2d(2 * width, out, 1)]
            cin = out
        self.head = nn.Sequential(*head)

    def forward(self, x):
        return self.head(self.backbone(x))


# name -> (builder, example input for ONE sample, source of the input shape)
MODELS = {
    "resnet18": (lambda: resnet(18), lambda: torch.randn(1, 3, 32, 32), "CIFAR-10 (Gavel ResNet-18)"),
    "resnet50": (lambda: resnet(50, 1000, cifar=False), lambda: torch.randn(1, 3, 224, 224), "ImageNet (Gavel ResNet-50)"),
    "transformer": (Translation, lambda: torch.randint(0, 32000, (50, 1)), "50 tokens (Multi30k)"),
    "lm": (WordLM, lambda: torch.randint(0, 33278, (35, 1)), "35 tokens (bptt, Wikitext-2)"),
    "recommendation": (recommender, lambda: torch.rand(1, 26744), "one user vector (ML-20M)"),
    "a3c": (A3CNet, lambda: torch.randn(1, 1, 42, 42), "42x42 Atari frame"),
    "cyclegan": (CycleGAN, lambda: torch.randn(1, 3, 256, 256), "256x256 image (monet2photo)"),
    "bert": (Bert, lambda: torch.randint(0, 30522, (384, 1)), "384 tokens (SQuAD)"),
    "deepspeech2": (DeepSpeech2, lambda: torch.randn(1, 1, 161, 200), "161x200 spectrogram (2 s)"),
    "yolov3": (YoloV3, lambda: torch.randn(1, 3, 416, 416), "416x416 image"),
    "resnet34": (lambda: resnet(34), lambda: torch.randn(1, 3, 32, 32), "CIFAR-10"),
    "resnet101": (lambda: resnet(101), lambda: torch.randn(1, 3, 32, 32), "CIFAR-10"),
    "resnet152": (lambda: resnet(152), lambda: torch.randn(1, 3, 32, 32), "CIFAR-10"),
    "vgg16": (lambda: vgg(16), lambda: torch.randn(1, 3, 32, 32), "CIFAR-10"),
    "vgg19": (lambda: vgg(19), lambda: torch.randn(1, 3, 32, 32), "CIFAR-10"),
    "resnet50v2": (lambda: resnet_v2(50), lambda: torch.randn(1, 3, 32, 32), "CIFAR-10"),
    "resnet101v2": (lambda: resnet_v2(101), lambda: torch.randn(1, 3, 32, 32), "CIFAR-10"),
    "resnet152v2": (lambda: resnet_v2(152), lambda: torch.randn(1, 3, 32, 32), "CIFAR-10"),
    "mobilenet": (mobilenet_v1, lambda: torch.randn(1, 3, 32, 32), "CIFAR-10"),
    "mobilenetv2": (mobilenet_v2, lambda: torch.randn(1, 3, 32, 32), "CIFAR-10"),
    "efficientnetb0": (efficientnet_b0, lambda: torch.randn(1, 3, 32, 32), "CIFAR-10"),
    **{f"efficientnetb{b}": ((lambda b=b: efficientnet(b)), lambda: torch.randn(1, 3, 32, 32),
                             "CIFAR-10") for b in range(1, 8)},
    "densenet121": (lambda: densenet(121), lambda: torch.randn(1, 3, 32, 32), "CIFAR-10"),
    "densenet169": (lambda: densenet(169), lambda: torch.randn(1, 3, 32, 32), "CIFAR-10"),
    "densenet201": (lambda: densenet(201), lambda: torch.randn(1, 3, 32, 32), "CIFAR-10"),
}
