"""The error every data reader raises for input it cannot read."""


class DataFormatError(ValueError):
    """Input data that does not have the expected format; the message names the file."""
