"""The example app: proves torch works in the image and prints what it runs on."""

import torch

x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}) - sum of 0..11 = {x.sum().item():.0f}")
