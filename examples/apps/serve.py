"""Placeholder serving entry point of the example: prints the devices torch sees."""

import torch

for i in range(torch.cuda.device_count()):
    print(i, torch.cuda.get_device_name(i), torch.cuda.get_device_capability(i))
