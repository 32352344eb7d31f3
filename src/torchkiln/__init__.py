"""torchkiln: build production PyTorch + CUDA container images from one declarative spec."""

__version__ = "0.1.0"
