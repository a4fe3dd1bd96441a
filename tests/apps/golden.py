"""Golden-output checks shared by the tests that compare a command's output with a reviewed file
(models_show_golden.py, plan_golden.py)."""
import os


def check_goldens(golden_dir, cases, update, what):
    """cases: name -> (command text for messages, a function returning the output now). With
    update, writes each output as its golden; otherwise compares and prints what differs.
    Returns the process exit code (1 if any output differs)."""
    bad = 0
    for name, (command, produce) in cases.items():
        path = os.path.join(golden_dir, name + ".txt")
        got = produce()
        if update:
            with open(path, "w") as f:
                f.write(got)
            continue
        with open(path) as f:
            want = f.read()
        if got != want:
            bad += 1
            print("%s: `%s` differs from %s" % (name, command, path))
    if not update:
        print("%d of %d %s print their golden output" % (len(cases) - bad, len(cases), what))
    return 1 if bad else 0
