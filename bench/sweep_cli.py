"""GPU benchmark commands, registered into the ``replayssm-bench`` CLI."""


def register(sub):
    from . import sweep
    sweep.register(sub)
    try:  # the accuracy study module is optional until it lands
        from . import accuracy
    except ImportError:
        accuracy = None
    if accuracy is not None:
        accuracy.register(sub)
    return sub
