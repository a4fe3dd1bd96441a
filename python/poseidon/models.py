"""The model library, as `poseidon models list` and `poseidon models show NAME` report it.

    poseidon.models.list()                  # DataFrame: name, layers, parameters, ...
    m = poseidon.models.show("googlenet", without=["aux"])
    m["layers"]                             # DataFrame: one row per layer
    m["totals"]["parameters"]
    print(poseidon.models.show_text("alexnet"))   # the CLI's table, byte for byte
"""

from . import _ext
from . import _frames

LIST_COLUMNS = ["name", "layers", "parameters", "macs_per_image", "description"]
LAYER_COLUMNS = ["id", "name", "type", "output", "out_c", "out_h", "out_w", "params",
                 "macs_per_image", "activation_bytes"]


def list(data_dir=None):  # noqa: A001 -- the subcommand's name
    """One row per model file in DATA_DIR/models (default: the built-in library): name, number
    of layers, parameters, forward multiply-accumulates per image, description."""
    return _frames.frame(_ext.models_list(data_dir), LIST_COLUMNS)


def show(name, without=(), data_dir=None):
    """One model (a library name or a path to a .yaml file), its layers in groups `without`
    left out. Returns a dict: model, file, description, input (C, H, W), num_classes, without,
    layers (a DataFrame with the CLI's per-layer columns; `output` is "CxHxW" and out_c, out_h,
    out_w its parts) and totals (layers, parameters, parameter_bytes_fp32,
    forward_macs_per_image, forward_flops_per_image, activation_bytes_per_image)."""
    info = _ext.models_show(name, set(without), data_dir)
    rows = []
    for layer in info["layers"]:
        c, h, w = layer["output"]
        row = dict(layer)
        row.update(output="%dx%dx%d" % (c, h, w), out_c=c, out_h=h, out_w=w)
        rows.append(row)
    info["layers"] = _frames.frame(rows, LAYER_COLUMNS)
    return info


def list_text(data_dir=None):
    """The text `poseidon models list` prints."""
    return _ext.models_list_text(data_dir)


def show_text(name, without=(), data_dir=None):
    """The text `poseidon models show NAME [--without G ...]` prints."""
    return _ext.models_show_text(name, set(without), data_dir)

