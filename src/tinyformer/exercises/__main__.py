"""``python -m tinyformer.exercises ID FILE``: check a coding exercise
(:mod:`tinyformer.exercises.cli`)."""

import os
import signal
import sys

STOPPED = "\nStopped by Ctrl-C; nothing was certified."


def _run() -> int:
    # A Ctrl-C while torch loads would abort inside its C++ code (pybind11:
    # "terminate called after throwing an instance of error_already_set"):
    # note it and stop once the import is done.
    pressed: list[int] = []
    previous = signal.signal(
        signal.SIGINT, lambda number, frame: pressed.append(number)
    )
    try:
        from tinyformer.exercises.cli import main
    finally:
        signal.signal(signal.SIGINT, previous)
    if pressed:
        print(STOPPED)
        return 130
    try:
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
