"""Figure conventions shared by the plot_*.py scripts: one look, and byte-identical files.

    import matplotlib
    matplotlib.use("Agg")             # each script, before pyplot: files only, no display
    from matplotlib import pyplot as plt
    import poseidon_plot
    poseidon_plot.setup()
    fig, ax = plt.subplots(figsize=poseidon_plot.FIGSIZE)
    ...
    poseidon_plot.save(fig, "out/speedup")    # writes out/speedup.png and out/speedup.svg

The same input gives the same PNG and SVG bytes: the SVG ids are salted with a fixed string and
neither file records a date or the matplotlib version.
"""

import os

import matplotlib

FIGSIZE = (7.0, 4.5)  # inches
PNG_DPI = 150
IDEAL_STYLE = dict(color="black", linestyle="--", linewidth=1.2, zorder=1.5)  # under the data


def setup():
    """Sets the rcParams every figure relies on. Call before creating figures."""
    matplotlib.rcParams.update({
        "svg.hashsalt": "poseidon",  # fixed clip-path/glyph ids: the SVG is byte-identical
        "svg.fonttype": "path",      # text as paths: the SVG looks the same without the fonts
        "axes.grid": True,
        "grid.alpha": 0.35,
        "legend.fontsize": "small",
        "legend.framealpha": 0.9,
    })


def stem_of(out):
    """-o accepts a stem ("out/speedup") or a file name ("out/speedup.png") for the same files."""
    root, ext = os.path.splitext(out)
    return root if ext.lower() in (".png", ".svg") else out


def save(fig, out):
    """Writes STEM.png and STEM.svg and closes the figure; returns both paths. A folder that
    does not exist is a ValueError naming it (the scripts report it on one line, exit status 2)."""
    from matplotlib import pyplot as plt  # the caller has chosen the backend by now

    stem = stem_of(out)
    folder = os.path.dirname(stem)
    if folder and not os.path.isdir(folder):
        plt.close(fig)
        raise ValueError("cannot write %s.png: folder '%s' does not exist; create it first"
                         % (stem, folder))
    paths = [stem + ".png", stem + ".svg"]
    try:
        fig.savefig(paths[0], dpi=PNG_DPI, metadata={"Software": None})
        fig.savefig(paths[1], metadata={"Date": None, "Creator": None})
    except OSError as e:
        raise ValueError("cannot write %s: %s" % (e.filename or stem, e.strerror or e)) from None
    finally:
        plt.close(fig)
    return paths
