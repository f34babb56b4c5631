"""Errors that reach the user as one line of text."""


class FuseplanError(Exception):
    """A problem with the user's input (file, model, option).

    The command-line interface prints ``error: <message>`` and exits with
    status 2; library users catch it like any other exception.
    """
