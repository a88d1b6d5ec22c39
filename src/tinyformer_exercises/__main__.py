"""``python -m tinyformer_exercises ID FILE``: check a coding exercise
(:mod:`tinyformer_exercises.cli`)."""

import os
import sys

STOPPED = "\nStopped by Ctrl-C; nothing was certified."


def _not_dumpable() -> None:
    """On Linux, make this process non-dumpable (prctl PR_SET_DUMPABLE 0):
    another process of the same user, the student's code in the checker's
    child included, can then neither read its memory (/proc/PID/mem, where
    the expected results are) nor open its files (/proc/PID/fd, the
    report). A root user still can."""
    if not sys.platform.startswith("linux"):
        return
    import contextlib
    import ctypes

    pr_set_dumpable = 4
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_dumpable, 0, 0, 0, 0)


def _run() -> int:
    _not_dumpable()
    try:
        from tinyformer_exercises.cli import main

        return main()
    except KeyboardInterrupt:
        print(STOPPED)
        return 130


if __name__ == "__main__":
    try:
        sys.exit(_run())
    # the report was piped into a command that stopped reading (| head)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
