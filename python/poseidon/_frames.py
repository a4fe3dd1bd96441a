"""Small helpers shared by the package's modules: --set overrides and DataFrames."""

import json
import os


def overrides(values):
    """Turns `set` into the CLI's KEY=VALUE strings (`--set` reads VALUE as YAML).

    A mapping gives one override per item, its value written as YAML would read it back: True
    -> true, None -> null, 0.5 -> 0.5, lists and dicts as JSON (JSON is YAML), strings as they
    are (so "10" is a number, as on the command line). A list or tuple is taken as KEY=VALUE
    strings already. None means no overrides.
    """
    if values is None:
        return []
    if isinstance(values, str):
        return [values]
    if isinstance(values, dict):
        out = []
        for key, value in values.items():
            if isinstance(value, str):
                text = value
            elif value is None or isinstance(value, (bool, int, float, list, tuple, dict)):
                text = json.dumps(value)
            else:
                text = str(value)
            out.append("%s=%s" % (key, text))
        return out
    return [str(v) for v in values]


def path(value):
    """A scenario or sweep argument as a path string (str or os.PathLike)."""
    return os.fspath(value)


def frame(rows, columns=None):
    """A pandas DataFrame of `rows` (a list of dicts); pandas is imported only when needed."""
    import pandas

    return pandas.DataFrame(rows, columns=columns)
