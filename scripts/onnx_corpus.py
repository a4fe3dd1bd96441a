"""The ONNX import corpus: ordinary models written with torch.nn only, in the layouts of
torchvision's and of BERT / GPT (no torchvision, nothing downloaded), for scripts/make-onnx-models,
which exports them with torch.onnx's default settings.

    CORPUS: one Entry per model: its name, how to build it, an example input, the exports made
    (eval: torch.onnx.export(model.eval(), x, f); train: the same with
    training=TrainingMode.TRAINING) and the opsets (None: the exporter's default, 14 in PyTorch
    1.13).

Widths and depths are torchvision's layouts at reduced width, so that the files stay small
(1-7 MB) while every kind of block is there.
"""
import collections

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_divisible(v, divisor=8):
    """torchvision's _make_divisible: round to a multiple of `divisor`, not below 90% of v."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def conv_bn_act(cin, cout, k, stride=1, groups=1, act=nn.ReLU, eps=1e-5):
    """torchvision's Conv2dNormActivation: conv (no bias), BatchNorm, activation (or none)."""
    layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout, eps=eps)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


# --- ResNet with bottleneck blocks (torchvision's resnet50 layout, v1.5 strides).
class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, planes, stride):
        super().__init__()
        cout = planes * self.expansion
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, layers=(3, 4, 6, 3), base=64, classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, base, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(base)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin, stages = base, []
        for i, n in enumerate(layers):
            planes = base * 2 ** i
            blocks = []
            for j in range(n):
                blocks.append(Bottleneck(cin, planes, 2 if j == 0 and i > 0 else 1))
                cin = planes * Bottleneck.expansion
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# --- MobileNet v2 (torchvision's mobilenet_v2: ReLU6, inverted residuals).
class InvertedResidualV2(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = int(round(cin * expand))
        self.use_res_connect = stride == 1 and cin == cout
        layers = []
        if expand != 1:
            layers.append(conv_bn_act(cin, hidden, 1, act=nn.ReLU6))
        layers += [conv_bn_act(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, width_mult=1.0, classes=1000):
        super().__init__()
        setting = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1],
                   [6, 160, 3, 2], [6, 320, 1, 1]]
        cin = make_divisible(32 * width_mult)
        last = make_divisible(1280 * max(1.0, width_mult))
        features = [conv_bn_act(3, cin, 3, 2, act=nn.ReLU6)]
        for t, c, n, s in setting:
            cout = make_divisible(c * width_mult)
            for i in range(n):
                features.append(InvertedResidualV2(cin, cout, s if i == 0 else 1, t))
                cin = cout
        features.append(conv_bn_act(cin, last, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, classes))

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


# --- MobileNet v3 small (torchvision's mobilenet_v3_small: Hardswish, squeeze-excitation with
# Hardsigmoid).
class SqueezeExcitation(nn.Module):
    def __init__(self, channels, squeeze):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.activation = nn.ReLU()
        self.scale_activation = nn.Hardsigmoid()

    def forward(self, x):
        s = self.fc2(self.activation(self.fc1(self.avgpool(x))))
        return self.scale_activation(s) * x


class InvertedResidualV3(nn.Module):
    def __init__(self, cin, k, exp, cout, se, hs, stride):
        super().__init__()
        act = nn.Hardswish if hs else nn.ReLU
        self.use_res_connect = stride == 1 and cin == cout
        layers = []
        if exp != cin:
            layers.append(conv_bn_act(cin, exp, 1, act=act, eps=0.001))
        layers.append(conv_bn_act(exp, exp, k, stride, groups=exp, act=act, eps=0.001))
        if se:
            layers.append(SqueezeExcitation(exp, make_divisible(exp // 4)))
        layers.append(conv_bn_act(exp, cout, 1, act=None, eps=0.001))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        y = self.block(x)
        return y + x if self.use_res_connect else y


class MobileNetV3Small(nn.Module):
    SETTING = [(16, 3, 16, 16, True, False, 2), (16, 3, 72, 24, False, False, 2),
               (24, 3, 88, 24, False, False, 1), (24, 5, 96, 40, True, True, 2),
               (40, 5, 240, 40, True, True, 1), (40, 5, 240, 40, True, True, 1),
               (40, 5, 120, 48, True, True, 1), (48, 5, 144, 48, True, True, 1),
               (48, 5, 288, 96, True, True, 2), (96, 5, 576, 96, True, True, 1),
               (96, 5, 576, 96, True, True, 1)]

    def __init__(self, classes=1000, last_channel=1024):
        super().__init__()
        layers = [conv_bn_act(3, 16, 3, 2, act=nn.Hardswish, eps=0.001)]
        layers += [InvertedResidualV3(*s) for s in self.SETTING]
        layers.append(conv_bn_act(96, 576, 1, act=nn.Hardswish, eps=0.001))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(576, last_channel), nn.Hardswish(),
                                        nn.Dropout(0.2), nn.Linear(last_channel, classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# --- DenseNet (torchvision's densenet121 layout: pre-activation dense layers, concat along
# channels, transitions with average pooling).
class DenseLayer(nn.Module):
    def __init__(self, cin, growth, bn_size):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(cin)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, 1, 1, bias=False)

    def forward(self, features):
        x = self.conv1(self.relu1(self.norm1(torch.cat(features, 1))))
        return self.conv2(self.relu2(self.norm2(x)))


class DenseBlock(nn.ModuleDict):
    def __init__(self, n, cin, growth, bn_size):
        super().__init__()
        for i in range(n):
            self.add_module(f"denselayer{i + 1}", DenseLayer(cin + i * growth, growth, bn_size))

    def forward(self, x):
        features = [x]
        for layer in self.values():
            features.append(layer(features))
        return torch.cat(features, 1)


class DenseNet(nn.Module):
    def __init__(self, growth=32, blocks=(6, 12, 24, 16), init_features=64, bn_size=4,
                 classes=1000):
        super().__init__()
        f = nn.Sequential()
        f.add_module("conv0", nn.Conv2d(3, init_features, 7, 2, 3, bias=False))
        f.add_module("norm0", nn.BatchNorm2d(init_features))
        f.add_module("relu0", nn.ReLU(inplace=True))
        f.add_module("pool0", nn.MaxPool2d(3, 2, 1))
        c = init_features
        for i, n in enumerate(blocks):
            f.add_module(f"denseblock{i + 1}", DenseBlock(n, c, growth, bn_size))
            c += n * growth
            if i != len(blocks) - 1:
                f.add_module(f"transition{i + 1}", nn.Sequential(
                    nn.BatchNorm2d(c), nn.ReLU(inplace=True), nn.Conv2d(c, c // 2, 1, bias=False),
                    nn.AvgPool2d(2, 2)))
                c //= 2
        f.add_module("norm5", nn.BatchNorm2d(c))
        self.features = f
        self.classifier = nn.Linear(c, classes)

    def forward(self, x):
        x = F.adaptive_avg_pool2d(F.relu(self.features(x)), (1, 1))
        return self.classifier(torch.flatten(x, 1))


# --- Inception (torchvision's inception_v3 blocks A and C: parallel branches concatenated,
# 1x7 / 7x1 factorised convolutions, an average-pool branch).
def basic_conv(cin, cout, k, stride=1, padding=0):
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, padding, bias=False),
                         nn.BatchNorm2d(cout, eps=0.001), nn.ReLU(inplace=True))


class InceptionA(nn.Module):
    def __init__(self, cin, pool_features):
        super().__init__()
        self.branch1x1 = basic_conv(cin, 64, 1)
        self.branch5x5 = nn.Sequential(basic_conv(cin, 48, 1), basic_conv(48, 64, 5, padding=2))
        self.branch3x3dbl = nn.Sequential(basic_conv(cin, 64, 1), basic_conv(64, 96, 3, padding=1),
                                          basic_conv(96, 96, 3, padding=1))
        self.branch_pool = basic_conv(cin, pool_features, 1)

    def forward(self, x):
        pool = self.branch_pool(F.avg_pool2d(x, 3, 1, 1))
        return torch.cat([self.branch1x1(x), self.branch5x5(x), self.branch3x3dbl(x), pool], 1)


class InceptionC(nn.Module):
    def __init__(self, cin, c7):
        super().__init__()
        self.branch1x1 = basic_conv(cin, 192, 1)
        self.branch7x7 = nn.Sequential(basic_conv(cin, c7, 1),
                                       basic_conv(c7, c7, (1, 7), padding=(0, 3)),
                                       basic_conv(c7, 192, (7, 1), padding=(3, 0)))
        self.branch_pool = basic_conv(cin, 192, 1)

    def forward(self, x):
        pool = self.branch_pool(F.max_pool2d(x, 3, 1, 1))
        return torch.cat([self.branch1x1(x), self.branch7x7(x), pool], 1)


class InceptionNet(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(basic_conv(3, 32, 3, 2), basic_conv(32, 64, 3, padding=1),
                                  nn.MaxPool2d(3, 2))
        self.mixed_a = InceptionA(64, 32)
        self.mixed_c = InceptionC(256, 64)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(0.5)
        self.fc = nn.Linear(576, classes)

    def forward(self, x):
        x = self.mixed_c(self.mixed_a(self.stem(x)))
        return self.fc(self.dropout(torch.flatten(self.avgpool(x), 1)))


# --- A BERT-style encoder: token and learned position embeddings, LayerNorm,
# nn.TransformerEncoderLayer blocks (post-LN, GELU), a pooler on the first token. Positions
# from torch.arange in forward, or (position_ids=True) from a buffer of max_positions positions
# sliced to the sequence, as Hugging Face's BertEmbeddings reads them.
class BertLike(nn.Module):
    def __init__(self, vocab=1000, d=64, heads=4, layers=2, max_positions=32, classes=2,
                 position_ids=False):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_positions, d)
        if position_ids:
            self.register_buffer("position_ids", torch.arange(max_positions).expand((1, -1)))
        self.norm = nn.LayerNorm(d)
        self.drop = nn.Dropout(0.1)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.1, activation="gelu",
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.pooler = nn.Linear(d, d)
        self.cls = nn.Linear(d, classes)

    def forward(self, ids):
        if hasattr(self, "position_ids"):
            pos = self.pos(self.position_ids[:, :ids.shape[1]])
        else:
            pos = self.pos(torch.arange(ids.shape[1], device=ids.device))
        x = self.encoder(self.drop(self.norm(self.tok(ids) + pos)))
        return self.cls(torch.tanh(self.pooler(x[:, 0])))


# --- A GPT-style decoder: token and learned position embeddings, pre-LN blocks with
# nn.MultiheadAttention under a causal mask, a GELU MLP, a final LayerNorm and an LM head.
class GptBlock(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, dropout=0.1, batch_first=True)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d),
                                 nn.Dropout(0.1))

    def forward(self, x, mask):
        h = self.ln_1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


class GptLike(nn.Module):
    def __init__(self, vocab=1000, d=64, heads=4, layers=2, seq=32, tie=False):
        super().__init__()
        self.seq = seq
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList(GptBlock(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        if tie:  # GPT-2's LM head: the token table, one parameter
            self.lm_head.weight = self.wte.weight

    def forward(self, ids):
        mask = torch.triu(torch.full((self.seq, self.seq), float("-inf")), diagonal=1)
        x = self.drop(self.wte(ids) + self.wpe(torch.arange(self.seq)))
        for block in self.h:
            x = block(x, mask)
        return self.lm_head(self.ln_f(x))


Entry = collections.namedtuple("Entry", "name build example exports opsets")


def _image(size):
    return lambda batch: torch.randn(batch, 3, size, size)


def _tokens(vocab, seq):
    return lambda batch: torch.randint(0, vocab, (batch, seq))


CORPUS = [
    # torchvision's resnet50 layout (bottlenecks 3, 4, 6, 3; v1.5 strides) at a quarter width.
    Entry("resnet50_narrow", lambda: ResNet(base=16, classes=100), _image(224), ("eval", "train"),
          (None,)),
    Entry("mobilenet_v2", lambda: MobileNetV2(width_mult=0.5, classes=100), _image(224),
          ("eval", "train"), (None,)),
    Entry("mobilenet_v3_small", lambda: MobileNetV3Small(classes=100), _image(224),
          ("eval", "train"), (None,)),
    # torchvision's densenet121 layout (6, 12, 24, 16 dense layers) at growth 12.
    Entry("densenet121_narrow",
          lambda: DenseNet(growth=12, blocks=(6, 12, 24, 16), init_features=24, classes=100),
          _image(224), ("eval", "train"), (None,)),
    Entry("inception", lambda: InceptionNet(classes=100), _image(128), ("eval", "train"), (None,)),
    Entry("bert_like", BertLike, _tokens(1000, 32), ("eval", "train"), (None, 17)),
    # Hugging Face's form: 64 positions in a buffer, the sequence's 32 read (max_len: 64).
    Entry("bert_like_position_ids", lambda: BertLike(max_positions=64, position_ids=True),
          _tokens(1000, 32), ("eval", "train"), (None,)),
    Entry("gpt_like", GptLike, _tokens(1000, 32), ("eval", "train"), (None, 17)),
    Entry("gpt_like_tied", lambda: GptLike(tie=True), _tokens(1000, 32), ("eval", "train"),
          (None,)),
]
