"""Read images, wheels and binaries without running them: layers, waste, CUDA architectures.

``fatbin`` lists the device code embedded in an ELF file (stdlib-only, reused by verify);
the image readers live in :mod:`torchkiln.images` (formats); ``waste`` and ``coverage``
are pure functions over what was read; ``report`` holds the result types and their JSON form;
``analyze`` ties them together for the CLI.
"""

from torchkiln.inspect.fatbin import FatbinEntry, list_entries

__all__ = ["FatbinEntry", "list_entries"]
