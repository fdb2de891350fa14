"""``UserError``: a mistake in what the user gave (a flag, a file, a config), printed as one line with exit status 2.

Why a module of its own: the CLI prints these, but they are raised by the configuration parser, the history reader
and every command; with the class in ``autoscaler.cli`` the configuration (which the controller imports) had to
import the command-line dispatcher. Anything that raises it imports it from here; ``autoscaler.cli`` catches it.
"""

from __future__ import annotations


class UserError(Exception):
    """An error caused by the user's input; printed as one line, exit status 2."""
