"""Placeholder training entry point of the example: checks the GPU and exits."""

import torch

print(torch.__version__, torch.cuda.is_available())
