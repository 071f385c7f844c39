"""The error the engine raises for bad input.

`InputError` is a ValueError (Python's kind for a bad argument) and a RuntimeError (the kind
flash-attn's C++ checks raise), so code written for either, e.g. a caller that catches
RuntimeError from `flash_attn_func` to fall back to another attention, catches it here too.
Features the engine does not support yet raise NotImplementedError instead, naming the feature.
"""


class InputError(ValueError, RuntimeError):
    """An argument the engine refuses: a wrong type, shape, dtype, device or value."""
