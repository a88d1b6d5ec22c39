"""The errors of a LaTeX log, one line each: what ``nox -s pdf`` prints when XeLaTeX stops.

latexmk's summary ("Refer to 'tinyformer.log'") names no error; a missing character, for one, is only in the
log (``! Missing character: There is no α ("3B1) in font cmmi10.``, wrapped at 79 columns).
"""

from __future__ import annotations

import re


def latex_errors(log: str) -> list[str]:
    """Each ``! ...`` message of ``log`` (the text of a ``.log`` file), its wrapped lines joined, with the
    source line TeX names after it (``l.137 ...``) when there is one."""
    lines = log.splitlines()
    errors = []
    for index, line in enumerate(lines):
        if not line.startswith("! "):
            continue
        message = line[2:]
        # TeX wraps log lines at 79 characters: a full-width line continues on the next one
        following = index + 1
        while len(lines[following - 1]) >= 79 and following < len(lines):
            message += lines[following]
            following += 1
        place = next(
            (
                re.sub(r"\s+", " ", later).strip()
                for later in lines[following : following + 8]
                if later.startswith("l.")
            ),
            "",
        )
        errors.append(f"{message} (at {place})" if place else message)
    return errors
