#!/usr/bin/env python3
"""Writes the long, repetitive model files of scenarios/models/ (GoogLeNet, VGG, ResNet,
EfficientNet, MobileNet v2, Wide ResNet, ResNet-D, DenseNet, RegNet, SE-ResNet, RepVGG, MnasNet,
SPNASNet).

The YAML files are the product: they are committed, and a user adds a model by writing one YAML
file (schema: scenarios/models/README.md). This script only saves typing for the models built from
repeated blocks, and documents where their structure comes from. Output is deterministic; rerun
after editing a definition here:

    /usr/bin/python3 scripts/gen_models.py            # writes scenarios/models/*.yaml
    /usr/bin/python3 scripts/gen_models.py --check    # exits 1 if a file differs from its output

Standard library only.
"""

import argparse
import math
import os
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS_DIR = os.path.join(ROOT, "scenarios", "models")


class Net:
    """Collects layers and renders them as one flow mapping per line. Given the input shape
    (channels, height, width), it also follows each layer's output shape and adds up the
    parameters and forward MACs the model file will have, by core::Model::Build's rules (conv:
    out_c x out_h x out_w x in_c / groups x k x k MACs, its weight and bias; batchnorm: scale and
    shift; fc: M x N and its bias; pools by their rounding; concat along channels), so that a
    generated header states them and a definition that drifts from its reference fails here."""

    def __init__(self, input_chw=None):
        self.lines = []
        self.last = None  # name of the previous layer in the file
        self.shapes = {"data": tuple(input_chw)} if input_chw else None
        self.params = 0
        self.macs = 0

    def comment(self, text):
        self.lines.append("  # " + text)

    def shape(self, name):
        return self.shapes[name]

    def _track(self, name, type_, bottom, kw):
        if bottom is None:
            bottoms = [self.last or "data"]
        elif isinstance(bottom, (list, tuple)):
            bottoms = list(bottom)
        else:
            bottoms = [bottom]
        ins = [self.shapes[b] for b in bottoms]
        c, h, w = ins[0]
        out = (c, h, w)
        if type_ == "conv":
            k, s, p, g = kw["kernel"], kw.get("stride", 1), kw.get("pad", 0), kw.get("groups", 1)
            n = kw["num_output"]
            assert c % g == 0 and n % g == 0, (name, c, n, g)
            out = (n, (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1)
            weight = n * (c // g) * k * k
            self.params += weight + (n if kw.get("bias", True) else 0)
            self.macs += weight * out[1] * out[2]
        elif type_ == "pool":
            if kw.get("global"):
                out = (c, 1, 1)
            else:
                k, s, p = kw["kernel"], kw.get("stride", 1), kw.get("pad", 0)

                def size(x):
                    if kw.get("round", "ceil") == "floor":
                        return (x + 2 * p - k) // s + 1
                    o = -(-(x + 2 * p - k) // s) + 1
                    return o - 1 if p > 0 and (o - 1) * s >= x + p else o
                out = (c, size(h), size(w))
        elif type_ == "batchnorm":
            self.params += 2 * c
        elif type_ == "concat":
            assert all(i[1:] == (h, w) for i in ins), (name, ins)
            out = (sum(i[0] for i in ins), h, w)
        elif type_ == "add":
            assert all(i == ins[0] for i in ins), (name, ins)
        elif type_ == "mul":
            assert ins[1] in (ins[0], (c, 1, 1)), (name, ins)
        elif type_ == "fc":
            m, n = c * h * w, kw["num_output"]
            self.params += m * n + (n if kw.get("bias", True) else 0)
            self.macs += m * n
            out = (n, 1, 1)
        else:
            assert type_ in ("relu", "tanh", "dropout", "softmax_loss"), type_
        self.shapes[name] = out

    def add(self, name, type_, bottom=None, note=None, **kw):
        """Appends a layer. bottom=None reads the previous layer (the schema's default)."""
        if self.shapes is not None:
            self._track(name, type_, bottom, kw)
        items = [("name", name), ("type", type_)]
        if bottom is not None:
            if isinstance(bottom, (list, tuple)):
                items.append(("bottom", "[" + ", ".join(bottom) + "]"))
            elif bottom != self.last:
                items.append(("bottom", bottom))
        items += list(kw.items())
        body = ", ".join("%s: %s" % (k, fmt(v)) for k, v in items)
        line = "  - {" + body + "}"
        if note:
            line += "  # " + note
        self.lines.append(line)
        self.last = name
        return name


def fmt(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def render(name, description, header, input_chw, num_classes, net):
    c, h, w = input_chw
    out = ["# " + line if line else "#" for line in header]
    out.append("# Generated by scripts/gen_models.py; edit the generator and rerun it (or edit this")
    out.append("# file by hand and drop it from the generator). Schema: scenarios/models/README.md.")
    out.append("schema_version: 1")
    out.append("name: " + name)
    out.append('description: "%s"' % description)
    out.append("input: {channels: %d, height: %d, width: %d}" % (c, h, w))
    out.append("num_classes: %d" % num_classes)
    out.append("layers:")
    out += net.lines
    return "\n".join(out) + "\n"


# ---- VGG (Simonyan & Zisserman, configurations D and E) ---------------------------------------

VGG_STAGES = {
    "vgg11": [1, 1, 2, 2, 2],  # configuration A
    "vgg13": [2, 2, 2, 2, 2],  # configuration B
    "vgg16": [2, 2, 3, 3, 3],  # configuration D
    "vgg19": [2, 2, 4, 4, 4],  # configuration E
}


def vgg(stages, classes, bn=False):
    """VGG: 3x3 convs (with bias) and ReLU, a 2x2 max pool after each stage, fc6 and fc7 (4096,
    ReLU, dropout 0.5), fc8. bn=True puts a batch norm between every conv and its ReLU
    (torchvision's and timm's vgg*_bn: nn.Conv2d, nn.BatchNorm2d, ReLU). The Net counts the
    parameters and MACs."""
    net = Net((3, 224, 224))
    channels = [64, 128, 256, 512, 512]
    for s, (n, c) in enumerate(zip(stages, channels), start=1):
        for i in range(1, n + 1):
            net.add("conv%d_%d" % (s, i), "conv", num_output=c, kernel=3, pad=1)
            if bn:
                net.add("bn%d_%d" % (s, i), "batchnorm")
            net.add("relu%d_%d" % (s, i), "relu")
        net.add("pool%d" % s, "pool", method="max", kernel=2, stride=2)
    net.add("fc6", "fc", num_output=4096, note="512*7*7 = 25088 -> 4096")
    net.add("relu6", "relu")
    net.add("drop6", "dropout", ratio=0.5)
    net.add("fc7", "fc", num_output=4096)
    net.add("relu7", "relu")
    net.add("drop7", "dropout", ratio=0.5)
    net.add("fc8", "fc", num_output=classes)
    net.add("loss", "softmax_loss")
    return net


# ---- GoogLeNet (Caffe models/bvlc_googlenet/train_val.prototxt) -------------------------------

# name: (1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool projection)
INCEPTION = [
    ("3a", (64, 96, 128, 16, 32, 32)),
    ("3b", (128, 128, 192, 32, 96, 64)),
    ("pool3", None),
    ("4a", (192, 96, 208, 16, 48, 64)),
    ("aux1", None),
    ("4b", (160, 112, 224, 24, 64, 64)),
    ("4c", (128, 128, 256, 24, 64, 64)),
    ("4d", (112, 144, 288, 32, 64, 64)),
    ("aux2", None),
    ("4e", (256, 160, 320, 32, 128, 128)),
    ("pool4", None),
    ("5a", (256, 160, 320, 32, 128, 128)),
    ("5b", (384, 192, 384, 48, 128, 128)),
]


def inception(net, name, bottom, cfg):
    c1, r3, c3, r5, c5, pp = cfg
    p = "inception_" + name + "/"
    net.comment("inception (%s): 1x1 %d | 3x3 %d (reduce %d) | 5x5 %d (reduce %d) | pool proj %d"
                % (name, c1, c3, r3, c5, r5, pp))
    net.add(p + "1x1", "conv", bottom=bottom, num_output=c1, kernel=1)
    b1 = net.add(p + "relu_1x1", "relu")
    net.add(p + "3x3_reduce", "conv", bottom=bottom, num_output=r3, kernel=1)
    net.add(p + "relu_3x3_reduce", "relu")
    net.add(p + "3x3", "conv", num_output=c3, kernel=3, pad=1)
    b2 = net.add(p + "relu_3x3", "relu")
    net.add(p + "5x5_reduce", "conv", bottom=bottom, num_output=r5, kernel=1)
    net.add(p + "relu_5x5_reduce", "relu")
    net.add(p + "5x5", "conv", num_output=c5, kernel=5, pad=2)
    b3 = net.add(p + "relu_5x5", "relu")
    net.add(p + "pool", "pool", bottom=bottom, method="max", kernel=3, stride=1, pad=1)
    net.add(p + "pool_proj", "conv", num_output=pp, kernel=1)
    b4 = net.add(p + "relu_pool_proj", "relu")
    return net.add(p + "output", "concat", bottom=[b1, b2, b3, b4])


def aux_head(net, n, bottom):
    p = "loss%d/" % n
    net.comment("auxiliary classifier %d (training only; leave out with group 'aux')" % n)
    net.add(p + "ave_pool", "pool", bottom=bottom, group="aux", method="avg", kernel=5, stride=3,
            note="14 -> 4")
    net.add(p + "conv", "conv", group="aux", num_output=128, kernel=1)
    net.add(p + "relu_conv", "relu", group="aux")
    net.add(p + "fc", "fc", group="aux", num_output=1024, note="128*4*4 = 2048 -> 1024")
    net.add(p + "relu_fc", "relu", group="aux")
    net.add(p + "drop_fc", "dropout", group="aux", ratio=0.7)
    net.add(p + "classifier", "fc", group="aux", num_output=1000)
    net.add(p + "loss", "softmax_loss", group="aux")


def googlenet():
    net = Net()
    net.add("conv1/7x7_s2", "conv", num_output=64, kernel=7, stride=2, pad=3, note="224 -> 112")
    net.add("conv1/relu_7x7", "relu")
    net.add("pool1/3x3_s2", "pool", method="max", kernel=3, stride=2, round="ceil",
            note="112 -> 56")
    net.add("pool1/norm1", "lrn", local_size=5, alpha=0.0001, beta=0.75)
    net.add("conv2/3x3_reduce", "conv", num_output=64, kernel=1)
    net.add("conv2/relu_3x3_reduce", "relu")
    net.add("conv2/3x3", "conv", num_output=192, kernel=3, pad=1)
    net.add("conv2/relu_3x3", "relu")
    net.add("conv2/norm2", "lrn", local_size=5, alpha=0.0001, beta=0.75)
    top = net.add("pool2/3x3_s2", "pool", method="max", kernel=3, stride=2, round="ceil",
                  note="56 -> 28")
    for name, cfg in INCEPTION:
        if name == "pool3":
            top = net.add("pool3/3x3_s2", "pool", bottom=top, method="max", kernel=3, stride=2,
                          round="ceil", note="28 -> 14")
        elif name == "pool4":
            top = net.add("pool4/3x3_s2", "pool", bottom=top, method="max", kernel=3, stride=2,
                          round="ceil", note="14 -> 7")
        elif name.startswith("aux"):
            aux_head(net, int(name[3:]), top)
        else:
            top = inception(net, name, top, cfg)
    net.add("pool5/7x7_s1", "pool", bottom=top, method="avg", kernel=7, stride=1, note="7 -> 1")
    net.add("pool5/drop_7x7_s1", "dropout", ratio=0.4)
    net.add("loss3/classifier", "fc", num_output=1000)
    net.add("loss3/loss3", "softmax_loss")
    return net


# ---- ResNet (He et al. 2016, bottleneck blocks) -----------------------------------------------

RESNET_BLOCKS = {
    "resnet18": [2, 2, 2, 2],
    "resnet26": [2, 2, 2, 2],
    "resnet34": [3, 4, 6, 3],
    "resnet50": [3, 4, 6, 3],
    "resnet101": [3, 4, 23, 3],
    "resnet152": [3, 8, 36, 3],
}


def block_names(n):
    """Caffe's names: a, b, c, ... for short stages; a, b1, b2, ... for long ones (ResNet-152)."""
    if n <= 6:
        return [chr(ord("a") + i) for i in range(n)]
    return ["a"] + ["b%d" % i for i in range(1, n)]


def resnet(blocks, basic=False, cardinality=1, base_width=64, expansion=4, se_units=0,
           se_ratio=0, deep_stem=False, avg_down=False):
    """Bottleneck blocks (1x1, 3x3, 1x1; ResNet-50 and deeper), or basic blocks (two 3x3 convs;
    ResNet-18 and -34) when basic is true. A projection shortcut wherever the shape changes.

    ResNeXt (Xie et al. 2017) as NVIDIA DeepLearningExamples builds it: the 3x3 conv in
    `cardinality` groups, the bottleneck `base_width` channels wide in stage 2 (doubling per stage),
    its output `expansion` times that. se_units > 0 adds DLE's squeeze-and-excitation after the
    last batch norm: global mean, a linear layer to se_units (with bias), ReLU, a linear layer
    back (with bias), sigmoid, the branch scaled per channel, then the residual add; se_ratio > 0
    the same gate squeezed to channels / se_ratio (timm's SEModule, rd_ratio 1/16). The linear
    layers are written as 1x1 convs on the pooled 1x1 image (the same parameters and MACs; the
    schema's per-channel gate is an image Cx1x1) and the sigmoid as `tanh`, the schema's
    saturating element-wise layer (the same shape, no parameters, priced by its bytes).

    timm's ResNet-D (resnet.py stem_type='deep', stem_width=32, avg_down=True; the 'D' of Bag of
    Tricks, He et al. 2019): deep_stem replaces the 7x7 conv with three 3x3 convs (3 -> 32,
    stride 2; 32 -> 32; 32 -> 64), each but the last followed by its batch norm and ReLU, the
    last by the stem's (bn_conv1, conv1_relu); avg_down makes every projection shortcut
    downsample_avg: a 2x2 average pool, stride 2 (ceil_mode=True, count_include_pad=False; where
    the stride is 1, in the first stage, no pool) and then the 1x1 conv with stride 1 and its
    batch norm. The Net counts the parameters and MACs (net.params, net.macs)."""
    net = Net((3, 224, 224))
    if deep_stem:
        net.add("conv1_1", "conv", num_output=32, kernel=3, stride=2, pad=1, bias=False,
                note="224 -> 112")
        net.add("bn_conv1_1", "batchnorm")
        net.add("conv1_1_relu", "relu")
        net.add("conv1_2", "conv", num_output=32, kernel=3, pad=1, bias=False)
        net.add("bn_conv1_2", "batchnorm")
        net.add("conv1_2_relu", "relu")
        net.add("conv1_3", "conv", num_output=64, kernel=3, pad=1, bias=False)
    else:
        net.add("conv1", "conv", num_output=64, kernel=7, stride=2, pad=3, bias=False,
                note="224 -> 112")
    net.add("bn_conv1", "batchnorm")
    net.add("conv1_relu", "relu")
    # torchvision's stem pool: pad 1 with floor rounding (Caffe's ceil rounding gives the same 56
    # without the padding, but windows one pixel off).
    top = net.add("pool1", "pool", method="max", kernel=3, stride=2, pad=1, round="floor",
                  note="112 -> 56")
    in_c = 64
    for stage, n in enumerate(blocks, start=2):
        mid = base_width * 2 ** (stage - 2)
        out_c = mid if basic else expansion * mid
        for i, b in enumerate(block_names(n)):
            stride = 2 if (i == 0 and stage > 2) else 1
            strided = {"stride": stride} if stride > 1 else {}
            r = "res%d%s" % (stage, b)
            bn = "bn%d%s" % (stage, b)
            if basic:
                net.comment("%s: basic %d -> %d%s" % (r, mid, out_c,
                                                      ", stride %d" % stride if stride > 1 else ""))
            else:
                net.comment("%s: bottleneck %d -> %d -> %d%s" % (
                    r, mid, mid, out_c, ", stride %d" % stride if stride > 1 else ""))
            shortcut = top

            def projection():
                if avg_down and stride > 1:
                    net.add(r + "_branch1_pool", "pool", bottom=top, method="avg", kernel=2,
                            stride=stride, round="ceil")
                    net.add(r + "_branch1", "conv", num_output=out_c, kernel=1, bias=False)
                else:
                    net.add(r + "_branch1", "conv", bottom=top, num_output=out_c, kernel=1,
                            **strided, bias=False)
                return net.add(bn + "_branch1", "batchnorm")
            if basic and (stride > 1 or in_c != out_c):
                shortcut = projection()
            if basic:
                net.add(r + "_branch2a", "conv", bottom=top, num_output=mid, kernel=3, **strided,
                        pad=1, bias=False)
                net.add(bn + "_branch2a", "batchnorm")
                net.add(r + "_branch2a_relu", "relu")
                net.add(r + "_branch2b", "conv", num_output=out_c, kernel=3, pad=1, bias=False)
                branch = net.add(bn + "_branch2b", "batchnorm")
                net.add(r, "add", bottom=[shortcut, branch])
                top = net.add(r + "_relu", "relu")
                in_c = out_c
                continue
            if i == 0:
                # Projection shortcut: the channels (and, after stage 2, the size) change.
                shortcut = projection()
            net.add(r + "_branch2a", "conv", bottom=top, num_output=mid, kernel=1, bias=False)
            net.add(bn + "_branch2a", "batchnorm")
            net.add(r + "_branch2a_relu", "relu")
            # Stride on the 3x3 conv (ResNet v1.5, as torchvision); the MACs then match ~4.1 G.
            grouped = {"groups": cardinality} if cardinality > 1 else {}
            net.add(r + "_branch2b", "conv", num_output=mid, kernel=3, **strided, pad=1,
                    **grouped, bias=False)
            net.add(bn + "_branch2b", "batchnorm")
            net.add(r + "_branch2b_relu", "relu")
            net.add(r + "_branch2c", "conv", num_output=out_c, kernel=1, bias=False)
            branch = net.add(bn + "_branch2c", "batchnorm")
            if se_units > 0 or se_ratio > 0:
                units = se_units if se_units > 0 else out_c // se_ratio
                net.add(r + "_se_pool", "pool", method="avg", **{"global": True})
                net.add(r + "_se_squeeze", "conv", num_output=units, kernel=1)
                net.add(r + "_se_relu", "relu")
                net.add(r + "_se_expand", "conv", num_output=out_c, kernel=1)
                gate = net.add(r + "_se_sigmoid", "tanh", note="sigmoid")
                branch = net.add(r + "_se_scale", "mul", bottom=[branch, gate])
            net.add(r, "add", bottom=[shortcut, branch])
            top = net.add(r + "_relu", "relu")
            in_c = out_c
    net.add("pool5", "pool", method="avg", **{"global": True}, note="7 -> 1")
    net.add("fc1000", "fc", num_output=1000, note="%d -> 1000" % in_c)
    net.add("prob", "softmax_loss")
    return net


def imagenet_resnet(name, description, header, depth, **block_args):
    """A MODELS entry: a 224x224x3, 1000-class ResNet-family model of RESNET_BLOCKS[depth]'s
    blocks, built by resnet(**block_args)."""
    return (name, lambda: render(name, description, header, (3, 224, 224), 1000,
                                 resnet(RESNET_BLOCKS[depth], **block_args)))

# ---- EfficientNet and MobileNet v2 (inverted-residual blocks) ---------------------------------

# (kernel, stride, repeats, expansion, channels) per stage, before scaling.
# EfficientNet-B0: timm's efficientnet.py _gen_efficientnet arch_def ('ds_r1_k3_s1_e1_c16_se0.25',
# 'ir_r2_k3_s2_e6_c24_se0.25', ...), the same as DLE's effnet_b0_layers and torchvision's.
EFFNET_STAGES = [(3, 1, 1, 1, 16), (3, 2, 2, 6, 24), (5, 2, 2, 6, 40), (3, 2, 3, 6, 80),
                 (5, 1, 3, 6, 112), (5, 2, 4, 6, 192), (3, 1, 1, 6, 320)]
# MobileNet v2: timm's _gen_mobilenet_v2 arch_def ('ds_r1_k3_s1_c16', 'ir_r2_k3_s2_e6_c24', ...),
# torchvision's inverted_residual_setting (t, c, n, s).
MOBILENETV2_STAGES = [(3, 1, 1, 1, 16), (3, 2, 2, 6, 24), (3, 2, 3, 6, 32), (3, 2, 4, 6, 64),
                      (3, 1, 3, 6, 96), (3, 2, 3, 6, 160), (3, 1, 1, 6, 320)]


def make_divisible(v, divisor=8):
    """timm's make_divisible (round_channels) and DLE's EffNetArch._scale_width: the nearest
    multiple of divisor, not less than divisor, and not more than 10% below v."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class Counter:
    """Tracks the channels and size of the image through a chain of layers, and the parameters
    and forward MACs the model file will have (core::Model::Build's rules), so that a generated
    header states them and a definition that drifts from the reference fails here."""

    def __init__(self, c, hw):
        self.c, self.hw, self.params, self.macs = c, hw, 0, 0

    def conv(self, out_c, k, stride=1, groups=1, bias=False, c=None, hw=None):
        c = self.c if c is None else c
        hw = self.hw if hw is None else hw
        out_hw = (hw + 2 * ((k - 1) // 2) - k) // stride + 1
        w = out_c * (c // groups) * k * k
        self.params += w + (out_c if bias else 0)
        self.macs += w * out_hw * out_hw
        return out_c, out_hw

    def bn(self, c):
        self.params += 2 * c


def timm_block(block):
    """One of timm's block strings (_efficientnet_builder.py _decode_block_str), of the types
    mbconv_net() builds: 'ds' (DepthwiseSeparableConv) or 'ir' (InvertedResidual), with r
    (repeats), k (kernel), s (stride), e (expansion, 1 for 'ds'), c (channels), optional se
    (ratio of the block input channels) and noskip. Returns (kernel, stride, repeats, expansion,
    channels, se, noskip)."""
    ops = block.split("_")
    assert ops[0] in ("ds", "ir"), block
    o = {"e": "1", "se": "0"}
    for op in ops[1:]:
        if op == "noskip":
            o[op] = True
        else:
            key = "se" if op.startswith("se") else op[0]
            o[key] = op[len(key):]
    e = float(o["e"])
    assert e == int(e), block
    return (int(o["k"]), int(o["s"]), int(o["r"]), int(e), int(o["c"]), float(o["se"]),
            o.get("noskip", False))


def stage_rows(stage, se_ratio):
    """A stage of mbconv_net(): a (kernel, stride, repeats, expansion, channels) tuple, SE by the
    net's se_ratio, or a list of timm block strings (timm_block()), run one after the other."""
    if isinstance(stage, tuple):
        return [stage + (se_ratio, False)]
    return [timm_block(b) for b in stage]


def mbconv_net(stages, width, depth, stem, head, dropout, classes, input_hw, act, se_ratio=0.0,
               se_hidden=False):
    """EfficientNet (Tan & Le 2019) and MobileNet v2 (Sandler et al. 2018) as timm builds them
    (efficientnet.py EfficientNet, _efficientnet_blocks.py DepthwiseSeparableConv and
    InvertedResidual; DLE's MBConvBlock and torchvision's MBConv are the same graph). Stem 3x3
    conv stride 2 to make_divisible(stem x width); per stage `repeats` = ceil(repeats x depth)
    blocks of make_divisible(channels x width) outputs, the first with the stage's stride (a
    stage given as timm block strings runs each string's blocks in turn, as timm's arch_def rows
    with more than one string; see stage_rows()):

      expansion 1 (timm's DepthwiseSeparableConv): depthwise kxk, BN, act, [SE], 1x1 conv, BN;
      else (InvertedResidual): 1x1 conv to in x expansion, BN, act, depthwise kxk, BN, act,
        [SE], 1x1 conv to out, BN (no activation: the linear bottleneck);

    the residual add where the stride is 1 and in == out (and the block string has no
    `noskip`). SE (se_ratio > 0, or a block string's se): global average
    pool, 1x1 conv with bias to int(base x se_ratio) (base: the block's input channels, timm's
    and torchvision's and DLE's plain blocks; the expanded channels with se_hidden, DLE's
    widese), act, 1x1 conv with bias back, sigmoid, the branch scaled per channel. Head: 1x1
    conv to make_divisible(head x width), BN, act, global average pool, dropout, fc. Convs
    without bias, pads (k - 1) / 2. `act` is the note on each activation: the schema has `relu`
    only, which stands for SiLU and ReLU6 alike (the same shape, no parameters, one pass over
    the values); the sigmoid is written as `tanh` as in resnet(). Names are timm's modules
    (conv_stem, blocks.S.I.conv_dw, ...). Returns (net, parameters, forward MACs)."""
    net = Net()
    cnt = Counter(3, input_hw)
    stem_c = make_divisible(stem * width)
    hw0 = cnt.hw
    cnt.c, cnt.hw = cnt.conv(stem_c, 3, stride=2)
    net.add("conv_stem", "conv", num_output=stem_c, kernel=3, stride=2, pad=1, bias=False,
            note="%d -> %d" % (hw0, cnt.hw))
    cnt.bn(stem_c)
    net.add("bn1", "batchnorm")
    top = net.add("bn1.act", "relu", note=act)
    for s, stage in enumerate(stages):
        blocks = []
        for k, stride0, repeats, expansion, channels, se, noskip in stage_rows(stage, se_ratio):
            out_c = make_divisible(channels * width)
            n = int(math.ceil(repeats * depth))
            blocks += [(k, stride0 if i == 0 else 1, expansion, out_c, se, noskip)
                       for i in range(n)]
        for i, (k, stride, expansion, out_c, se, noskip) in enumerate(blocks):
            in_c, in_hw = cnt.c, cnt.hw
            mid = in_c * expansion
            residual = stride == 1 and in_c == out_c and not noskip
            se_c = max(1, int((mid if se_hidden else in_c) * se)) if se > 0 else 0
            p = "blocks.%d.%d." % (s, i)
            strided = {"stride": stride} if stride > 1 else {}
            net.comment("%s: %s k%d%s, %d -> %s%d%s%s" % (
                p[:-1], "inverted residual" if expansion > 1 else "depthwise separable", k,
                " stride %d" % stride if stride > 1 else "", in_c,
                "%d -> " % mid if expansion > 1 else "", out_c,
                ", SE %d" % se_c if se_c else "", ", residual" if residual else ""))
            dw_in = top
            if expansion > 1:
                cnt.conv(mid, 1)
                net.add(p + "conv_pw", "conv", bottom=top, num_output=mid, kernel=1, bias=False)
                cnt.bn(mid)
                net.add(p + "bn1", "batchnorm")
                dw_in = net.add(p + "bn1.act", "relu", note=act)
            dw_bn = "bn2" if expansion > 1 else "bn1"
            _, out_hw = cnt.conv(mid, k, stride=stride, groups=mid, c=mid)
            net.add(p + "conv_dw", "conv", bottom=dw_in, num_output=mid, kernel=k, **strided,
                    pad=(k - 1) // 2, groups=mid, bias=False,
                    note="%d -> %d" % (in_hw, out_hw) if stride > 1 else None)
            cnt.bn(mid)
            net.add(p + dw_bn, "batchnorm")
            branch = net.add(p + dw_bn + ".act", "relu", note=act)
            if se_c:
                net.add(p + "se.pool", "pool", method="avg", **{"global": True})
                cnt.conv(se_c, 1, bias=True, c=mid, hw=1)
                net.add(p + "se.conv_reduce", "conv", num_output=se_c, kernel=1)
                net.add(p + "se.act", "relu", note=act)
                cnt.conv(mid, 1, bias=True, c=se_c, hw=1)
                net.add(p + "se.conv_expand", "conv", num_output=mid, kernel=1)
                gate = net.add(p + "se.gate", "tanh", note="sigmoid")
                branch = net.add(p + "se.scale", "mul", bottom=[branch, gate])
            cnt.conv(out_c, 1, c=mid, hw=out_hw)
            net.add(p + ("conv_pwl" if expansion > 1 else "conv_pw"), "conv", bottom=branch,
                    num_output=out_c, kernel=1, bias=False)
            cnt.bn(out_c)
            last = net.add(p + ("bn3" if expansion > 1 else "bn2"), "batchnorm")
            top = net.add(p + "add", "add", bottom=[top, last]) if residual else last
            cnt.c, cnt.hw = out_c, out_hw
    head_c = make_divisible(head * width)
    cnt.conv(head_c, 1)
    net.add("conv_head", "conv", bottom=top, num_output=head_c, kernel=1, bias=False)
    cnt.bn(head_c)
    net.add("bn2", "batchnorm")
    net.add("bn2.act", "relu", note=act)
    net.add("global_pool", "pool", method="avg", **{"global": True},
            note="%d -> 1" % cnt.hw)
    net.add("dropout", "dropout", ratio=dropout)
    cnt.params += head_c * classes + classes
    cnt.macs += head_c * classes
    net.add("classifier", "fc", num_output=classes, note="%d -> %d" % (head_c, classes))
    net.add("loss", "softmax_loss")
    return net, cnt.params, cnt.macs


def mbconv_model(name, description, header, size, expect_params, **args):
    """A MODELS entry: a size x size x 3, 1000-class mbconv_net(**args). header: paragraphs,
    wrapped here, then a line with the parameters and MACs counted by mbconv_net(); the count
    must be the reference's (expect_params)."""
    def make():
        net, params, macs = mbconv_net(classes=1000, input_hw=size, **args)
        if params != expect_params:
            raise SystemExit("%s: %d parameters, the reference has %d" % (
                name, params, expect_params))
        paragraphs = header + ["%s parameters, %s forward MACs per image (%.3f G) at %dx%d." % (
            "{:,}".format(params), "{:,}".format(macs), macs / 1e9, size, size)]
        lines = [line for p in paragraphs for line in textwrap.wrap(p, 94, break_on_hyphens=False)]
        return render(name, description, lines, (3, size, size), 1000, net)
    return (name, make)


EFFNET_STANDINS = (
    "Stand-ins (the schema has neither SiLU nor sigmoid): SiLU is written as `relu` with a "
    "trailing `# SiLU`, the SE gate's sigmoid as `tanh` with `# sigmoid`: the same shapes, no "
    "parameters, element-wise. Stochastic depth (drop path) has no layer: no parameters, and the "
    "simulator prices every block as taken.")


def timm_efficientnet(variant, width, depth, size, dropout, params, resolution):
    name = "efficientnet_" + variant
    return mbconv_model(
        name, "EfficientNet-%s (timm %s), %dx%dx3" % (variant.upper(), name, size, size),
        ["EfficientNet-%s (Tan & Le 2019) as timm builds it (timm/models/efficientnet.py %s -> "
         "_gen_efficientnet(channel_multiplier=%s, depth_multiplier=%s)); torchvision's %s and "
         "DeepLearningExamples' efficientnet-%s are the same graph and count. MBConv blocks "
         "(depthwise conv, SE squeezed to int(block input channels x 0.25) with SiLU, batch norm "
         "after every conv, convs without bias), channels make_divisible(c x %s, 8), repeats "
         "ceil(r x %s); stem 3x3 conv to %d, stride 2; head 1x1 conv to %d, global average pool, "
         "dropout %s (the paper's), fc 1000. See the generator's mbconv_net()."
         % (variant.upper(), name, width, depth, name, variant, width, depth,
            make_divisible(32 * width), make_divisible(1280 * width), dropout),
         resolution, EFFNET_STANDINS],
        size, params, stages=EFFNET_STAGES, width=width, depth=depth, stem=32, head=1280,
        dropout=dropout, act="SiLU", se_ratio=0.25)


DLE_EFFNET = ("NVIDIA DeepLearningExamples (PyTorch/Classification/ConvNets/image_classification/"
              "models/efficientnet.py @ 729963dd")

DLE_VS_TIMM = (
    "DLE's plain EfficientNet is timm's and torchvision's graph: the same stem, widths "
    "(_scale_width = make_divisible), depths (ceil), head width (feature_channels scaled like "
    "timm's round_chs_fn(1280)), SE squeezed from the block input channels with the block's "
    "activation (SiLU) and a sigmoid gate; the same count for B0 to B4 (checked by building "
    "DLE's modules). It differs in what costs nothing here: the SE's two layers are nn.Linear on "
    "the channel means (timm: 1x1 convs with bias; the same parameters and MACs), batch norm eps "
    "1e-3 and momentum 0.01, and for B4 stochastic depth (survival_prob 0.8).")


def dle_efficientnet(variant, width, depth, size, dropout, params, widese):
    dle = "efficientnet-%s%s" % ("widese-" if widese else "", variant)
    name = dle.replace("-", "_")
    if widese:
        what = [
            "EfficientNet-WideSE-%s as %s, architectures['%s']: widese_mbconv, MBConvBlock with "
            "squeeze_hidden=True) builds it: efficientnet_%s.yaml with every SE squeezed to "
            "int(expanded "
            "channels x 0.25) instead of int(block input channels x 0.25), six times wider in the "
            "expansion-6 blocks (the expansion-1 blocks are unchanged). Otherwise DLE's "
            "EfficientNet-%s: stem %d, width %s, depth %s (ceil), head 1x1 conv to %d, dropout %s, "
            "fc 1000, image_size %d; SE with the block's activation (SiLU) in the squeeze and a "
            "sigmoid on the excite, its nn.Linear layers written as 1x1 convs with bias on the "
            "pooled 1x1 image. The count is that of DLE's module (sum of p.numel())."
            % (variant.upper(), DLE_EFFNET, dle, variant, variant.upper(),
               make_divisible(32 * width), width, depth, make_divisible(1280 * width), dropout,
               size)]
    else:
        what = [
            "EfficientNet-%s (the paper's B4: width 1.4, depth 1.8, 380x380) as %s, "
            "architectures['%s'], image_size %d) and timm's efficientnet_%s "
            "(_gen_efficientnet(channel_multiplier=%s, depth_multiplier=%s)) and torchvision's "
            "build it: stem 3x3 conv to %d, stride 2, MBConv blocks, head 1x1 conv to %d, global "
            "average pool, dropout %s, fc 1000. timm's efficientnet_b4.ra2_in1k runs at 320 (test "
            "384); this file at DLE's and the paper's %d. See the generator's mbconv_net()."
            % (variant.upper(), DLE_EFFNET, dle, size, variant, width, depth,
               make_divisible(32 * width), make_divisible(1280 * width), dropout, size)]
    return mbconv_model(
        name, "EfficientNet-%s%s (DeepLearningExamples %s), %dx%dx3" % (
            "WideSE-" if widese else "", variant.upper(), dle, size, size),
        what + [DLE_VS_TIMM, EFFNET_STANDINS],
        size, params, stages=EFFNET_STAGES, width=width, depth=depth, stem=32, head=1280,
        dropout=dropout, act="SiLU", se_ratio=0.25, se_hidden=widese)


# The stand-ins the schema needs (it has no ReLU6 or sigmoid), as the generated headers say them.
RELU6_STANDIN = ("Stand-in: ReLU6 is written as `relu` with a trailing `# ReLU6` (the schema "
                 "has no ReLU6; the same shape, no parameters, element-wise).")
SIGMOID_STANDIN = ("Stand-in: the SE gate's sigmoid is written as `tanh` with `# sigmoid` (the "
                   "schema has no sigmoid; the same shape, no parameters, element-wise).")

EFFICIENTNET_MODELS = [
    timm_efficientnet("b0", 1.0, 1.0, 224, 0.2, 5_288_548,
                      "224x224: timm's input_size for efficientnet_b0 and the paper's."),
    timm_efficientnet("b1", 1.0, 1.1, 256, 0.2, 7_794_184,
                      "256x256: train_img_size of timm's published train benchmarks of "
                      "efficientnet_b1 (results/benchmark-train-amp-*-rtx3090.csv) and the "
                      "test_input_size of efficientnet_b1.ft_in1k (its input_size 224; the "
                      "paper's 240)."),
    timm_efficientnet("b2", 1.1, 1.2, 288, 0.3, 9_109_994,
                      "288x288: train_img_size of timm's published train benchmarks of "
                      "efficientnet_b2 (results/benchmark-train-amp-*-rtx3090.csv) and the "
                      "test_input_size of efficientnet_b2.ra_in1k (its input_size 256; the "
                      "paper's 260)."),
    timm_efficientnet("b3", 1.2, 1.4, 320, 0.3, 12_233_232,
                      "320x320: train_img_size of timm's published train benchmarks of "
                      "efficientnet_b3 (results/benchmark-train-amp-*-rtx3090.csv) and the "
                      "test_input_size of efficientnet_b3.ra2_in1k (its input_size 288; the "
                      "paper's 300)."),
    dle_efficientnet("b4", 1.4, 1.8, 380, 0.4, 19_341_616, widese=False),
    dle_efficientnet("b0", 1.0, 1.0, 224, 0.2, 8_423_848, widese=True),
    dle_efficientnet("b4", 1.4, 1.8, 380, 0.4, 34_927_246, widese=True),
    mbconv_model(
        "mobilenetv2_100",
        "MobileNet v2 1.0 (timm mobilenetv2_100, torchvision mobilenet_v2), 224x224x3",
        ["MobileNet v2, width 1.0 (Sandler et al. 2018), as timm's mobilenetv2_100 "
         "(timm/models/efficientnet.py _gen_mobilenet_v2) and torchvision's mobilenet_v2 build "
         "it (the same graph and count): stem 3x3 conv to 32, stride 2; inverted residuals (1x1 "
         "expansion x6, depthwise 3x3, linear 1x1 projection; the first block depthwise "
         "separable, without expansion), batch norm after every conv, convs without bias, no SE; "
         "the residual add where the stride is 1 and in == out; head 1x1 conv to 1280, global "
         "average pool, dropout 0.2 (torchvision's), fc 1000. 224x224 (timm's input_size). See "
         "the generator's mbconv_net().",
         RELU6_STANDIN],
        224, 3_504_872, stages=MOBILENETV2_STAGES, width=1.0, depth=1.0, stem=32, head=1280,
        dropout=0.2, act="ReLU6"),
]


# ---- Checked models: the generator counts them and refuses a count that is not the reference's --

def wrap_header(paragraphs):
    return [line for p in paragraphs for line in textwrap.wrap(p, 94, break_on_hyphens=False)]


def checked_model(name, description, header, expect_params, build, size=224):
    """A MODELS entry: a size x size x 3, 1000-class model built by build() (a Net given the
    input shape, which counts it). header: paragraphs, wrapped here, then a line with the
    parameters and MACs counted; the count must be the reference's (expect_params)."""
    def make():
        net = build()
        if net.params != expect_params:
            raise SystemExit("%s: %d parameters, the reference has %d" % (
                name, net.params, expect_params))
        paragraphs = header + ["%s parameters, %s forward MACs per image (%.3f G) at %dx%d." % (
            "{:,}".format(net.params), "{:,}".format(net.macs), net.macs / 1e9, size, size)]
        return render(name, description, wrap_header(paragraphs), (3, size, size), 1000, net)
    return (name, make)


def timm_resnet(name, description, header, expect_params, depth, **block_args):
    """A checked_model of resnet(RESNET_BLOCKS[depth], **block_args)."""
    return checked_model(name, description, header, expect_params,
                         lambda: resnet(RESNET_BLOCKS[depth], **block_args))


RESNET_D = (
    "timm's ResNet-D (resnet.py ResNet(stem_type='deep', stem_width=32, avg_down=True); the "
    "'D' variant of Bag of Tricks, He et al. 2019): stem of three 3x3 convs, 3 -> 32 (stride 2) "
    "-> 32 -> 64, batch norm and ReLU after each, then the 3x3 max pool, stride 2, pad 1; every "
    "projection shortcut is a 2x2 average pool, stride 2 (ceil_mode=True, "
    "count_include_pad=False; none where the stride is 1, the first stage's) followed by a 1x1 "
    "conv with stride 1 and a batch norm (downsample_avg). Otherwise torchvision's ResNet: "
    "convs without bias, batch norm after every conv, the stride on the first 3x3 conv of a "
    "stage, global average pool, fc 1000. torchvision has no ResNet-D. See the generator's "
    "resnet() (deep_stem, avg_down).")


# ---- DenseNet (Huang et al. 2017; DenseNet-BC as torchvision and timm build it) -----------------

DENSENET_BLOCKS = {
    "densenet121": (6, 12, 24, 16),
    "densenet169": (6, 12, 32, 32),
}


def densenet(blocks, growth=32, bn_size=4, init=64):
    """torchvision's DenseNet (densenet.py, memory_efficient=False) and timm's (densenet.py,
    the same graph and count): stem 7x7 conv stride 2 to `init` channels, batch norm, ReLU, 3x3
    max pool stride 2 pad 1; dense blocks of layers BN, ReLU, 1x1 conv to bn_size x growth, BN,
    ReLU, 3x3 conv to growth, each layer reading the concatenation of the block input and every
    earlier layer's new features (torch.cat(prev_features, 1) in each _DenseLayer: one `concat`
    per layer, from the block input and all earlier layers' conv2; the first layer reads the block
    input itself: a one-input cat is a copy, folded away as the ONNX import does), the block's
    output the concatenation of its input and all its layers' new features (_DenseBlock's last
    torch.cat); transitions BN, ReLU, 1x1 conv halving the channels, 2x2 average pool stride 2;
    then BN (norm5), ReLU, global average pool, fc 1000. Convs without bias. Names are
    torchvision's modules without the `features.` prefix."""
    net = Net((3, 224, 224))
    net.add("conv0", "conv", num_output=init, kernel=7, stride=2, pad=3, bias=False,
            note="224 -> 112")
    net.add("norm0", "batchnorm")
    net.add("relu0", "relu")
    top = net.add("pool0", "pool", method="max", kernel=3, stride=2, pad=1, round="floor",
                  note="112 -> 56")
    for b, n in enumerate(blocks, start=1):
        p = "denseblock%d." % b
        c_in, hw = net.shape(top)[0], net.shape(top)[1]
        net.comment("denseblock%d: %d layers at %dx%d, %d -> %d channels (growth %d)" % (
            b, n, hw, hw, c_in, c_in + n * growth, growth))
        feats = [top]
        for i in range(1, n + 1):
            q = p + "denselayer%d." % i
            if len(feats) > 1:
                x = net.add(q + "cat", "concat", bottom=feats,
                            note="%d channels" % (c_in + (i - 1) * growth))
            else:
                x = top
            net.add(q + "norm1", "batchnorm", bottom=x)
            net.add(q + "relu1", "relu")
            net.add(q + "conv1", "conv", num_output=bn_size * growth, kernel=1, bias=False)
            net.add(q + "norm2", "batchnorm")
            net.add(q + "relu2", "relu")
            feats.append(net.add(q + "conv2", "conv", num_output=growth, kernel=3, pad=1,
                                 bias=False))
        c_out = c_in + n * growth
        top = net.add(p + "cat", "concat", bottom=feats, note="%d channels" % c_out)
        if b < len(blocks):
            t = "transition%d." % b
            net.comment("transition%d: %d -> %d channels, %d -> %d" % (
                b, c_out, c_out // 2, hw, hw // 2))
            net.add(t + "norm", "batchnorm")
            net.add(t + "relu", "relu")
            net.add(t + "conv", "conv", num_output=c_out // 2, kernel=1, bias=False)
            top = net.add(t + "pool", "pool", method="avg", kernel=2, stride=2, round="floor")
    net.add("norm5", "batchnorm")
    net.add("relu5", "relu")
    net.add("global_pool", "pool", method="avg", **{"global": True},
            note="%d -> 1" % net.shape(top)[1])
    net.add("classifier", "fc", num_output=1000, note="%d -> 1000" % net.shape("norm5")[0])
    net.add("loss", "softmax_loss")
    return net


def timm_densenet(name, params):
    blocks = DENSENET_BLOCKS[name]
    depth = name[len("densenet"):]
    return checked_model(
        name, "DenseNet-%s (timm %s, torchvision %s), 224x224x3" % (depth, name, name),
        ["DenseNet-%s (Huang et al. 2017), DenseNet-BC as timm builds it (timm/models/densenet.py "
         "%s: DenseNet(growth_rate=32, block_config=%s), bn_size 4, 64 initial features) and "
         "torchvision's %s (the same graph and count, memory_efficient=False): stem 7x7 conv "
         "stride 2, batch norm, ReLU, 3x3 max pool; dense blocks of %s layers (BN, ReLU, 1x1 "
         "conv to 128, BN, ReLU, 3x3 conv to 32), each layer reading the concatenation of its "
         "block's input and every earlier layer's 32 new channels (one `concat` per layer, as "
         "torchvision's torch.cat(prev_features, 1); the first layer reads the block input "
         "itself), each block's output the concatenation of all of them; transitions BN, ReLU, "
         "1x1 conv halving the channels, 2x2 average pool; then BN, ReLU, global average pool, "
         "fc 1000. Convs without bias. 224x224 (timm's input_size). See the generator's "
         "densenet()."
         % (depth, name, str(blocks), name, ", ".join(str(b) for b in blocks))],
        params, lambda: densenet(blocks))


# ---- RegNet (Radosavovic et al. 2020; timm's regnet.py = torchvision's regnet.py) -------------

# timm's model_cfgs (regnet.py RegNetCfg / _mcfg): depth, w0, wa, wm, group width, SE ratio; the
# same as torchvision's regnet_x_1_6gf, regnet_x_3_2gf, regnet_y_1_6gf BlockParams.
REGNET_CFGS = {
    "regnetx_016": (18, 80, 34.01, 2.25, 24, 0.0),
    "regnetx_032": (25, 88, 26.31, 2.25, 48, 0.0),
    "regnety_016": (27, 48, 20.71, 2.65, 24, 0.25),
}


def regnet_stages(depth, w0, wa, wm, group_w, quant=8):
    """timm's generate_regnet and adjust_widths_groups_comp (bottleneck ratio 1): block j's width
    w0 x wm^round(log((j x wa + w0) / w0) / log(wm)), rounded to a multiple of quant; blocks of
    equal width form a stage; each stage's group width min(group_w, width) and its width rounded
    to a multiple of the group width. Returns [(width, blocks, group width)] per stage."""
    widths = []
    for j in range(depth):
        e = round(math.log((j * wa + w0) / w0) / math.log(wm))
        widths.append(int(round(w0 * wm ** e / quant) * quant))
    stages = []
    for w in sorted(set(widths)):
        g = min(group_w, w)
        stages.append((int(round(w / g) * g), widths.count(w), g))
    return stages


def regnet(depth, w0, wa, wm, group_w, se_ratio, stem=32):
    """timm's RegNet (regnet.py RegNet, Bottleneck; torchvision's RegNet, ResBottleneckBlock, the
    same graph): stem 3x3 conv stride 2 to 32, BN, ReLU; stages of regnet_stages(), each block
    1x1 conv, BN, ReLU, 3x3 conv in width / group width groups (stride 2 in a stage's first
    block), BN, ReLU, [SE: global average pool, 1x1 conv with bias to int(round(block input
    channels x se_ratio)), ReLU, 1x1 conv with bias back, sigmoid, the branch scaled per
    channel], 1x1 conv, BN; the shortcut a 1x1 conv (with the stride) and BN where the shape
    changes; the residual add, ReLU. Then global average pool, fc 1000. Convs without bias but
    the SE's; the sigmoid written as `tanh` (as in resnet()). Names are timm's modules."""
    net = Net((3, 224, 224))
    net.add("stem.conv", "conv", num_output=stem, kernel=3, stride=2, pad=1, bias=False,
            note="224 -> 112")
    net.add("stem.bn", "batchnorm")
    top = net.add("stem.act", "relu")
    for s, (width, blocks, gw) in enumerate(regnet_stages(depth, w0, wa, wm, group_w), start=1):
        for b in range(1, blocks + 1):
            stride = 2 if b == 1 else 1
            strided = {"stride": stride} if stride > 1 else {}
            in_c, hw = net.shape(top)[0], net.shape(top)[1]
            se_c = int(round(in_c * se_ratio)) if se_ratio else 0
            p = "s%d.b%d." % (s, b)
            net.comment("%s: bottleneck %d -> %d, 3x3 in %d groups of %d%s%s%s" % (
                p[:-1], in_c, width, width // gw, gw,
                ", stride 2 (%d -> %d)" % (hw, hw // 2) if stride > 1 else "",
                ", SE %d" % se_c if se_c else "",
                ", projection shortcut" if stride > 1 or in_c != width else ""))
            net.add(p + "conv1.conv", "conv", bottom=top, num_output=width, kernel=1, bias=False)
            net.add(p + "conv1.bn", "batchnorm")
            net.add(p + "conv1.act", "relu")
            net.add(p + "conv2.conv", "conv", num_output=width, kernel=3, **strided, pad=1,
                    groups=width // gw, bias=False)
            net.add(p + "conv2.bn", "batchnorm")
            branch = net.add(p + "conv2.act", "relu")
            if se_c:
                net.add(p + "se.pool", "pool", method="avg", **{"global": True})
                net.add(p + "se.fc1", "conv", num_output=se_c, kernel=1)
                net.add(p + "se.act", "relu")
                net.add(p + "se.fc2", "conv", num_output=width, kernel=1)
                gate = net.add(p + "se.gate", "tanh", note="sigmoid")
                net.add(p + "se.scale", "mul", bottom=[branch, gate])
            net.add(p + "conv3.conv", "conv", num_output=width, kernel=1, bias=False)
            branch = net.add(p + "conv3.bn", "batchnorm")
            shortcut = top
            if stride > 1 or in_c != width:
                net.add(p + "downsample.conv", "conv", bottom=top, num_output=width, kernel=1,
                        **strided, bias=False)
                shortcut = net.add(p + "downsample.bn", "batchnorm")
            net.add(p + "add", "add", bottom=[branch, shortcut])
            top = net.add(p + "act3", "relu")
    net.add("head.global_pool", "pool", method="avg", **{"global": True},
            note="%d -> 1" % net.shape(top)[1])
    net.add("head.fc", "fc", num_output=1000, note="%d -> 1000" % net.shape(top)[0])
    net.add("loss", "softmax_loss")
    return net


def timm_regnet(name, torchvision_name, title, params):
    cfg = REGNET_CFGS[name]
    depth, w0, wa, wm, group_w, se_ratio = cfg
    stages = regnet_stages(depth, w0, wa, wm, group_w)
    assert all(st[2] == group_w for st in stages), stages
    return checked_model(
        name, "%s (timm %s, torchvision %s), 224x224x3" % (title, name, torchvision_name),
        ["%s (Radosavovic et al. 2020) as timm builds it (timm/models/regnet.py %s: depth %d, "
         "w0 %d, wa %s, wm %s, group width %d%s) and torchvision's %s (the same graph and "
         "count): widths by generate_regnet and adjust_widths_groups_comp (bottleneck ratio 1), "
         "stages of %s blocks %s channels wide, the 3x3 convs in groups of %d channels (%s "
         "groups); stem 3x3 conv stride 2 to 32, BN, "
         "ReLU; blocks of 1x1 conv, BN, ReLU, grouped 3x3 conv (stride 2 in a stage's first "
         "block), BN, ReLU, %s1x1 conv, BN, the residual add (a 1x1 conv and BN on the shortcut "
         "where the shape changes), ReLU; global average pool, fc 1000. Convs without bias%s. "
         "224x224 (timm's input_size). See the generator's regnet()."
         % (title, name, depth, w0, wa, wm, group_w, ", SE %s" % se_ratio if se_ratio else "",
            torchvision_name, ", ".join(str(st[1]) for st in stages),
            ", ".join(str(st[0]) for st in stages), stages[0][2],
            ", ".join(str(st[0] // st[2]) for st in stages),
            "SE (global average pool, 1x1 conv with bias to round(block input channels x %s), "
            "ReLU, 1x1 conv with bias back, sigmoid, the branch scaled per channel), " % se_ratio
            if se_ratio else "",
            " but the SE's" if se_ratio else "")]
        + ([SIGMOID_STANDIN] if se_ratio else []),
        params, lambda: regnet(*cfg))


# ---- RepVGG (Ding et al. 2021) in its training form, as timm's byobnet.py builds it -------------

# timm's model_cfgs (byobnet.py repvgg_*: _rep_vgg_bcfg(d, wf), stem_type='rep', stem_chs=64):
# blocks per stage and width factors of (64, 128, 256, 512).
REPVGG_CFGS = {
    "repvgg_a2": ((2, 4, 14, 1), (1.5, 1.5, 1.5, 2.75)),
    "repvgg_b0": ((4, 6, 16, 1), (1.0, 1.0, 1.0, 2.5)),
    "repvgg_b1": ((4, 6, 16, 1), (2.0, 2.0, 2.0, 4.0)),
}


def rep_block(net, p, top, out_c, stride):
    """timm's RepVggBlock (byobnet.py, inference_mode=False): where in == out channels and the
    stride is 1, a batch norm of the input (`identity`); a 1x1 conv and BN (`conv_1x1`) and a 3x3
    conv and BN (`conv_kxk`), both with the block's stride; forward: conv_1x1(x) + conv_kxk(x),
    then += identity (two adds, as timm's forward runs them), ReLU. Convs without bias, in the
    order of timm's forward."""
    in_c, hw = net.shape(top)[0], net.shape(top)[1]
    ident = in_c == out_c and stride == 1
    strided = {"stride": stride} if stride > 1 else {}
    net.comment("%s: rep %d -> %d%s%s" % (
        p[:-1], in_c, out_c, ", stride %d (%d -> %d)" % (stride, hw, hw // stride)
        if stride > 1 else "", ", identity BN" if ident else ""))
    def source():  # the block input; the model's first layer reads data without saying so
        return top if net.last is not None else None
    if ident:
        identity = net.add(p + "identity", "batchnorm", bottom=source())
    net.add(p + "conv_1x1.conv", "conv", bottom=source(), num_output=out_c, kernel=1,
            **strided, bias=False)
    one = net.add(p + "conv_1x1.bn", "batchnorm")
    net.add(p + "conv_kxk.conv", "conv", bottom=source(), num_output=out_c, kernel=3,
            **strided, pad=1, bias=False)
    kxk = net.add(p + "conv_kxk.bn", "batchnorm")
    x = net.add(p + "add", "add", bottom=[one, kxk])
    if ident:
        x = net.add(p + "add_identity", "add", bottom=[x, identity])
    return net.add(p + "act", "relu")


def repvgg_widths(wf):
    return [make_divisible(c * f) for c, f in zip((64, 128, 256, 512), wf)]


def repvgg(depths, wf, stem=64):
    """timm's RepVGG as trained (byobnet.py ByobNet with _rep_vgg_bcfg blocks of type 'rep'):
    stem a rep_block() to `stem` channels, stride 2; four stages of rep_block()s, widths
    make_divisible(c x wf) of (64, 128, 256, 512), each stage's first block with stride 2; no
    final conv (num_features 0); head global average pool, fc 1000. Names are timm's modules."""
    net = Net((3, 224, 224))
    top = rep_block(net, "stem.", "data", stem, 2)
    for s, (n, out_c) in enumerate(zip(depths, repvgg_widths(wf))):
        for b in range(n):
            top = rep_block(net, "stages.%d.%d." % (s, b), top, out_c, 2 if b == 0 else 1)
    net.add("head.global_pool", "pool", method="avg", **{"global": True},
            note="%d -> 1" % net.shape(top)[1])
    net.add("head.fc", "fc", num_output=1000, note="%d -> 1000" % net.shape(top)[0])
    net.add("loss", "softmax_loss")
    return net


def timm_repvgg(name, params):
    depths, wf = REPVGG_CFGS[name]
    title = "RepVGG-" + name.split("_")[1].upper()
    return checked_model(
        name, "%s, training form (timm %s), 224x224x3" % (title, name),
        ["%s (Ding et al. 2021) in its training form, as timm builds it (timm/models/byobnet.py "
         "%s: ByoModelCfg(blocks=_rep_vgg_bcfg(d=%s, wf=%s), stem_type='rep', stem_chs=64)), "
         "not the deployed one (each block reparameterized into one 3x3 conv): timm's "
         "benchmarks train this form. Every block, the stem's too, is timm's RepVggBlock: a 3x3 "
         "conv and BN and a 1x1 conv and BN, both with the block's stride, and where in == out "
         "channels and the stride is 1 a batch norm of the input (the identity branch); "
         "conv_1x1 + conv_kxk, then += identity (two adds), ReLU. Stem to 64 channels, stride 2 "
         "(timm's stem_chs 64; the paper's min(64, 64 x a) is 64 too); stages of %s blocks, %s "
         "channels (make_divisible(c x wf) of 64, 128, 256, 512), each stage's first block "
         "with stride 2; global average pool, fc 1000. Convs without bias. 224x224 (timm's "
         "input_size). See the generator's repvgg()."
         % (title, name, str(depths), str(wf), ", ".join(str(d) for d in depths),
            ", ".join(str(c) for c in repvgg_widths(wf)))],
        params, lambda: repvgg(depths, wf))


def timm_vgg(name, config, params):
    bn = name.endswith("_bn")
    depth = name[3:].split("_")[0]
    stages = VGG_STAGES["vgg" + depth]
    return checked_model(
        name, "VGG-%s%s (configuration %s, timm %s), 224x224x3" % (
            depth, " with batch norm" if bn else "", config, name),
        ["VGG-%s%s, configuration %s of Simonyan & Zisserman (2015), as timm builds it "
         "(timm/models/vgg.py %s: cfgs['vgg%s']%s) and torchvision's %s (the same count): "
         "stages of %s 3x3 convs with bias (64, 128, 256, 512, 512 channels), %seach followed by "
         "a ReLU, a 2x2 max pool after each stage; then timm's ConvMlp (a 7x7 conv 512 -> 4096 "
         "on the 7x7 map and a 1x1 conv 4096 -> 4096, with bias, each followed by a ReLU) and "
         "fc 1000 on the pooled 1x1 map, written as fc6, fc7 and fc8, as vgg16.yaml (the same "
         "parameters and MACs). Dropout as vgg16.yaml (torchvision's, 0.5 after fc6 and fc7; "
         "timm's after the 7x7 conv and before the fc, at its drop_rate, 0 by default): no "
         "parameters. 224x224 (timm's input_size). See the generator's vgg()."
         % (depth, " with batch norm" if bn else "", config, name, depth,
            ", norm_layer=nn.BatchNorm2d" if bn else "", name,
            ", ".join(str(n) for n in stages),
            "a batch norm after every conv (nn.Conv2d, nn.BatchNorm2d, ReLU), " if bn else "")],
        params, lambda: vgg(stages, 1000, bn=bn))


# timm's arch_def rows (efficientnet.py _gen_mnasnet_b1, _gen_mnasnet_a1, _gen_spnasnet):
# each a list of block strings (see timm_block()).
MNASNET_B1 = [["ds_r1_k3_s1_c16_noskip"], ["ir_r3_k3_s2_e3_c24"], ["ir_r3_k5_s2_e3_c40"],
              ["ir_r3_k5_s2_e6_c80"], ["ir_r2_k3_s1_e6_c96"], ["ir_r4_k5_s2_e6_c192"],
              ["ir_r1_k3_s1_e6_c320_noskip"]]
MNASNET_A1 = [["ds_r1_k3_s1_e1_c16_noskip"], ["ir_r2_k3_s2_e6_c24"],
              ["ir_r3_k5_s2_e3_c40_se0.25"], ["ir_r4_k3_s2_e6_c80"],
              ["ir_r2_k3_s1_e6_c112_se0.25"], ["ir_r3_k5_s2_e6_c160_se0.25"],
              ["ir_r1_k3_s1_e6_c320"]]
SPNASNET = [["ds_r1_k3_s1_c16_noskip"], ["ir_r3_k3_s2_e3_c24"],
            ["ir_r1_k5_s2_e6_c40", "ir_r3_k3_s1_e3_c40"],
            ["ir_r1_k5_s2_e6_c80", "ir_r3_k3_s1_e3_c80"],
            ["ir_r1_k5_s1_e6_c96", "ir_r3_k5_s1_e3_c96"],
            ["ir_r4_k5_s2_e6_c192"], ["ir_r1_k3_s1_e6_c320_noskip"]]


def arch_text(arch):
    return "; ".join(", ".join(row) for row in arch)


TIMM_MOBILE = (
    "timm's EfficientNet class with ReLU (its default act_layer): stem 3x3 conv to 32, stride "
    "2, BN, ReLU; depthwise separable and inverted residual blocks (1x1 expansion, depthwise "
    "kxk, linear 1x1 projection), batch norm after every conv, convs without bias, the residual "
    "add where the stride is 1, in == out and the string has no noskip; head 1x1 conv to 1280, "
    "BN, ReLU, global average pool, dropout 0.2 (torchvision's MNASNet's and "
    "mobilenetv2_100.yaml's; timm's drop_rate defaults to 0: no parameters), fc 1000. 224x224 (timm's input_size). See "
    "the generator's mbconv_net().")


FAMILY2_MODELS = [
    timm_vgg("vgg13", "B", 133_047_848),
    timm_vgg("vgg11_bn", "A", 132_868_840),
    timm_vgg("vgg16_bn", "D", 138_365_992),
    timm_resnet(
        "seresnet50", "SE-ResNet-50 (timm), 224x224x3",
        ["SE-ResNet-50 as timm builds it (resnet.py seresnet50: ResNet(Bottleneck, (3, 4, 6, 3), "
         "block_args=dict(attn_layer='se'))): resnet50.yaml (v1.5 strides) with timm's SEModule "
         "on every bottleneck's last batch norm, before the residual add: global average pool, "
         "1x1 conv with bias to channels / 16 (rd_ratio 1/16, make_divisible 8: 16, 32, 64, 128), "
         "ReLU, 1x1 conv with bias back, sigmoid, the branch scaled per channel; "
         "seresnext50_32x4d.yaml without the groups and with the 64-wide bottlenecks. See the "
         "generator's resnet().",
         SIGMOID_STANDIN],
        28_088_024, "resnet50", se_ratio=16),
    timm_repvgg("repvgg_a2", 28_210_600),
    timm_repvgg("repvgg_b0", 15_817_960),
    timm_repvgg("repvgg_b1", 57_415_016),
    mbconv_model(
        "mnasnet_100", "MnasNet-B1 1.0 (timm mnasnet_100, torchvision mnasnet1_0), 224x224x3",
        ["MnasNet-B1, width 1.0 (Tan et al. 2019; MnasNet without SE), as timm's mnasnet_100 "
         "builds it (timm/models/efficientnet.py _gen_mnasnet_b1(channel_multiplier=1.0), "
         "arch_def %s); torchvision's mnasnet1_0 is the same graph and count." % arch_text(
             MNASNET_B1), TIMM_MOBILE],
        224, 4_383_312, stages=MNASNET_B1, width=1.0, depth=1.0, stem=32, head=1280,
        dropout=0.2, act=None),
    mbconv_model(
        "semnasnet_100", "MnasNet-A1 1.0 with SE (timm semnasnet_100), 224x224x3",
        ["MnasNet-A1, width 1.0, with squeeze-and-excitation (Tan et al. 2019), as timm's "
         "semnasnet_100 builds it (timm/models/efficientnet.py _gen_mnasnet_a1("
         "channel_multiplier=1.0), arch_def %s). SE (se0.25, stages 2, 4 and 5; timm's "
         "SqueezeExcite, se_from_exp False): global average pool, 1x1 conv with bias to block "
         "input channels x 0.25 (timm: round(expanded channels x 0.25 / expansion)), ReLU (the "
         "block's activation), 1x1 conv with bias back, sigmoid, the branch scaled per channel."
         % arch_text(MNASNET_A1), TIMM_MOBILE,
         SIGMOID_STANDIN],
        224, 3_887_038, stages=MNASNET_A1, width=1.0, depth=1.0, stem=32, head=1280,
        dropout=0.2, act=None),
    mbconv_model(
        "spnasnet_100", "Single-Path NAS, Pixel 1 (timm spnasnet_100), 224x224x3",
        ["Single-Path NAS searched for the Pixel 1 (Stamoulis et al. 2019), as timm's "
         "spnasnet_100 builds it (timm/models/efficientnet.py _gen_spnasnet("
         "channel_multiplier=1.0), arch_def %s: stages 2 to 4 of two strings each, run in "
         "turn), no SE." % arch_text(SPNASNET), TIMM_MOBILE],
        224, 4_421_616, stages=SPNASNET, width=1.0, depth=1.0, stem=32, head=1280,
        dropout=0.2, act=None),
    mbconv_model(
        "mobilenetv2_140", "MobileNet v2 1.4 (timm mobilenetv2_140), 224x224x3",
        ["MobileNet v2, width 1.4 (Sandler et al. 2018), as timm's mobilenetv2_140 builds it "
         "(timm/models/efficientnet.py _gen_mobilenet_v2(channel_multiplier=1.4), fix_stem_head "
         "False): mobilenetv2_100.yaml with every width make_divisible(c x 1.4, 8): stem 48, "
         "blocks 24, 32, 48, 88, 136, 224, 448 channels (expanded x6 but the first), head 1x1 "
         "conv to max(1280, make_divisible(1280 x 1.4)) = 1792; global average pool, dropout 0.2 "
         "(as mobilenetv2_100.yaml; timm's drop_rate defaults to 0: no parameters), fc 1000. "
         "224x224 (timm's input_size). See the generator's mbconv_net().",
         RELU6_STANDIN],
        224, 6_108_776, stages=MOBILENETV2_STAGES, width=1.4, depth=1.0, stem=32, head=1280,
        dropout=0.2, act="ReLU6"),
]

FAMILY_MODELS = [
    timm_resnet(
        "wide_resnet50_2", "Wide ResNet-50-2 (timm, torchvision), 224x224x3",
        ["Wide ResNet-50-2 (Zagoruyko & Komodakis 2016, in torchvision's form) as timm's "
         "wide_resnet50_2 (resnet.py: ResNet(Bottleneck, (3, 4, 6, 3), base_width=128)) and "
         "torchvision's wide_resnet50_2 build it (the same graph and count): resnet50.yaml with "
         "every bottleneck's 1x1 and 3x3 convs twice as wide (128 -> 128 -> 256 in stage 2, "
         "1024 -> 1024 -> 2048 in stage 5), the outer widths unchanged; stride on the 3x3 conv "
         "(v1.5). See the generator's resnet()."],
        68_883_240, "resnet50", base_width=128, expansion=2),
    timm_resnet(
        "wide_resnet101_2", "Wide ResNet-101-2 (timm, torchvision), 224x224x3",
        ["Wide ResNet-101-2 as timm's wide_resnet101_2 (resnet.py: ResNet(Bottleneck, (3, 4, "
         "23, 3), base_width=128)) and torchvision's wide_resnet101_2 build it (the same graph "
         "and count): resnet101.yaml with every bottleneck's 1x1 and 3x3 convs twice as wide, "
         "as wide_resnet50_2.yaml. See the generator's resnet()."],
        126_886_696, "resnet101", base_width=128, expansion=2),
    timm_resnet(
        "resnet26", "ResNet-26 (timm), 224x224x3",
        ["ResNet-26 as timm builds it (resnet.py resnet26: ResNet(Bottleneck, (2, 2, 2, 2))): "
         "resnet50.yaml with two bottlenecks per stage; the 7x7 stem, projection shortcuts where "
         "the shape changes, stride on the 3x3 conv (v1.5). torchvision has no ResNet-26. See "
         "the generator's resnet()."],
        15_995_176, "resnet26"),
    timm_resnet(
        "resnet18d", "ResNet-18-D (timm), 224x224x3",
        ["ResNet-18-D as timm builds it (resnet.py resnet18d: ResNet(BasicBlock, (2, 2, 2, 2), "
         "stem_width=32, stem_type='deep', avg_down=True)): resnet18.yaml with the deep stem and "
         "average-pool shortcuts.", RESNET_D],
        11_708_744, "resnet18", basic=True, deep_stem=True, avg_down=True),
    timm_resnet(
        "resnet26d", "ResNet-26-D (timm), 224x224x3",
        ["ResNet-26-D as timm builds it (resnet.py resnet26d: ResNet(Bottleneck, (2, 2, 2, 2), "
         "stem_width=32, stem_type='deep', avg_down=True)): resnet26.yaml with the deep stem and "
         "average-pool shortcuts.", RESNET_D],
        16_014_408, "resnet26", deep_stem=True, avg_down=True),
    timm_resnet(
        "resnet34d", "ResNet-34-D (timm), 224x224x3",
        ["ResNet-34-D as timm builds it (resnet.py resnet34d: ResNet(BasicBlock, (3, 4, 6, 3), "
         "stem_width=32, stem_type='deep', avg_down=True)): resnet34.yaml with the deep stem and "
         "average-pool shortcuts.", RESNET_D],
        21_816_904, "resnet34", basic=True, deep_stem=True, avg_down=True),
    timm_resnet(
        "resnet50d", "ResNet-50-D (timm), 224x224x3",
        ["ResNet-50-D as timm builds it (resnet.py resnet50d: ResNet(Bottleneck, (3, 4, 6, 3), "
         "stem_width=32, stem_type='deep', avg_down=True)): resnet50.yaml with the deep stem and "
         "average-pool shortcuts.", RESNET_D],
        25_576_264, "resnet50", deep_stem=True, avg_down=True),
    timm_densenet("densenet121", 7_978_856),
    timm_densenet("densenet169", 14_149_480),
    timm_regnet("regnetx_016", "regnet_x_1_6gf", "RegNetX-1.6GF", 9_190_136),
    timm_regnet("regnetx_032", "regnet_x_3_2gf", "RegNetX-3.2GF", 15_296_552),
    timm_regnet("regnety_016", "regnet_y_1_6gf", "RegNetY-1.6GF", 11_202_430),
]


MODELS = [
    ("googlenet", lambda: render(
        "googlenet",
        "Caffe bvlc_googlenet (Inception v1), 224x224x3; auxiliary heads in group 'aux'",
        ["GoogLeNet as in Caffe models/bvlc_googlenet/train_val.prototxt (Szegedy et al. 2015).",
         "Main path: 6,998,552 parameters, 1.583 G MACs per image; with both auxiliary heads",
         "(group 'aux', leave out with --without aux): 13,378,280 parameters, 1.591 G MACs."],
        (3, 224, 224), 1000, googlenet())),
    ("vgg11", lambda: render(
        "vgg11", "VGG-11 (configuration A), 224x224x3",
        ["VGG-11, configuration A of Simonyan & Zisserman (2015) ('OxfordNet Model-A' in",
         "soumith/convnet-benchmarks). 132,863,336 parameters, 7.61 G MACs per image."],
        (3, 224, 224), 1000, vgg(VGG_STAGES["vgg11"], 1000))),
    ("vgg16", lambda: render(
        "vgg16", "VGG-16 (configuration D), 224x224x3",
        ["VGG-16, configuration D of Simonyan & Zisserman (2015).",
         "138,357,544 parameters, 15.47 G MACs per image."],
        (3, 224, 224), 1000, vgg(VGG_STAGES["vgg16"], 1000))),
    ("vgg19", lambda: render(
        "vgg19", "VGG-19 (configuration E), 224x224x3",
        ["VGG-19, configuration E of Simonyan & Zisserman (2015).",
         "143,667,240 parameters, 19.63 G MACs per image."],
        (3, 224, 224), 1000, vgg(VGG_STAGES["vgg19"], 1000))),
    ("vgg19_22k", lambda: render(
        "vgg19_22k", "VGG-19 with a 21,841-way classifier (ImageNet-22K), 224x224x3",
        ["VGG-19 (configuration E) with fc8 4096 -> 21,841 for the full ImageNet-22K, as in the",
         "Poseidon ATC'17 experiments. 229,052,817 parameters, about 19.72 G MACs per image."],
        (3, 224, 224), 21841, vgg(VGG_STAGES["vgg19"], 21841))),
    imagenet_resnet(
        "resnet18", "ResNet-18 (basic blocks), 224x224x3",
        ["ResNet-18 (He et al. 2016): basic blocks of two 3x3 convs, 2, 2, 2, 2 per stage,",
         "projection shortcuts where the shape changes, batch norm after every conv, convs",
         "without bias (as torchvision and fb.resnet.torch). 11,689,512 parameters, about 1.8 G",
         "MACs per image."],
        "resnet18", basic=True),
    imagenet_resnet(
        "resnet34", "ResNet-34 (basic blocks), 224x224x3",
        ["ResNet-34 (He et al. 2016), built like resnet18.yaml with 3, 4, 6, 3 basic blocks.",
         "21,797,672 parameters (torchvision's count), about 3.6 G MACs per image."],
        "resnet34", basic=True),
    imagenet_resnet(
        "resnet50", "ResNet-50 (bottleneck, v1.5 strides), 224x224x3",
        ["ResNet-50 (He et al. 2016) with projection shortcuts where the shape changes, batch norm",
         "with learnable scale and shift after every conv, convs without bias, stride on the 3x3",
         "conv (v1.5, as torchvision). 25,557,032 parameters, about 4.1 G MACs per image."],
        "resnet50"),
    imagenet_resnet(
        "resnet101", "ResNet-101 (bottleneck, v1.5 strides), 224x224x3",
        ["ResNet-101 (He et al. 2016), built like resnet50.yaml with 3, 4, 23, 3 blocks.",
         "44,549,160 parameters (torchvision's count), about 7.8 G MACs per image."],
        "resnet101"),
    imagenet_resnet(
        "resnext101_32x4d", "ResNeXt-101 32x4d (DeepLearningExamples), 224x224x3",
        ["ResNeXt-101 32x4d (Xie et al. 2017) as NVIDIA DeepLearningExamples builds it",
         "(PyTorch/Classification/ConvNets/image_classification/models/resnet.py @ 729963dd:",
         "layers 3, 4, 23, 3, widths 128, 256, 512, 1024, expansion 2, cardinality 32):",
         "resnet101.yaml with the 3x3 conv in 32 groups and bottlenecks twice as wide",
         "(128 -> 128 -> 256 in stage 2). 44,177,704 parameters, about 8.0 G MACs per image."],
        "resnet101", cardinality=32, base_width=128, expansion=2),
    imagenet_resnet(
        "se_resnext101_32x4d", "SE-ResNeXt-101 32x4d (DeepLearningExamples), 224x224x3",
        ["SE-ResNeXt-101 32x4d as NVIDIA DeepLearningExamples builds it (resnet.py @ 729963dd,",
         "SEBottleneck with se_squeeze=16; common.py SqueezeAndExcitation): resnext101_32x4d.yaml",
         "with a squeeze-and-excitation gate on every bottleneck's last batch norm, squeezed to 16",
         "units (a fixed 16, not channels / 16: DLE's nn.Linear(planes * expansion, 16)).",
         "DLE's forward fuses the scale with the residual add (torch.addcmul); here they are a",
         "`mul` and an `add`. The sigmoid is written as `tanh` (see the generator's resnet()).",
         "45,251,128 parameters (resnext101_32x4d's 44,177,704 and 33 C + 16 per gate of",
         "C channels), about 8.0 G MACs per image."],
        "resnet101", cardinality=32, base_width=128, expansion=2, se_units=16),
    imagenet_resnet(
        "resnext50_32x4d", "ResNeXt-50 32x4d (torchvision, timm), 224x224x3",
        ["ResNeXt-50 32x4d (Xie et al. 2017) as torchvision's resnext50_32x4d and timm's build it",
         "(Bottleneck width = planes x base_width / 64 x groups, expansion 4): resnet50.yaml with",
         "the 3x3 conv in 32 groups and bottlenecks 128 -> 128 -> 256 in stage 2.",
         "25,028,904 parameters, about 4.3 G MACs per image."],
        "resnet50", cardinality=32, base_width=128, expansion=2),
    imagenet_resnet(
        "resnext101_32x8d", "ResNeXt-101 32x8d (torchvision, timm), 224x224x3",
        ["ResNeXt-101 32x8d as torchvision's resnext101_32x8d and timm's build it: 3, 4, 23, 3",
         "blocks, the 3x3 conv in 32 groups of 8 channels, bottlenecks 256 -> 256 -> 256 in",
         "stage 2. 88,791,336 parameters, about 16.5 G MACs per image."],
        "resnet101", cardinality=32, base_width=256, expansion=1),
    imagenet_resnet(
        "resnext101_64x4d", "ResNeXt-101 64x4d (torchvision, timm), 224x224x3",
        ["ResNeXt-101 64x4d as torchvision's resnext101_64x4d and timm's build it: 3, 4, 23, 3",
         "blocks, the 3x3 conv in 64 groups of 4 channels, bottlenecks 256 -> 256 -> 256 in",
         "stage 2. 83,455,272 parameters, about 15.5 G MACs per image."],
        "resnet101", cardinality=64, base_width=256, expansion=1),
    imagenet_resnet(
        "seresnext50_32x4d", "SE-ResNeXt-50 32x4d (timm), 224x224x3",
        ["SE-ResNeXt-50 32x4d as timm builds it (resnet.py seresnext50_32x4d: block_args",
         "attn_layer='se', SEModule rd_ratio 1/16, 1x1 convs with bias, ReLU, sigmoid; the gate",
         "on the last batch norm, then the residual add): resnext50_32x4d.yaml with a gate",
         "squeezed to channels / 16. The sigmoid is written as `tanh` (see the generator's",
         "resnet()).",
         "27,559,896 parameters, about 4.3 G MACs per image."],
        "resnet50", cardinality=32, base_width=128, expansion=2, se_ratio=16),
    imagenet_resnet(
        "seresnext101_32x4d", "SE-ResNeXt-101 32x4d (timm), 224x224x3",
        ["SE-ResNeXt-101 32x4d as timm builds it (SEModule squeezed to channels / 16; not",
         "se_resnext101_32x4d.yaml, DeepLearningExamples' fixed 16 units): resnext101_32x4d.yaml",
         "with timm's gate. 48,955,416 parameters, about 8.0 G MACs per image."],
        "resnet101", cardinality=32, base_width=128, expansion=2, se_ratio=16),
    # scenarios/models/resnet152.yaml is written by hand with `repeat` blocks; this expanded
    # version is the oracle tests/config/model_loader_test.cc compares it with, layer by layer.
    ("resnet152", lambda: render(
        "resnet152", "ResNet-152 (bottleneck, v1.5 strides), 224x224x3",
        ["ResNet-152 (He et al. 2016), built like resnet50.yaml with 3, 8, 36, 3 blocks.",
         "60,192,808 parameters (torchvision's count), about 11.5 G MACs per image.",
         "The expanded form of scenarios/models/resnet152.yaml (which uses repeat blocks), kept",
         "as the oracle of the repeat expansion (tests/config/model_loader_test.cc)."],
        (3, 224, 224), 1000, resnet(RESNET_BLOCKS["resnet152"])),
     os.path.join(ROOT, "tests", "data", "models", "resnet152_generated.yaml")),
] + EFFICIENTNET_MODELS + FAMILY_MODELS + FAMILY2_MODELS


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    ap.add_argument("--out", default=MODELS_DIR, help="output folder (default: %(default)s)")
    args = ap.parse_args()
    stale = []
    for entry in MODELS:
        name, make = entry[0], entry[1]
        text = make()
        # An entry may name its own path (outside the models folder); --out moves only the others.
        path = entry[2] if len(entry) > 2 else os.path.join(args.out, name + ".yaml")
        if args.check:
            try:
                with open(path, encoding="utf-8") as f:
                    if f.read() != text:
                        stale.append(path)
            except FileNotFoundError:
                stale.append(path)
        else:
            with open(path, "w", encoding="utf-8", newline="\n") as f:
                f.write(text)
            print("wrote", os.path.relpath(path, ROOT))
    if stale:
        print("out of date (rerun scripts/gen_models.py):", " ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
