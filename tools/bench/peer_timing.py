"""What programs_torch.py and train_torch.py share: their command line and their timing loop,
the same as kiln-programs' and kiln-train's (3 untimed calls, then the median of --reps)."""
import statistics
import sys
import time


def median_ms(f, reps):
    for _ in range(3):
        f()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        f()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def parse_args(argv, known, default_reps, tool):
    """(reps, threads, names) from [--reps N] [--threads T] [NAME...]; names must be in `known`."""
    reps, threads, names = default_reps, 2, []
    i = 0
    while i < len(argv):
        if argv[i] == "--reps":
            reps, i = int(argv[i + 1]), i + 2
        elif argv[i] == "--threads":
            threads, i = int(argv[i + 1]), i + 2
        else:
            names.append(argv[i])
            i += 1
    for n in names:
        if n not in known:
            sys.exit(f"{tool}: no program '{n}'")
    return reps, threads, names
