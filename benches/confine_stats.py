"""What benches/confine_cost.py and benches/wrapper_gated.py share: the
binaries they time, and the figures they report:
for each (binary, confinement) variant two series of samples, their median
and mean of the middle half (the machine is shared: a mean of all is the
load's), and what `auto` adds to `none` for each binary."""
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def binaries(default):
    """The binaries named on the command line (made absolute), or, when none
    is, `target/release/<default>` after a release build."""
    bins = [os.path.abspath(b) for b in sys.argv[1:]]
    if not bins:
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
        bins = [os.path.join(ROOT, "target/release", default)]
    return bins


def mid(xs):
    """The mean of the middle half of `xs`."""
    xs = sorted(xs)
    q = len(xs) // 4
    m = xs[q:len(xs) - q]
    return sum(m) / len(m)


def tables(first, names, bins, res, scale=1.0, digits=0):
    """Print both tables. `res[(bin, mode)]` holds the two series named
    `names`, in that order; each figure is divided by `scale` and shown with
    `digits` decimals; `first` heads the binaries' column."""
    cols = [f"{n} {how}" for n in names for how in ("median", "mid-mean")]

    def figures(a, b):
        return [statistics.median(a), mid(a), statistics.median(b), mid(b)]

    def row(head, values, sign=""):
        return "| " + " | ".join(head + [f"{v / scale:{sign}.{digits}f}" for v in values]) + " |"

    print(f"| {first} | confinement | " + " | ".join(cols) + " |")
    print("| --- | --- |" + " ---: |" * len(cols))
    for b in bins:
        for mode in ("none", "auto"):
            print(row([b, mode], figures(*res[(b, mode)])))
    print()
    print(f"| {first} | confinement adds: " + " | ".join(cols) + " |")
    print("| --- |" + " ---: |" * len(cols))
    for b in bins:
        none, auto = figures(*res[(b, "none")]), figures(*res[(b, "auto")])
        print(row([b], [a - n for a, n in zip(auto, none)], "+"))
