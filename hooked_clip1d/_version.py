"""The package version and the default model's name: torch-free, so the command line's parser and any layer can
read them without importing the package's models."""

__version__ = "0.1.0"
DEFAULT_MODEL = "simplified-ntot20-n2-10"  # the flagship: what demo, eval and analyze use unless told otherwise
