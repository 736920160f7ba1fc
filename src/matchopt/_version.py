"""The installed package version, in a module of its own so that any module can import it
without importing the package ``__init__`` (which imports most modules)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("matchopt")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0+unknown"
