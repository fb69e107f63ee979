"""GPU benchmark commands (registered into the CLI); each lives in its own module."""


def register(sub):
    return sub
