"""poseidon.torch.profile on small PyTorch models: the model file it writes loads with the
project's loader and holds PyTorch's parameters, the profile names the model file's layers, the
scenario runs in the simulator for 1 and 8 workers, and what cannot be mapped is refused naming
the module. Timings are measured (a few iterations) but never asserted: only what does not
depend on the clock is. Skipped where PyTorch is absent (Debian: python3-torch).
"""

import json
import os
import subprocess

import pytest

torch = pytest.importorskip("torch", reason="no PyTorch (apt-get install python3-torch)")
yaml = pytest.importorskip("yaml", reason="no PyYAML (apt-get install python3-yaml)")

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import poseidon  # noqa: E402
import poseidon.torch as pt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("POSEIDON_CLI") or os.path.join(ROOT, "build", "apps", "poseidon", "poseidon")
QUICK = dict(iterations=2, warmup=1)  # enough to write every file; the numbers are not checked


# --- the models -------------------------------------------------------------------------------

class Residual(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(x + self.bn(self.conv(x)))


class SmallCNN(nn.Module):
    """conv, batchnorm, relu, pool, a residual add, global pooling, linear."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 5, padding=2)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.MaxPool2d(2)
        self.block = Residual(8)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x = self.pool(self.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(self.gap(self.block(x)), 1))


CNN_TYPES = ["conv", "batchnorm", "relu", "pool", "conv", "batchnorm", "add", "relu", "pool", "fc",
             "softmax_loss"]


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.act = nn.GELU()
        self.proj = nn.Linear(4 * d, d)

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.proj(self.act(self.fc(self.ln2(x))))


class TinyTransformer(nn.Module):
    """Token embedding, learned positions, pre-LN blocks of MultiheadAttention and a GELU MLP,
    a final LayerNorm and a linear head over the vocabulary."""

    def __init__(self, vocab=64, d=16, heads=2, seq=8, blocks=2):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(1, seq, d))
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(blocks)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        return self.head(self.ln(self.blocks(self.tok(ids) + self.pos)))


TRANSFORMER_TYPES = (["embedding", "pos_embedding"] +
                     ["layernorm", "attention", "add", "layernorm", "linear", "gelu", "linear",
                      "add"] * 2 + ["layernorm", "linear", "softmax_loss"])


def lm_loss(out, target):
    return F.cross_entropy(out.flatten(0, 1), target.flatten())


def trainable(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def cnn_batch():
    torch.manual_seed(0)
    return torch.randn(4, 1, 12, 12), torch.randint(0, 10, (4,))


def lm_batch():
    torch.manual_seed(0)
    return torch.randint(0, 64, (3, 8)), torch.randint(0, 64, (3, 8))


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    torch.manual_seed(1)
    model = SmallCNN()
    x, y = cnn_batch()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    r = pt.profile(model, x, target=y, out_dir=str(tmp_path_factory.mktemp("cnn")), name="cnn",
                   **QUICK)
    return model, before, r


@pytest.fixture(scope="module")
def transformer(tmp_path_factory):
    torch.manual_seed(1)
    model = TinyTransformer()
    ids, y = lm_batch()
    r = pt.profile(model, ids, target=y, loss_fn=lm_loss,
                   optimizer=torch.optim.Adam(model.parameters(), lr=1e-3),
                   out_dir=str(tmp_path_factory.mktemp("lm")), name="lm", **QUICK)
    return model, r


def read_yaml(path):
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


# --- what the files hold ----------------------------------------------------------------------

@pytest.mark.parametrize("which,types", [("cnn", CNN_TYPES), ("transformer", TRANSFORMER_TYPES)])
def test_model_file_loads_with_pytorchs_parameters(which, types, request):
    model, r = request.getfixturevalue(which)[0], request.getfixturevalue(which)[-1]
    shown = poseidon.models.show(r["model"])
    assert shown["totals"]["parameters"] == trainable(model) == r["parameters"]
    assert list(shown["layers"]["type"]) == types
    # Per layer, the model file's parameters are those of the PyTorch module it came from.
    assert list(shown["layers"]["params"]) == list(r["layers"]["params"])


@pytest.mark.parametrize("which", ["cnn", "transformer"])
def test_profile_names_the_model_files_layers(which, request):
    r = request.getfixturevalue(which)[-1]
    model_layers = [l["name"] for l in read_yaml(r["model"])["layers"]]
    profile = read_yaml(r["profile"])
    assert [l["name"] for l in profile["layers"]] == model_layers
    assert profile["model"] == read_yaml(r["model"])["name"]
    assert profile["batch"] == r["batch"]
    for layer in profile["layers"]:
        assert layer["fwd_ms"] >= 0 and layer["bwd_ms"] >= 0
    assert profile["update_ms_per_mb"] > 0
    for key in ("torch", "threads", "dtype", "autocast", "date", "command", "host", "optimizer",
                "loss", "label", "method", "whole_iteration_ms"):
        assert profile["provenance"][key], key
    assert profile["provenance"]["torch"] == torch.__version__
    assert profile["provenance"]["dtype"] == "float32"
    assert profile["provenance"]["threads"] == str(torch.get_num_threads())


def test_provenance_names_the_users_optimizer(transformer, cnn):
    assert "Adam" in read_yaml(transformer[-1]["profile"])["provenance"]["optimizer"]
    assert "SGD" in read_yaml(cnn[-1]["profile"])["provenance"]["optimizer"]


@pytest.mark.parametrize("which", ["cnn", "transformer"])
@pytest.mark.parametrize("workers", [1, 8])
def test_scenario_simulates(which, workers, request):
    r = request.getfixturevalue(which)[-1]
    s = poseidon.simulate(r["scenario"], set={"cluster.workers": workers})
    assert s["workers"] == workers
    assert s["iteration_ms"] > 0
    assert s["warnings"] == []
    assert s["compute_source"].startswith("profile")


@pytest.mark.parametrize("which", ["cnn", "transformer"])
def test_one_worker_prediction_replays_the_measured_sum(which, request):
    # DWBP off, one worker: the simulator adds every layer's forward and backward and the
    # update, as a PyTorch iteration runs them one after the other (rounding: 1 ns a layer).
    r = request.getfixturevalue(which)[-1]
    assert r["predicted_iteration_ms"] == pytest.approx(r["layers_sum_ms"],
                                                        abs=1e-5 * len(r["layers"]) + 1e-6)


@pytest.mark.skipif(not os.access(CLI, os.X_OK), reason="no poseidon binary (set POSEIDON_CLI)")
def test_cli_runs_the_written_scenario(cnn):
    r = cnn[-1]
    p = subprocess.run([CLI, "simulate", r["scenario"], "--set", "cluster.workers=8", "--format",
                        "json"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == poseidon.simulate(r["scenario"], set={"cluster.workers": 8})


@pytest.mark.skipif(not hasattr(torch, "is_autocast_cpu_enabled"), reason="no CPU autocast")
def test_callers_autocast_is_profiled_and_recorded(tmp_path):
    # Each iteration's forward runs in its own autocast region: the caller's region must not
    # keep weights cast without gradients from the shape runs (backward() would then fail).
    x, y = cnn_batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        r = pt.profile(SmallCNN(), x, target=y, out_dir=str(tmp_path), name="m", **QUICK)
    provenance = read_yaml(r["profile"])["provenance"]
    assert provenance["autocast"].startswith("on (bfloat16")
    assert provenance["dtype"] == "float32"
    assert poseidon.simulate(r["scenario"])["iteration_ms"] > 0


def test_model_returning_a_tuple_needs_a_loss(tmp_path):
    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(x), self.fc(x)

    msg = refusal(Pair(), torch.randn(2, 4), tmp_path)
    assert "not one tensor but a tuple" in msg and "loss_fn" in msg


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (a GPU profile "
                    "cannot be made on this machine)")
def test_gpu_profile(tmp_path):
    # CUDA events instead of the CPU clock, pcie_gbs measured: the files load and simulate.
    x, y = cnn_batch()
    r = pt.profile(SmallCNN().cuda(), x, target=y, out_dir=str(tmp_path), name="m", **QUICK)
    profile = read_yaml(r["profile"])
    assert profile["backend"] == "cuda" and profile["pcie_gbs"] > 0
    assert poseidon.simulate(r["scenario"], set={"cluster.workers": 8})["iteration_ms"] > 0


def test_users_model_is_not_trained(cnn):
    model, before, _ = cnn
    after = model.state_dict()
    assert before.keys() == after.keys()
    for k in before:
        assert torch.equal(before[k], after[k]), k


# --- mappings beyond the two models -----------------------------------------------------------

def profile_of(model, x, tmp_path, **kw):
    r = pt.profile(model, x, out_dir=str(tmp_path), name="m", **QUICK, **kw)
    shown = poseidon.models.show(r["model"])
    assert shown["totals"]["parameters"] == trainable(model)
    return read_yaml(r["model"])["layers"]


class SequenceFirst(nn.Module):
    """nn.TransformerEncoder (sequence first, causal mask), positions from an nn.Embedding of a
    buffer 0..S-1, a head tied to the token embedding."""

    def __init__(self, vocab=32, d=8, seq=6):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        layer = nn.TransformerEncoderLayer(d, 2, 16, activation="gelu")
        self.enc = nn.TransformerEncoder(layer, 1)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight
        self.register_buffer("positions", torch.arange(seq))
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1))

    def forward(self, ids):
        x = (self.tok(ids) + self.pos(self.positions)).transpose(0, 1)
        return self.head(self.enc(x, mask=self.mask).transpose(0, 1))


def test_sequence_first_encoder_causal_mask_and_tied_head(tmp_path):
    ids = torch.randint(0, 32, (2, 6))
    layers = profile_of(SequenceFirst(), ids, tmp_path, target=ids, loss_fn=lm_loss)
    by_type = {}
    for l in layers:
        by_type.setdefault(l["type"], []).append(l)
    assert by_type["attention"][0]["causal"] is True
    assert by_type["pos_embedding"][0]["max_len"] == 6
    assert by_type["linear"][-1]["tie"] == by_type["embedding"][0]["name"]


def test_residual_on_the_input_gets_an_input_layer_and_no_loss_is_allowed(tmp_path):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 3, 3, padding=1)
            self.fc = nn.Linear(3 * 4 * 4, 5)

        def forward(self, x):
            return self.fc((x + self.conv(x)).view(x.shape[0], -1))

    layers = profile_of(M(), torch.randn(2, 3, 4, 4), tmp_path)
    assert layers[0]["name"] == "input" and layers[0]["type"] == "dropout"
    assert sorted(layers[2]["bottom"]) == ["conv", "input"]
    assert [l["type"] for l in layers][-1] == "fc"  # no target, no loss: no softmax_loss


def bench_twins():
    """bench/torch_profile_check.py's models: PyTorch twins of shipped model files."""
    import importlib.util
    path = os.path.join(ROOT, "bench", "torch_profile_check.py")
    spec = importlib.util.spec_from_file_location("torch_profile_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TWINS


@pytest.mark.parametrize("shipped", ["fmnist_cnn", "fmnist_mlp", "fmnist_vit"])
def test_twins_of_shipped_models_give_the_shipped_files(shipped, tmp_path):
    # The accuracy figures of docs/torch.md are for these models: the files profile() writes for
    # them must describe the shipped models (same layers, parameters, multiply-accumulates).
    torch.manual_seed(0)
    model = bench_twins()[shipped]()
    r = pt.profile(model, torch.randn(2, 1, 28, 28), target=torch.randint(0, 10, (2,)),
                   out_dir=str(tmp_path), name=shipped + "_torch", **QUICK)
    mine, theirs = poseidon.models.show(r["model"]), poseidon.models.show(shipped)
    assert list(mine["layers"]["type"]) == list(theirs["layers"]["type"])
    for key in ("parameters", "forward_macs_per_image", "forward_flops_per_image",
                "activation_bytes_per_image"):
        assert mine["totals"][key] == theirs["totals"][key], key


class BasicBlock(nn.Module):
    """torchvision's ResNet block as torchvision writes it: one ReLU module called twice, an
    in-place residual add, a downsample branch only where the shape changes."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        out += identity
        return self.relu(out)


class ResNet18(nn.Module):
    """torchvision's resnet18 (no torchvision on Debian 12's python3-torch)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        for i, (cin, cout, stride) in enumerate([(64, 64, 1), (64, 128, 2), (128, 256, 2),
                                                 (256, 512, 2)], 1):
            setattr(self, "layer%d" % i, nn.Sequential(BasicBlock(cin, cout, stride),
                                                       BasicBlock(cout, cout, 1)))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, 1000)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def test_torchvision_resnet18_gives_the_shipped_resnet18(tmp_path):
    r = pt.profile(ResNet18(), torch.randn(2, 3, 224, 224), target=torch.randint(0, 1000, (2,)),
                   out_dir=str(tmp_path), name="resnet18_torch", **QUICK)
    mine, theirs = poseidon.models.show(r["model"]), poseidon.models.show("resnet18")
    for key in ("layers", "parameters", "forward_macs_per_image", "forward_flops_per_image",
                "activation_bytes_per_image"):
        assert mine["totals"][key] == theirs["totals"][key], key


class Inception(nn.Module):
    """Branches joined by torch.cat on channels, functional pooling and dropout, a log-softmax
    and NLL loss: the Caffe-era spellings."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 1)
        self.b = nn.Conv2d(3, 6, 3, padding="same")
        self.fc = nn.Linear(10 * 4 * 4, 5)

    def forward(self, x):
        x = torch.cat([self.a(x), F.relu(self.b(x))], dim=1)
        x = F.avg_pool2d(F.max_pool2d(x, 3, stride=1, padding=1), 2)
        return F.log_softmax(self.fc(F.dropout(x.view(x.size(0), -1), 0.3)), dim=1)


def test_branches_concat_and_functional_forms(tmp_path):
    layers = profile_of(Inception(), torch.randn(2, 3, 8, 8), tmp_path,
                        target=torch.randint(0, 5, (2,)), loss_fn=F.nll_loss)
    assert [l["type"] for l in layers] == ["conv", "conv", "relu", "concat", "pool", "pool",
                                           "dropout", "fc", "softmax", "softmax_loss"]
    concat = layers[3]
    assert concat["bottom"] == ["a", "relu"]
    assert (layers[4]["kernel"], layers[4]["pad"], layers[5]["stride"]) == (3, 1, 2)
    assert layers[1]["pad"] == 1  # padding="same" with a 3x3 kernel
    assert layers[6]["ratio"] == 0.3


# --- refusals ---------------------------------------------------------------------------------

class WithActivation(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 4, 3))
        self.body.add_module("act", act)
        self.fc = nn.Linear(4 * 10 * 10, 10)

    def forward(self, x):
        return self.fc(self.body(x).flatten(1))


def refusal(model, x, tmp_path, **kw):
    with pytest.raises(ValueError) as e:
        pt.profile(model, x, out_dir=str(tmp_path), name="m", **QUICK, **kw)
    assert not os.path.exists(tmp_path / "m_profile.yaml")  # refused before measuring
    return str(e.value)


def test_unmappable_module_is_refused_by_name(tmp_path):
    x, y = cnn_batch()
    msg = refusal(WithActivation(nn.SiLU()), x, tmp_path, target=y)
    assert "module 'body.act'" in msg and "SiLU" in msg
    assert "poseidon models import" in msg  # what to do


def test_untraceable_model_says_where_and_why(tmp_path):
    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = WithActivation(nn.ReLU())

        def forward(self, x):
            return self.inner(x)

    def data_dependent(self, x):
        return self.fc(self.body(x).flatten(1)) if x.sum() > 0 else self.fc(x.flatten(1))

    model = Branchy()
    model.inner.forward = data_dependent.__get__(model.inner)
    msg = refusal(model, cnn_batch()[0], tmp_path)
    assert "torch.fx cannot trace module 'inner'" in msg and "control flow" in msg


class Gained(WithActivation):
    def __init__(self):
        super().__init__(nn.ReLU())
        self.gain = nn.Parameter(torch.ones(1, 12, 12))

    def forward(self, x):
        return super().forward(x * self.gain)


@pytest.mark.parametrize("case,needle", [
    ("dilated", "dilated"),
    ("shared", "called 2 times"),
    ("frozen", "frozen"),
    ("unused", "'extra.weight'"),
    ("mse", "only loss is softmax_loss"),
    ("scale by parameter", "parameter 'gain'"),
])
def test_refusals_name_the_cause(case, needle, tmp_path):
    x, y = cnn_batch()
    kw = dict(target=y)
    if case == "dilated":
        model = WithActivation(nn.ReLU())
        model.body[0] = nn.Conv2d(1, 4, 3, dilation=2, padding=1)
    elif case == "shared":
        model = nn.Sequential(nn.Conv2d(1, 1, 3, padding=1), nn.Flatten(), nn.Linear(144, 10))
        conv = model[0]
        model = nn.Sequential(conv, conv, *list(model)[1:])
    elif case == "frozen":
        model = WithActivation(nn.ReLU())
        model.fc.bias.requires_grad_(False)
    elif case == "unused":
        model = WithActivation(nn.ReLU())
        model.extra = nn.Linear(2, 2)
    elif case == "mse":
        model = WithActivation(nn.ReLU())
        kw = dict(target=torch.randn(4, 10), loss_fn=nn.MSELoss())
    else:
        model = Gained()
    assert needle in refusal(model, x, tmp_path, **kw)


def test_two_model_inputs_are_refused(tmp_path):
    x, _ = cnn_batch()
    msg = refusal(WithActivation(nn.ReLU()), (x, x), tmp_path)
    assert "one input" in msg
