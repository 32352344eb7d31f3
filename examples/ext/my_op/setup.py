"""my_op: a small custom CUDA extension built against the image's own torch (see examples/custom-ext.toml).

Built by torchkiln's extensions stage with ``pip wheel --no-build-isolation`` and
``TORCH_CUDA_ARCH_LIST`` from the spec's GPU targets; the runtime image gets only the wheel.
"""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="my-op",
    version="0.1.0",
    description="axpby (out = a*x + b*y) as a CUDA kernel: a torchkiln example extension",
    packages=["my_op"],
    ext_modules=[
        CUDAExtension(
            name="my_op._C",
            sources=["csrc/my_op.cpp", "csrc/my_op_kernel.cu"],
            extra_compile_args={"cxx": ["-O2"], "nvcc": ["-O2"]},
        )
    ],
    cmdclass={"build_ext": BuildExtension},
    install_requires=["torch"],
    python_requires=">=3.9",
)
