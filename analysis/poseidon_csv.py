"""Reads the CSV that `poseidon sweep SWEEP.yaml -o out.csv` writes, for the plotting scripts.

The CSV's first columns are the sweep's axes, named by their dotted scenario path
(`cluster.workers`, `cluster.network.bandwidth_gbps`) or `variant` for a named-variant axis; then
the result columns, starting with `name`; last comes `error`, non-empty where a point failed.

    sweep = poseidon_csv.read_sweep("out.csv")        # skips failed points, warns on stderr
    sweep = poseidon_csv.read(df)                     # or a DataFrame (poseidon.sweep(), python/)
    sweep.require("speedup")                          # ValueError naming the file and columns
    for s in poseidon_csv.group_series(sweep, "cluster.workers"):
        print(s.label, s.numbers("cluster.workers"), s.numbers("speedup"))

Every problem with the input is a ValueError whose message is one line naming the file (and the
line or column); run_cli() turns it into "PROG: error: MESSAGE" on stderr and exit status 2.
Standard library only: no matplotlib here, so the grouping is testable without drawing.
"""

import csv
import io
import os
import re
import sys

FIRST_RESULT_COLUMN = "name"  # the axes are the columns before it
VARIANT_COLUMN = "variant"
ERROR_COLUMN = "error"

# Only text of this shape becomes a number, so that a variant named "nan" or "inf" stays a name.
_INT = re.compile(r"[+-]?\d+\Z")
_FLOAT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\Z")


def convert(text):
    """Returns int or float for numeric text, None for an empty field, the text otherwise."""
    text = text.strip()
    if text == "":
        return None
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    return text


def format_value(value):
    """Formats a cell for a label: 10 not 10.0, 0.5 not 0.50000."""
    if isinstance(value, float):
        return "%g" % value
    return "" if value is None else str(value)


def prog_name():
    return os.path.basename(sys.argv[0]) or "poseidon-plot"


class Row(dict):
    """One CSV record: column -> converted value; `line` is its line in the file (for errors)."""

    def __init__(self, values, line):
        super().__init__(values)
        self.line = line


class Sweep:
    """A sweep CSV read into memory: its columns, axis columns, and the successful rows."""

    def __init__(self, path, columns, rows, skipped):
        self.path = path
        self.columns = columns
        self.axes = columns[: columns.index(FIRST_RESULT_COLUMN)]
        self.rows = rows
        self.skipped = skipped  # rows left out because their `error` was non-empty

    def require(self, *names):
        """Raises ValueError for the first of `names` that is not a column."""
        for name in names:
            if name not in self.columns:
                raise ValueError("column '%s' not in %s; columns are: %s"
                                 % (name, self.path, ", ".join(self.columns)))

    def number(self, row, column):
        """Returns row[column] as a float, or raises ValueError naming file, line and column."""
        value = row.get(column)
        if _is_number(value):
            return float(value)
        raise ValueError("%s:%d: column '%s' is '%s'; expected a number"
                         % (self.path, row.line, column, format_value(value)))


def read_sweep(path, warn=None):
    """Reads a `poseidon sweep` CSV. Rows with a non-empty `error` are skipped and reported
    through warn(message) (default: one "PROG: warning: ..." line each on stderr)."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            header, records = _parse(f, path)
    except OSError as e:
        raise ValueError("cannot read %s: %s" % (path, e.strerror or e)) from None
    except UnicodeDecodeError as e:
        raise ValueError("%s is not a readable CSV file: %s" % (path, e)) from None
    return _sweep_of(path, header, records, warn)


def read_frame(frame, warn=None, name="<DataFrame>"):
    """Reads a sweep held in a pandas DataFrame with the CSV's columns (what poseidon.sweep()
    of the Python module returns, or pandas.read_csv of the CSV), as read_sweep() reads the
    file; `name` stands for the file in messages, line N for the frame's row N - 2."""
    # The frame written back as CSV and read as the file is: empty cells (NaN) become empty
    # fields, numbers become the same ints and floats.
    return _sweep_of(name, *_parse(io.StringIO(frame.to_csv(index=False)), name), warn)


def read(source, warn=None):
    """A sweep from a CSV path, a DataFrame (read_frame) or an already read Sweep."""
    if isinstance(source, Sweep):
        return source
    if hasattr(source, "to_csv") and hasattr(source, "columns"):  # a DataFrame; pandas optional
        return read_frame(source, warn)
    return read_sweep(source, warn)


def _parse(f, path):
    """Returns (header, [(line, record)]) of a `poseidon sweep` CSV open as f."""
    try:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise ValueError("%s is empty; expected the CSV that `poseidon sweep` writes" % path)
        header = [h.strip() for h in header]
        if FIRST_RESULT_COLUMN not in header:
            raise ValueError("column '%s' not in %s, so it is not a `poseidon sweep` CSV; "
                             "columns are: %s" % (FIRST_RESULT_COLUMN, path, ", ".join(header)))
        records = []
        start = reader.line_num + 1  # a quoted field may span lines: report the first
        for record in reader:
            if record and record != [""]:  # else a blank line
                if len(record) != len(header):
                    raise ValueError("%s:%d: %d fields where the header has %d"
                                     % (path, start, len(record), len(header)))
                records.append((start, record))
            start = reader.line_num + 1
    except csv.Error as e:
        raise ValueError("%s is not a readable CSV file: %s" % (path, e)) from None
    return header, records


def _sweep_of(path, header, records, warn):
    if warn is None:
        warn = lambda message: print("%s: warning: %s" % (prog_name(), message), file=sys.stderr)
    sweep = Sweep(path, header, [], 0)
    for line, record in records:
        row = Row({c: (v if c == ERROR_COLUMN else convert(v)) for c, v in zip(header, record)},
                  line)
        error = " ".join(row.get(ERROR_COLUMN, "").split())  # a deadlock report spans lines
        if error:
            point = ", ".join("%s=%s" % (a, format_value(row[a])) for a in sweep.axes)
            warn("%s:%d: skipping failed point %s: %s" % (path, line, point or "(no axes)", error))
            sweep.skipped += 1
            continue
        sweep.rows.append(row)
    if not sweep.rows:
        raise ValueError("%s has no successful points (%d rows, %d failed)"
                         % (path, len(records), sweep.skipped))
    return sweep


def series_label(values):
    """"k=v, k=v" for the axes that tell series apart; a lone `variant` axis is its value alone."""
    if list(values) == [VARIANT_COLUMN]:
        return format_value(values[VARIANT_COLUMN])
    return ", ".join("%s=%s" % (k, format_value(v)) for k, v in values.items())


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def value_order(rows, column):
    """Returns value -> rank for a column: numbers ascending when every value is a number, else
    the order of first appearance (a sweep lists variants in the order its author chose)."""
    values = list(dict.fromkeys(r.get(column) for r in rows))
    if all(_is_number(v) for v in values):
        values.sort()
    return {v: i for i, v in enumerate(values)}


class Series:
    """The rows that share every axis value except x, sorted by x (see value_order)."""

    def __init__(self, sweep, values, rows, x, x_order):
        self.sweep = sweep
        self.values = values  # axis -> value common to these rows (x excluded)
        self.label = series_label(values)
        self.x = x
        self.rows = sorted(rows, key=lambda r: x_order[r[x]])

    def column(self, name):
        return [r[name] for r in self.rows]

    def numbers(self, name):
        """The column as floats; ValueError (file:line) on a non-numeric cell."""
        return [self.sweep.number(r, name) for r in self.rows]


def group_series(sweep, x):
    """Groups the rows into series by every axis column except `x`. Series are ordered by their
    axis values and points by x, each axis ordered as value_order says. With no other axis there
    is one series, labelled by the scenario `name`."""
    sweep.require(x)
    others = [a for a in sweep.axes if a != x]
    orders = {a: value_order(sweep.rows, a) for a in others + [x]}
    groups = {}
    for row in sweep.rows:
        key = tuple(row[a] for a in others)
        groups.setdefault(key, []).append(row)
    series = []
    for key in sorted(groups, key=lambda k: [orders[a][v] for a, v in zip(others, k)]):
        rows = groups[key]
        s = Series(sweep, dict(zip(others, key)), rows, x, orders[x])
        if not others:
            names = dict.fromkeys(format_value(r.get(FIRST_RESULT_COLUMN)) for r in rows)
            s.label = ", ".join(names)
        series.append(s)
    return series


def concat(sweeps):
    """One Sweep of the rows of several with the same axes (two sweeps of one study, say one
    whose points stop at 8 machines); ValueError naming both files when the axes differ."""
    first = sweeps[0]
    for other in sweeps[1:]:
        if other.axes != first.axes:
            raise ValueError("%s has the axes %s, %s has %s; plot sweeps together only when they "
                             "vary the same keys" % (first.path, ", ".join(first.axes),
                                                     other.path, ", ".join(other.axes)))
    rows = [r for s in sweeps for r in s.rows]
    return Sweep(" + ".join(s.path for s in sweeps), first.columns, rows,
                 sum(s.skipped for s in sweeps))


def only(sweep, column, value):
    """The rows with `column` == value, as a Sweep without that axis (one facet of a figure)."""
    sweep.require(column)
    columns = [c for c in sweep.columns if c != column]
    rows = [Row({c: v for c, v in r.items() if c != column}, r.line)
            for r in sweep.rows if r.get(column) == value]
    return Sweep("%s (%s=%s)" % (sweep.path, column, format_value(value)), columns, rows, 0)


def run_cli(main, argv=None):
    """Runs main(argv); a ValueError becomes one "PROG: error: ..." line on stderr and status 2."""
    try:
        main(sys.argv[1:] if argv is None else argv)
    except ValueError as e:
        message = " ".join(str(e).split())  # one line, whatever the message held
        print("%s: error: %s" % (prog_name(), message), file=sys.stderr)
        return 2
    return 0
