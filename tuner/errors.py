"""The tool's exceptions, in one place: what a user can fix, and what is the tuner's own fault.

The CLI turns an ``InputError`` (and its subclasses) into ``error: <message>`` and exit code 2, with no
traceback: the message names the input (file, line, key, flag) and what is wrong with it.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input (a file, a flag, a name): the message says which input and what is wrong."""


class BenchInputError(InputError):
    """A benchmark input (dataset file, tokenizer, option value) is unusable; the message says which."""


class HarnessError(RuntimeError):
    """A failure of the tuner's own machinery (not of the config): recorded FAIL and retried."""
