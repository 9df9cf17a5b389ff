"""What the bench's check scripts share: their failure line and how they
split their own options from the bench command they run."""
import sys


def fail(name, msg):
    print(f"{name}: FAIL: {msg}")
    sys.exit(1)


def split_command(name, usage):
    """sys.argv[1:] as (FILE, options before "--", the command after it)."""
    argv = sys.argv[1:]
    if "--" not in argv or argv.index("--") == 0:
        fail(name, "usage: " + usage)
    cut = argv.index("--")
    opts, cmd = argv[:cut], argv[cut + 1:]
    return opts.pop(0), opts, cmd
